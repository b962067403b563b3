"""Fact search: GET /api/v1/facts/search/?q=<question>&user_id=<user> over --facts facts spread
across --fact-users users, one client (hybrid by default: with a user_id the app ranks the
person's facts); then the database's own ranking of the same person's facts (captured from
facts_app.selectors.facts.fact_search_for_person), raw with psycopg, and its EXPLAIN (ANALYZE,
BUFFERS). The fact set is the context part's too."""

from __future__ import annotations

import datetime as dt
import json
import random
import re
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from bench.config import Config
from bench.harness import ApiClient, Gunicorn, Setup, pg_connect
from bench.measure import (
    BenchError,
    Latency,
    Verdict,
    cpu_line,
    cpu_per_request,
    cpu_sample,
    judged,
    say,
    section,
)
from bench.profiling import AUTH_PHASES, InProcessClient, Phase, print_profile, profile_requests

if TYPE_CHECKING:
    from memoryhub.accounts.models import Tenant

TARGET_SEARCH_P95_MS = 10.0  # API user-scoped fact search p95 at 1,000,000 facts, at most (#18)
TARGET_SEARCH_FACTS = 1_000_000
TARGET_SEARCH_USERS = 10_000

# Facts are sentences "<subject> <verb> <object> <context>." with each part drawn from 50 words
# or phrases, so a term matches about 2% of the facts (a few, like "music", more): a question's
# OR of 2-4 terms then matches some 5-10% of a user's facts, as a real store's would.
FACT_SUBJECTS = [
    "She", "He", "Her brother", "His sister", "Her mother", "His father", "Her daughter",
    "His son", "Her husband", "His wife", "Her partner", "His boss", "Her manager",
    "His colleague", "Her best friend", "His neighbour", "Her grandmother", "His grandfather",
    "Her cousin", "His uncle", "Her aunt", "His roommate", "Her teacher", "His doctor",
    "Her dentist", "His landlord", "Her coach", "His mentor", "Her team", "His family",
    "Her dog", "His cat", "Her kids", "His parents", "Her friend Anna", "His friend Tom",
    "Her nephew", "His niece", "Her girlfriend", "His boyfriend", "Her client", "His assistant",
    "Her flatmate", "His twin", "Her stepfather", "His godmother", "Her trainer",
    "His therapist", "Her bandmate", "His classmate",
]  # fmt: skip
FACT_VERBS = [
    "likes", "loves", "hates", "prefers", "dislikes", "enjoys", "avoids", "is allergic to",
    "wants to try", "recommended", "bought", "ordered", "cooks", "drinks", "plays", "collects",
    "listens to", "watches", "reads about", "talks about", "dreams about", "is afraid of",
    "is learning", "teaches", "studies", "writes about", "sells", "rents", "borrowed", "lost",
    "forgot", "misses", "booked", "cancelled", "visited", "photographed", "painted", "repaired",
    "cleaned", "shared", "gave away", "received", "asked about", "complained about",
    "laughed about", "argued about", "saved money for", "paid for", "signed up for", "gave up",
]  # fmt: skip

# (object, the tag a fact about it gets)
FACT_OBJECTS = [
    ("green tea", "food"), ("black coffee", "food"), ("dark chocolate", "food"),
    ("Italian food", "food"), ("sushi", "food"), ("spicy curry", "food"), ("vegan pizza", "food"),
    ("red wine", "food"), ("craft beer", "food"), ("oat milk", "food"), ("peanuts", "health"),
    ("shellfish", "health"), ("gluten", "health"), ("strawberries", "food"), ("cheese", "food"),
    ("jazz music", "music"), ("classical music", "music"), ("heavy metal", "music"),
    ("the piano", "music"), ("the guitar", "music"), ("dark mode", "preference"),
    ("early meetings", "work"), ("the night shift", "work"), ("remote work", "work"),
    ("the new laptop", "work"), ("Python programming", "work"), ("electric cars", "travel"),
    ("mountain bikes", "sport"), ("hiking boots", "sport"), ("yoga classes", "sport"),
    ("swimming lessons", "sport"), ("tennis", "sport"), ("football", "sport"),
    ("basketball", "sport"), ("chess", "hobby"), ("board games", "hobby"),
    ("video games", "hobby"), ("science fiction", "books"), ("crime novels", "books"),
    ("poetry", "books"), ("horror movies", "movies"), ("cooking shows", "movies"),
    ("Spanish", "language"), ("Japanese", "language"), ("gardening", "hobby"),
    ("houseplants", "hobby"), ("flying", "travel"), ("crowded trains", "travel"),
    ("the beach", "travel"), ("ski trips", "travel"),
]  # fmt: skip
FACT_CONTEXTS = [
    "on weekends", "every morning", "after work", "since 2019", "at the office",
    "during holidays", "in the summer", "in winter", "with friends", "on her own",
    "twice a week", "when stressed", "on Fridays", "before bed", "at home", "in Berlin",
    "in London", "since childhood", "this year", "last month", "at lunch", "on Sundays",
    "with the kids", "at the gym", "on trips abroad", "at parties", "in the evening",
    "on the train", "at Christmas", "on birthdays", "every day", "once a month", "in spring",
    "in autumn", "at university", "during the pandemic", "since the move", "after the surgery",
    "for years", "these days", "at the cafe", "with colleagues", "in Paris", "in Tokyo",
    "near the lake", "on rainy days", "at night", "when travelling", "with her partner",
    "with his partner",
]  # fmt: skip

# What a bot asks before answering: natural questions over the same words (stopwords and all).
FACT_QUESTIONS = [
    "does she like green tea?",
    "what music does he listen to?",
    "is her brother allergic to peanuts?",
    "what does his sister cook on weekends?",
    "which sports does she play?",
    "does he prefer dark mode?",
    "what did her mother buy last month?",
    "where does his family travel in the summer?",
    "what is she afraid of?",
    "does his boss like early meetings?",
    "what games does her son play?",
    "what wine does he drink?",
    "which language is she learning?",
    "what does her partner think about remote work?",
    "is he vegan?",
    "does she enjoy hiking on weekends?",
    "what books does he read before bed?",
    "what food is her daughter allergic to?",
    "when does his colleague go swimming?",
    "does her dog like cheese?",
    "what did he cancel this year?",
]


@dataclass
class FactSet:
    rows: int
    users: int
    user_ids: list[str]  # external ids, index i = user i + 1
    user_pks: dict[str, int]  # external id -> the end user's pk (the raw baseline's filter)
    table_rows: int
    loaded_seconds: float | None  # None: reused from an earlier run


def fact_user_prefix(rows: int, users: int) -> str:
    return f"bench:facts-{rows}-{users}:"


FACT_LOAD = """
INSERT INTO facts_app_fact
    (tenant_id, end_user_id, content, content_hash, search_text, tags, metadata,
     source_session_id, source_message_ids, created_at, updated_at, valid_until,
     superseded_by_id)
SELECT %(tenant)s, w.uid[u.n], f.content, md5(f.content || g.g),
       -- what facts_app.services.facts.fact_search_text builds: content, tags, the user's id
       f.content || E'\\n' || f.tag_text || E'\\n' || w.ext[u.n],
       f.tags, '{}'::jsonb, NULL, '[]'::jsonb,
       now() - make_interval(secs => (%(rows)s - g.g) * 30),
       now() - make_interval(secs => (%(rows)s - g.g) * 30),
       CASE WHEN p.v <= 2 THEN now() - make_interval(days => p.v::int)  -- 2%% expired
            WHEN p.v <= 5 THEN now() + make_interval(days => 30 * p.v::int)  -- 3%% expire later
       END,
       NULL
FROM (SELECT %(uids)s::bigint[] AS uid, %(exts)s::text[] AS ext, %(subjects)s::text[] AS s,
             %(verbs)s::text[] AS vb, %(objects)s::text[] AS o, %(tagged)s::text[] AS t,
             %(contexts)s::text[] AS c) AS w
CROSS JOIN generate_series(1, %(rows)s) AS g(g)
-- users take turns, so a user's facts are spread over the table as if they came in over time
CROSS JOIN LATERAL (SELECT 1 + (g.g - 1) %% %(users)s AS n) AS u
CROSS JOIN LATERAL (
    SELECT 1 + (hashint8extended(g.g, 1) & 2147483647) %% 50 AS s,
           1 + (hashint8extended(g.g, 2) & 2147483647) %% 50 AS vb,
           1 + (hashint8extended(g.g, 3) & 2147483647) %% 50 AS o,
           1 + (hashint8extended(g.g, 4) & 2147483647) %% 50 AS c,
           1 + (hashint8extended(g.g, 5) & 2147483647) %% 100 AS v,
           (hashint8extended(g.g, 6) & 2147483647) %% 10 = 0 AS important  -- 10%% tagged important
) AS p
CROSS JOIN LATERAL (
    SELECT w.s[p.s] || ' ' || w.vb[p.vb] || ' ' || w.o[p.o] || ' ' || w.c[p.c] || '.' AS content,
           CASE WHEN p.important THEN jsonb_build_array(w.t[p.o], 'important')
                ELSE jsonb_build_array(w.t[p.o]) END AS tags,
           w.t[p.o] || CASE WHEN p.important THEN ' important' ELSE '' END AS tag_text
) AS f
"""


def user_pks_of(conn: Any, *, tenant_id: int, external_ids: list[str]) -> dict[str, int]:
    """external id -> pk of the tenant's end users among `external_ids`, in one query."""
    return dict(
        conn.execute(
            "SELECT external_id, id FROM accounts_enduser "
            "WHERE tenant_id = %s AND external_id = ANY(%s)",
            (tenant_id, external_ids),
        ).fetchall()
    )


def ensure_fact_set(*, tenant: Tenant, database_url: str, rows: int, users: int) -> FactSet:
    """`rows` facts spread evenly over `users` end users of the tenant, bulk-loaded once and
    reused afterwards (found by the users' external-id prefix and the count of their facts)."""

    prefix = fact_user_prefix(rows, users)
    width = len(str(users))
    external_ids = [f"{prefix}{n:0{width}d}" for n in range(1, users + 1)]
    with pg_connect(database_url) as conn:
        found_users, found_facts = conn.execute(
            "SELECT count(DISTINCT u.id), count(f.id) FROM accounts_enduser u "
            "LEFT JOIN facts_app_fact f ON f.end_user_id = u.id "
            "WHERE u.tenant_id = %s AND u.external_id LIKE %s",
            (tenant.pk, prefix + "%"),
        ).fetchone() or (0, 0)
        loaded: float | None = None
        if (found_users, found_facts) != (users, rows):
            say(
                f"loading {rows:,} facts across {users:,} users "
                "(once; later runs reuse them; a minute or more per million)"
            )
            started = time.perf_counter()
            conn.execute(
                "DELETE FROM facts_app_fact WHERE end_user_id IN (SELECT id FROM accounts_enduser"
                " WHERE tenant_id = %s AND external_id LIKE %s)",
                (tenant.pk, prefix + "%"),
            )
            conn.execute(
                "INSERT INTO accounts_enduser (tenant_id, external_id, display_name, metadata, "
                "created_at, recall_version, vectors_version) "
                "SELECT %s, e, '', '{}'::jsonb, now(), 0, 0 FROM unnest(%s::text[]) AS e "
                "ON CONFLICT (tenant_id, external_id) DO NOTHING",
                (tenant.pk, external_ids),
            )
            by_external = user_pks_of(conn, tenant_id=tenant.pk, external_ids=external_ids)
            conn.execute(
                FACT_LOAD,
                {
                    "tenant": tenant.pk,
                    "rows": rows,
                    "users": users,
                    "uids": [by_external[e] for e in external_ids],
                    "exts": external_ids,
                    "subjects": FACT_SUBJECTS,
                    "verbs": FACT_VERBS,
                    "objects": [name for name, _ in FACT_OBJECTS],
                    "tagged": [tag for _, tag in FACT_OBJECTS],
                    "contexts": FACT_CONTEXTS,
                },
            )
            conn.commit()
            # VACUUM, not only ANALYZE: it also merges the GIN index's pending list (a bulk
            # insert leaves up to gin_pending_list_limit of entries every search would scan)
            # and sets the visibility map, as autovacuum would on a live table.
            conn.autocommit = True
            conn.execute("VACUUM ANALYZE facts_app_fact")
            conn.execute("ANALYZE accounts_enduser")
            loaded = time.perf_counter() - started
        total = conn.execute("SELECT count(*) FROM facts_app_fact").fetchone()
        # Once, here: the raw baseline names the person by pk, as the context's read does.
        pks = user_pks_of(conn, tenant_id=tenant.pk, external_ids=external_ids)
    return FactSet(
        rows=rows,
        users=users,
        user_ids=external_ids,
        user_pks=pks,
        table_rows=int(total[0]) if total else 0,
        loaded_seconds=loaded,
    )


# Markers for the parts of the captured search SQL's parameters that change per search.
USER, TSQUERY, NOW = "<user>", "<tsquery>", "<now>"
SEARCH_TOP_K = 10


@dataclass
class SearchStatement:
    """A ranking query as Django sends it: SQL with %s and its parameters, the per-search ones
    replaced by USER (the person: their pk or their external id, as the statement names them),
    TSQUERY and NOW."""

    sql: str
    params: list[Any]

    def bind(self, user: int | str, tsquery: str) -> list[Any]:
        now = dt.datetime.now(dt.UTC)
        values: dict[str, Any] = {USER: user, TSQUERY: tsquery, NOW: now}
        return [
            values.get(value, value) if isinstance(value, str) else value for value in self.params
        ]


def tsquery_of(question: str) -> str:
    from memoryhub.core.search import search_terms

    return " | ".join(search_terms(question))  # what FullTextRanker.sql builds


def capture_ranking_statement(
    *, call: Callable[[], Any], user: int | str, question: str, constants: tuple[Any, ...]
) -> SearchStatement:
    """Run `call` once in-process and keep the one ranking query (`ts_rank_cd`) it sends, its
    parameters turned into markers: `user` -> USER, the question's tsquery -> TSQUERY, a time ->
    NOW; any other parameter must be one of `constants` (the tenant, a LIMIT), kept as it is."""
    from django.db import connection

    if user in constants:
        raise BenchError(f"the person {user!r} cannot be told from the constants {constants!r}")
    captured: list[tuple[str, Any]] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        captured.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        call()
    ranking = [(sql, params) for sql, params in captured if "ts_rank_cd" in sql]
    if len(ranking) != 1:
        raise BenchError(f"expected one ranking query (ts_rank_cd), got: {captured!r:.500}")
    sql, raw_params = ranking[0]
    tsquery = tsquery_of(question)
    params: list[Any] = []
    for value in raw_params or ():
        if value == user and type(value) is type(user):
            params.append(USER)
        elif value == tsquery:
            params.append(TSQUERY)
        elif isinstance(value, dt.datetime):
            params.append(NOW)
        elif value in constants:
            params.append(value)
        else:
            raise BenchError(f"unexpected parameter {value!r} in the search SQL: {sql}")
    if USER not in params or TSQUERY not in params or "%" in sql.replace("%s", ""):
        raise BenchError(f"the search SQL is not what the benchmark expects: {sql} {params!r}")
    return SearchStatement(sql=sql, params=params)


def capture_search_statement(
    *, tenant: Tenant, fact_set: FactSet, question: str
) -> SearchStatement:
    """The raw baseline: the database's own ranking of one person's facts
    (`fact_search_for_person`, what the API ran before it ranked a person's facts in the app),
    run once in-process to keep its statement (filters, @@ match, ts_rank_cd, ORDER BY, LIMIT)."""
    from facts_app.selectors.facts import fact_search_for_person

    # A person whose pk is neither the tenant's nor the LIMIT, so the markers are unambiguous.
    constants = (tenant.pk, SEARCH_TOP_K)
    user_pk = next(pk for pk in fact_set.user_pks.values() if pk not in constants)
    statement = capture_ranking_statement(
        call=lambda: fact_search_for_person(
            tenant_id=tenant.pk, end_user_id=user_pk, query=question, top_k=SEARCH_TOP_K
        ),
        user=user_pk,
        question=question,
        constants=constants,
    )
    if "LIMIT %s" not in statement.sql or statement.params[-1] != SEARCH_TOP_K:
        raise BenchError(f"the search SQL has no LIMIT {SEARCH_TOP_K}: {statement.sql}")
    return statement


def search_pairs(fact_set: FactSet, count: int, seed: int) -> list[tuple[str, str]]:
    """(user, question) pairs: a random user of the set, a random question."""
    rng = random.Random(seed)
    return [(rng.choice(fact_set.user_ids), rng.choice(FACT_QUESTIONS)) for _ in range(count)]


def search_path(user_id: str, question: str) -> str:
    query = urlencode({"q": question, "user_id": user_id, "top_k": SEARCH_TOP_K})
    return f"/api/v1/facts/search/?{query}"


@dataclass
class ApiSearches:
    latencies: list[float]  # seconds, per timed search
    found: list[list[int]]  # per search, the ids of the facts found, best first
    modes: dict[str, int]  # the mode the API says ran -> searches
    outsiders: int  # hits of another person than the one asked for (0, or a bug)


def api_searches(
    *, port: int, secret: str, pairs: list[tuple[str, str]], warmup: list[tuple[str, str]]
) -> ApiSearches:
    """One client, sequentially; the latencies and, per search, the ids of the facts found."""
    api = ApiClient(port, secret)
    for user_id, question in warmup:
        api.expect("GET", search_path(user_id, question), None, 200)
    paths = [search_path(user_id, question) for user_id, question in pairs]
    latencies: list[float] = []
    payloads: list[bytes] = []
    for path in paths:
        started = time.perf_counter()
        status, payload = api.request("GET", path)
        latencies.append(time.perf_counter() - started)
        if status != 200:
            raise BenchError(f"search answered {status}: {payload[:300]!r}")
        payloads.append(payload)
    api.close()
    bodies = [json.loads(p) for p in payloads]
    modes = Counter(str(body["mode"]) for body in bodies)
    outsiders = sum(
        1
        for body, (user_id, _) in zip(bodies, pairs, strict=True)
        for hit in body["results"]
        if hit["fact"]["user_id"] != user_id
    )
    return ApiSearches(
        latencies=latencies,
        found=[[hit["fact"]["id"] for hit in body["results"]] for body in bodies],
        modes=dict(modes),
        outsiders=outsiders,
    )


def raw_searches(
    *, conn: Any, statement: SearchStatement, pairs: Sequence[tuple[int | str, str]]
) -> tuple[list[float], list[list[int]]]:
    """A captured ranking query with psycopg, sent as Django sends it: values inlined
    (client-side binding), so PostgreSQL plans each search for its person and words. (Not
    psycopg's default server-side binding: it prepares the statement after 5 runs, PostgreSQL
    then settles on a generic plan, and for this query that plan ANDs the GIN index's matches
    over the whole table with the user's rows, several times slower than the per-search plan.)
    `pairs` are (the person as the statement names them, question)."""
    import psycopg

    bound = [(user, tsquery_of(question)) for user, question in pairs]
    latencies: list[float] = []
    found: list[list[int]] = []
    cursor = psycopg.ClientCursor(conn)
    for user, tsquery in bound:
        started = time.perf_counter()
        rows = cursor.execute(statement.sql, statement.bind(user, tsquery)).fetchall()
        latencies.append(time.perf_counter() - started)
        found.append([row[0] for row in rows])
    return latencies, found


def compact_plan_line(line: str) -> str:
    line = re.sub(r"\(cost=[\d.]+\.\.[\d.]+ rows=(\d+) width=\d+\)", r"(est. rows=\1)", line)
    line = re.sub(
        r"\(actual time=[\d.]+\.\.([\d.]+) rows=(\d+) loops=(\d+)\)",
        r"(actual \1 ms, rows=\2, loops=\3)",
        line,
    )
    line = re.sub(r"'[\d-]+ [\d:.]+\+00'::timestamp with time zone", "'<now>'", line)
    return line if len(line) <= 220 else line[:217] + "..."


def explain_search(
    *,
    database_url: str,
    tenant_id: int,
    statement: SearchStatement,
    user: int | str,
    question: str,
) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of one search, with the values inlined as Django sends them
    (client-side binding: the planner sees the user and the words). Run twice: the second,
    warm, is shown."""
    import psycopg

    with pg_connect(database_url, tenant=tenant_id, autocommit=True) as conn:
        cursor = psycopg.ClientCursor(conn)
        params = statement.bind(user, tsquery_of(question))
        for _ in range(2):
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement.sql, params)
            lines = [str(row[0]) for row in cursor.fetchall()]
    return [compact_plan_line(line) for line in lines]


def search_mark(api: Latency, config: Config) -> str:
    return judged(api.p95_ms <= TARGET_SEARCH_P95_MS, config.facts >= TARGET_SEARCH_FACTS)


def search_note(config: Config) -> str:
    if config.facts >= TARGET_SEARCH_FACTS:
        return ""
    return f"  (the target is set at {TARGET_SEARCH_FACTS:,} facts: --big)"


@dataclass
class SearchResult:
    api: Latency
    raw: Latency
    api_cpu: dict[str, float] | None
    raw_cpu: dict[str, float] | None
    hits_mean: float  # the API's
    no_hits: int  # the API's searches without a hit
    raw_hits_mean: float
    raw_no_hits: int
    overlap: float  # the share of the raw top-k the API also returned (pooled)
    modes: dict[str, int]  # the mode the API says ran -> searches
    outsiders: int  # API hits of another person (0, or a bug)
    first_for_user: int  # timed searches that were the first of their user in the run
    plan: list[str]


SEARCH_PHASES: list[Phase] = [
    *AUTH_PHASES,
    (
        1,
        "query-string validation (FactSearchQuerySerializer, when not a plain query string)",
        "rest_framework/serializers.py",
        "is_valid",
        "max",
    ),
    (1, "search (fact_search_result_for_person)", "facts_app/selectors/facts.py",
     "fact_search_result_for_person", "max"),
    (2, "the person and their facts (_person_candidates, one query)",
     "facts_app/selectors/facts.py", "_person_candidates", "max"),
    (2, "ranking in the app (candidates_rank)", "facts_app/recall.py", "candidates_rank", "max"),
    (3, "index build, when not cached (RecallIndex.build)", "memoryhub/core/recall/index.py",
     "build", "max"),
    (3, "ranking (recall.rank)", "memoryhub/core/recall/hybrid.py", "rank", "max"),
    (2, "fetch the hits by id (_facts_by_id)", "facts_app/selectors/facts.py", "_facts_by_id",
     "max"),
    (
        1,
        "output serialization (FactOutputSerializer, per hit)",
        "rest_framework/serializers.py",
        "data",
        "max",
    ),
]  # fmt: skip


def sizes_line(config: Config) -> str:
    return f"{config.facts:,} facts across {config.fact_users:,} users, {config.searches} searches"


def run(setup: Setup, server: Gunicorn) -> SearchResult:
    """The API's searches (hybrid: the app ranks the person's facts), then the database's own
    ranking of the same person's facts raw, how far the two agree, and the EXPLAIN of one raw
    search."""

    config = setup.config
    fact_set = setup.fact_set
    assert fact_set is not None
    section(
        f"Fact search: {fact_set.rows:,} facts across {fact_set.users:,} users, "
        f"GET /api/v1/facts/search/?q=...&user_id=...&top_k={SEARCH_TOP_K}, one client"
    )
    say(
        "API  hybrid by default: with a user_id the app ranks the person's facts (one query for "
        "their\n     current facts, the index built or reused per worker, BM25 fused with the "
        "vectors\n     where facts have them, the hits fetched by id)"
    )
    say(
        "raw  the database's own ranking of the person's facts, one statement "
        "(fact_search_for_person:\n     what the API ran before it ranked in the app), "
        "the person named by pk"
    )
    statement = setup.search_statement
    assert statement is not None
    pairs = search_pairs(fact_set, config.searches, seed=1)
    warmup = search_pairs(fact_set, 40, seed=2)
    raw_pairs = [(fact_set.user_pks[user_id], question) for user_id, question in pairs]
    raw_warmup = [(fact_set.user_pks[user_id], question) for user_id, question in warmup]
    # Closed after the CPU sample: an exited backend's CPU time is not counted.
    # Scoped to the tenant as the API's connection is: both pay the same row-level security.
    with pg_connect(config.database_url, tenant=setup.tenant.pk, autocommit=True) as conn:
        # An untimed pass over the same searches (and the warm-up's), so that both timed runs
        # find the same warm caches.
        raw_searches(conn=conn, statement=statement, pairs=raw_warmup + raw_pairs)
        before = cpu_sample(server.pid)
        searches = api_searches(port=server.port, secret=setup.secret, pairs=pairs, warmup=warmup)
        after = cpu_sample(server.pid)
        api_cpu = cpu_per_request(before, after, len(pairs))
        before = cpu_sample(server.pid)
        raw_seconds, raw_found = raw_searches(conn=conn, statement=statement, pairs=raw_pairs)
        after = cpu_sample(server.pid)
        raw_cpu = cpu_per_request(before, after, len(pairs))
    api, raw = Latency.of(searches.latencies), Latency.of(raw_seconds)
    say(f"API  {api.line()}")
    say(f"     {cpu_line(api_cpu, 'search')}")
    say(f"raw  {raw.line()}")
    say(f"     {cpu_line(raw_cpu, 'search')}")
    hits = [len(ids) for ids in searches.found]
    raw_hits = [len(ids) for ids in raw_found]
    shared = sum(len(set(a) & set(b)) for a, b in zip(searches.found, raw_found, strict=True))
    overlap = shared / sum(raw_hits) if sum(raw_hits) else 1.0
    seen = {user_id for user_id, _ in warmup}
    first_for_user = 0
    for user_id, _ in pairs:
        first_for_user += user_id not in seen
        seen.add(user_id)
    result = SearchResult(
        api=api,
        raw=raw,
        api_cpu=api_cpu,
        raw_cpu=raw_cpu,
        hits_mean=sum(hits) / len(hits),
        no_hits=hits.count(0),
        raw_hits_mean=sum(raw_hits) / len(raw_hits),
        raw_no_hits=raw_hits.count(0),
        overlap=overlap,
        modes=searches.modes,
        outsiders=searches.outsiders,
        first_for_user=first_for_user,
        plan=[],
    )
    for line in search_check(result, len(pairs)):
        say(line)
    say(
        f"ratio API/raw {raw.p50_ms / api.p50_ms:.3f} (as rates: raw p50 / API p50; "
        f"API p95 = {api.p95_ms / raw.p95_ms:.1f} x raw p95)    API p95 {api.p95_ms:.2f} ms "
        f"(target <= {TARGET_SEARCH_P95_MS:.0f} ms)  {search_mark(api, config)}"
        + search_note(config)
    )
    say("     for scale: Zep's cloud reports 155 ms p95 for its memory search, mem0's paper 200 ms")
    say(
        "the raw baseline's query, captured from facts_app.selectors.facts.fact_search_for_person "
        "(the API\nalso looks up the API key and the end user, reads the person's facts and "
        "ranks them in the app):"
    )
    say(textwrap.indent(textwrap.fill(" ".join(statement.sql.split()), 94), "  "))
    user_id, question = pairs[0]
    result.plan = explain_search(
        database_url=config.database_url,
        tenant_id=setup.tenant.pk,
        statement=statement,
        user=fact_set.user_pks[user_id],
        question=question,
    )
    say(
        f"EXPLAIN (ANALYZE, BUFFERS), user {user_id} (pk {fact_set.user_pks[user_id]}), "
        f"q={question!r} -> {tsquery_of(question)!r}:"
    )
    for line in result.plan:
        say(f"  {line}")
    return result


def search_check(result: SearchResult, searches: int) -> list[str]:
    """The check lines: the API's hits are the person's own, which mode ran, and how far the
    app's ranking and the database's agree (they rank differently by design: not a failure)."""
    modes = ", ".join(f"{mode} {count}" for mode, count in sorted(result.modes.items()))
    lines = []
    if result.outsiders:
        lines.append(
            f"check: WARNING: {result.outsiders} API hits belong to another person than the one "
            "asked for"
        )
    else:
        lines.append("check: every API hit is the asked person's own")
    lines.append(
        f"       the mode that ran (the API's answer): {modes}"
        + (
            " (hybrid runs lexical while the person's facts have no vectors: the bench loads none)"
            if "hybrid" not in result.modes
            else ""
        )
    )
    lines.append(
        f"       hits per search API {result.hits_mean:.1f}, raw {result.raw_hits_mean:.1f}; "
        f"without any: API {result.no_hits}, raw {result.raw_no_hits}; "
        f"{100 * result.overlap:.0f}% of the raw top {SEARCH_TOP_K} also in the API's"
    )
    lines.append(
        f"       ({result.first_for_user} of {searches} timed searches are their user's first "
        "in the run: the serving worker builds that person's index in the request)"
    )
    return lines


def record(result: SearchResult, setup: Setup) -> dict[str, Any]:
    assert setup.fact_set is not None
    return {
        "search": asdict(result),
        "search_ratio": result.raw.p50_ms / result.api.p50_ms,
        "search_facts": setup.fact_set.rows,
        "search_users": setup.fact_set.users,
        "facts_table_rows": setup.fact_set.table_rows,
        "search_sql": setup.search_statement.sql if setup.search_statement else None,
    }


def profile(setup: Setup, client: InProcessClient) -> dict[str, Any]:
    config = setup.config
    fact_set = setup.fact_set
    assert fact_set is not None
    # Other searches than the timed ones: a random user and question each time.
    paths = [
        search_path(user_id, question)
        for user_id, question in search_pairs(fact_set, 2 * config.profile_requests, 3)
    ]

    def search(index: int) -> None:
        client("GET", paths[index % len(paths)], None, 200)

    section(f"Profile of one fact search ({fact_set.rows:,} facts, {fact_set.users:,} users)")
    searches = profile_requests(
        what="search",
        request=search,
        count=config.profile_requests,
        phases=SEARCH_PHASES,
        dump=config.profile_out if "appends" not in config.only else None,
    )
    print_profile(searches, top=True)
    return {"search": asdict(searches)}


def summary(result: SearchResult, config: Config, profiles: dict[str, Any]) -> None:
    api, raw = result.api, result.raw
    say(
        f"search  API p50 {api.p50_ms:6.2f} ms   p95 {api.p95_ms:6.2f} ms"
        f"{'':10}target p95 <= {TARGET_SEARCH_P95_MS:.0f} ms "
        f"{search_mark(api, config)}{search_note(config)}"
    )
    say(
        f"search  raw p50 {raw.p50_ms:6.2f} ms   p95 {raw.p95_ms:6.2f} ms"
        f"{'':10}ratio API/raw {raw.p50_ms / api.p50_ms:.3f} (raw p50 / API p50)"
    )


def verdicts(result: SearchResult, config: Config) -> list[Verdict]:
    api, raw = result.api, result.raw
    return [
        Verdict(
            target=f"fact search p95 <= {TARGET_SEARCH_P95_MS:.0f} ms at {TARGET_SEARCH_FACTS:,} "
            f"facts / {TARGET_SEARCH_USERS:,} people",
            measured=f"p95 {api.p95_ms:.2f} ms at {config.facts:,} / {config.fact_users:,}",
            baseline=f"p95 {raw.p95_ms:.2f} ms",
            ratio=f"{api.p95_ms / raw.p95_ms:.1f}x raw",
            ok=api.p95_ms <= TARGET_SEARCH_P95_MS if config.facts >= TARGET_SEARCH_FACTS else None,
        )
    ]
