"""Recall (issue 13): a person's history searched in the app, and what it costs.

On gunicorns of its own (embeddings on; and off, for the appends' baseline):
- the hybrid message search through the API (GET /api/v1/messages/search/?mode=hybrid, the
  query embedding included) for a person of --recall-rows messages (10,000; --big also
  100,000), against the database's own full-text search of the same person's messages
  (sessions_app.selectors.message_search's statement, raw with psycopg);
- the context call of a new session of that person, with the relevant-history section;
- in-process: the cold build of the person's index and its size against the cache's bound,
  and the embedder's throughput (message_vectors_compute on a fresh session);
- appends with embeddings on vs off, alternating rounds, as the llm part does for summaries.

The history is bulk-loaded once (raw SQL). Its vectors are random unit vectors, stored as the
worker stores real ones: the in-process search's speed does not depend on what they mean. Where
pgvector serves they are the texts' own embeddings, computed once at the load (~5 minutes at
100,000 messages), because an HNSW index's speed does depend on it (random vectors are its
worst case) and the person is then another one (`person_external_id(..., embedded=True)`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import random
import statistics
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlencode

from bench.config import Config
from bench.harness import (
    SUMMARY_OUT_OF_REACH,
    ApiClient,
    Gunicorn,
    Setup,
    pg_connect,
    policy_tenant_key,
)
from bench.measure import (
    AppendResult,
    BenchError,
    ClientsOutcome,
    Latency,
    Verdict,
    append_result,
    cpu_line,
    cpu_per_request,
    cpu_sample,
    mark,
    run_clients,
    say,
    say_appends,
    section,
)
from bench.parts.appends import api_append_worker, check_gapless
from bench.parts.context import (
    CONTEXT_FOLLOW_UPS,
    CONTEXT_MAX_TOKENS,
    CONTEXT_OPENERS,
    CONTEXT_PHASES,
    sections_line,
)
from bench.parts.facts import (
    FACT_CONTEXTS,
    FACT_OBJECTS,
    FACT_SUBJECTS,
    FACT_VERBS,
    SearchStatement,
    capture_ranking_statement,
    raw_searches,
)
from bench.parts.llm import (
    LLM_ROUNDS,
    TARGET_LLM_P99_RATIO,
    RequestReset,
    gathered,
    queued_tasks,
)
from bench.profiling import AUTH_PHASES, InProcessClient, Phase, print_profile, profile_requests

if TYPE_CHECKING:
    from memoryhub.accounts.models import EndUser, Tenant

# Issue 18's bound for the hybrid search (query embedding included) at every size this part
# runs, and for the context call with the relevant-history section (issue 18's context target,
# every section on); issue 13 had set 20/60 ms and 25 ms.
TARGET_SEARCH_P95_MS = 10.0
TARGET_CONTEXT_P95_MS = 10.0
# Issue 13's.
TARGET_EMBED_RATE = 60.0  # messages embedded per second by one worker process, at least
# Appends with embeddings on vs off, "unchanged within noise": the llm part's bound.
TARGET_APPEND_P99_RATIO = TARGET_LLM_P99_RATIO

RECALL_TENANT = "memoryhub-bench-recall"
SESSION_MESSAGES = 100  # a person's history comes in sessions of this many messages
SEARCH_TOP_K = 10
# Share of the timed questions that repeat an earlier one: the rest are new, so their query
# vector is embedded in the request (each worker has its own query-vector cache).
REPEAT_SHARE = 0.3
WARMUP_CALLS = 20  # per worker, untimed, before each timed run (the first builds the index)
RAW_WARM_SEARCHES = 20  # untimed raw searches before the raw run
PGVECTOR_BATCH = 500  # vectors per statement when the database holds them too (as migration 0008)
# The raw baseline times the first this many of the API's questions: the database's search of a
# long history is slow, and its percentiles settle well before 1,000.
RAW_MAX_SEARCHES = 300


# --- the data -------------------------------------------------------------------------------------

# A person's turns: the user tells, the assistant acknowledges, both with the fact set's words
# (subject, verb, object, context: 50 each), so a word matches about 2% of the turns and a
# question's words find a few hundred of 10,000. k is the message's number in the person's
# history (offset per person), which every pick hashes with a seed of its own.
RECALL_LOAD = """
INSERT INTO sessions_app_message
    (tenant_id, session_id, seq, role, content, name, tool_call_id, tool_calls, metadata,
     token_count, created_at)
SELECT %(tenant)s, w.sid[x.s], x.seq, m.role, m.content, '', '', NULL, '{}'::jsonb,
       greatest(1, length(m.content) / 4),
       -- a session a day, its turns a minute apart, the newest session yesterday
       now() - make_interval(days => cardinality(w.sid) - x.s + 1)
             + make_interval(mins => x.seq)
FROM (SELECT %(sessions)s::uuid[] AS sid, %(openers)s::text[] AS op, %(follow)s::text[] AS fu,
             %(subjects)s::text[] AS s, %(verbs)s::text[] AS vb, %(objects)s::text[] AS o,
             %(contexts)s::text[] AS c) AS w
CROSS JOIN generate_series(1, %(rows)s) AS g(g)
CROSS JOIN LATERAL (
    SELECT 1 + (g.g - 1) / %(per)s AS s, 1 + (g.g - 1) %% %(per)s AS seq,
           (g.g + %(offset)s)::bigint AS k
) AS x
CROSS JOIN LATERAL (
    SELECT 1 + (hashint8extended(x.k, 21) & 2147483647) %% cardinality(w.op) AS op,
           1 + (hashint8extended(x.k, 22) & 2147483647) %% cardinality(w.fu) AS fu,
           1 + (hashint8extended(x.k, 23) & 2147483647) %% 50 AS s,
           1 + (hashint8extended(x.k, 24) & 2147483647) %% 50 AS vb,
           1 + (hashint8extended(x.k, 25) & 2147483647) %% 50 AS o,
           1 + (hashint8extended(x.k, 26) & 2147483647) %% 50 AS c
) AS p
CROSS JOIN LATERAL (
    SELECT CASE WHEN x.seq %% 2 = 1 THEN 'user' ELSE 'assistant' END AS role,
           CASE WHEN x.seq %% 2 = 1
                THEN w.op[p.op] || w.s[p.s] || ' ' || w.vb[p.vb] || ' ' || w.o[p.o] || ' '
                     || w.c[p.c] || '.'
                ELSE 'Noted: ' || lower(w.s[p.s]) || ' ' || w.vb[p.vb] || ' ' || w.o[p.o]
                     || ' ' || w.c[p.c] || '. ' || w.fu[p.fu]
           END AS content
) AS m
"""


def load_params(
    *, tenant_id: int, sessions: list[uuid.UUID], rows: int, per: int, offset: int
) -> dict[str, Any]:
    return {
        "tenant": tenant_id,
        "sessions": sessions,
        "rows": rows,
        "per": per,
        "offset": offset,
        "openers": CONTEXT_OPENERS,
        "follow": CONTEXT_FOLLOW_UPS,
        "subjects": FACT_SUBJECTS,
        "verbs": FACT_VERBS,
        "objects": [name for name, _ in FACT_OBJECTS],
        "contexts": FACT_CONTEXTS,
    }


@dataclass
class RecallPerson:
    rows: int
    external_id: str
    pk: int
    sessions: list[str]  # the history's sessions
    probe: str  # an empty session of the person: the context's "new session"
    loaded_seconds: float | None  # None: reused from an earlier run


@dataclass
class RecallSetup:
    tenant: Tenant
    secret: str
    persons: list[RecallPerson]
    statement: SearchStatement  # the raw baseline: message_search's ranking query
    model: str  # the embedder's model name, which the stored vectors carry
    pgvector: bool  # the database holds the vectors too (sessions_app/pgvector.py)
    table_rows: int  # sessions_app_message, all tenants


def probe_marker(rows: int) -> str:
    """The `metadata.bench` of the empty probe session of the person of `rows` messages."""
    return f"recall-probe-{rows}"


def person_external_id(rows: int, *, embedded: bool = False) -> str:
    """The bench person of `rows` messages; `embedded`: the one whose vectors are their texts'
    embeddings (where pgvector serves), not random ones."""
    return f"bench:recall-{rows}" + ("-embedded" if embedded else "")


def probe_session_id(*, tenant: Tenant, person: EndUser, rows: int) -> str | None:
    """The id of the empty probe session of `person`, the recall person of `rows` messages; None
    when it is not there."""
    from sessions_app.models import Session

    found = (
        Session.objects.filter(tenant=tenant, end_user=person, metadata__bench=probe_marker(rows))
        .values_list("id", flat=True)
        .first()
    )
    return None if found is None else str(found)


class ExistingProbe(NamedTuple):
    tenant: Tenant
    external_id: str  # the person's
    session_id: str  # the probe session's


def existing_probe(rows: int) -> ExistingProbe:
    """The recall person of `rows` messages and their empty probe session, as an earlier run of
    this part left them in the bench database (the tools that reuse them: bench/ab.py,
    bench/timeline.py); SystemExit saying what to run when they are not there. Call it inside
    `bench_system_scope(True)`."""
    from memoryhub.accounts import models as accounts

    tenant = accounts.Tenant.objects.filter(slug=RECALL_TENANT).first()
    external_id = person_external_id(rows)
    person = tenant and (
        accounts.EndUser.objects.filter(tenant=tenant, external_id=external_id).first()
    )
    probe = person and probe_session_id(tenant=tenant, person=person, rows=rows)
    if tenant is None or probe is None:
        raise SystemExit(
            f"No recall person {external_id} in the bench database: run the recall part at "
            f"that size first (python -m bench --only recall --recall-rows {rows})."
        )
    return ExistingProbe(tenant=tenant, external_id=external_id, session_id=probe)


def random_unit_vectors(count: int, dimensions: int, seed: int) -> Any:
    import numpy as np

    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((count, dimensions), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix


def store_vectors(
    *,
    conn: Any,
    tenant_id: int,
    end_user_id: int,
    session_ids: list[uuid.UUID],
    model: str,
    dimensions: int,
    seed: int,
    pgvector: bool,
) -> int:
    """A vector of `model` for every message of the sessions, in the worker's storage format
    (float32 little-endian), with one binary COPY: a random unit vector, or with pgvector the
    message's embedding (computed here, as the worker would) also written to its `embedding`
    column through the app's own writer. An HNSW index's cost depends on what the vectors
    mean: random ones in 384 dimensions have no neighbourhoods, its worst case (the
    twenty-second round: nearest 200 in ~27 ms against ~4-6 ms on these texts' embeddings)."""
    import numpy as np

    rows = conn.execute(
        "SELECT id, name, role, content FROM sessions_app_message WHERE session_id = ANY(%s) "
        "ORDER BY id",
        (session_ids,),
    ).fetchall()
    ids = [row[0] for row in rows]
    matrix = (
        embedded_vectors([row[1:] for row in rows])
        if pgvector
        else np.concatenate(
            # Seeded per 10,000 rows, as they always were: a person loads the same vectors.
            [
                random_unit_vectors(len(ids[start : start + 10_000]), dimensions, seed + start)
                for start in range(0, len(ids), 10_000)
            ]
            or [np.zeros((0, dimensions), np.float32)]
        )
    )
    now = dt.datetime.now(dt.UTC)
    # PostgreSQL refuses COPY FROM into a table whose row-level security applies to the role
    # (the bench's plain role): COPY into a temporary table, then one INSERT ... SELECT.
    columns = "message_id, tenant_id, end_user_id, model, vector, created_at"
    conn.execute(
        "CREATE TEMPORARY TABLE bench_vectors (message_id bigint, tenant_id bigint, "
        "end_user_id bigint, model text, vector bytea, created_at timestamptz) ON COMMIT DROP"
    )
    with (
        conn.cursor() as cursor,
        cursor.copy(f"COPY bench_vectors ({columns}) FROM STDIN (FORMAT BINARY)") as copy,
    ):
        copy.set_types(["bigint", "bigint", "bigint", "text", "bytea", "timestamptz"])
        for row, message_id in enumerate(ids):
            copy.write_row(
                (
                    message_id,
                    tenant_id,
                    end_user_id,
                    model,
                    matrix[row].astype("<f4").tobytes(),
                    now,
                )
            )
    conn.execute(
        f"INSERT INTO sessions_app_messagevector ({columns}) SELECT {columns} FROM bench_vectors"
    )
    conn.execute("DROP TABLE bench_vectors")
    if pgvector:
        conn.commit()  # the blobs first: the app's writer reads them from its own connection
        from django.db import transaction

        from sessions_app.pgvector import embeddings_store

        blobs = [(mid, matrix[row].astype("<f4").tobytes()) for row, mid in enumerate(ids)]
        for at in range(0, len(blobs), PGVECTOR_BATCH):
            with transaction.atomic():
                embeddings_store(vectors=blobs[at : at + PGVECTOR_BATCH])
    return len(ids)


def embedded_vectors(messages: list[tuple[str, str, str]]) -> Any:
    """The embedding of each (name, role, content), as the worker computes it (the passage
    text and the configured embedder), in chunks with progress: ~5 minutes at 100,000 short
    messages on the 2-core machine, once per person."""
    import numpy as np

    from memoryhub.llm.embeddings import get_embedder
    from sessions_app.recall import message_passage

    embedder = get_embedder()
    if embedder is None:
        raise BenchError("the recall part needs embeddings on")
    texts = [
        message_passage(name=name, role=role, content=content) for name, role, content in messages
    ]
    chunk = 10_000
    parts = []
    started = time.perf_counter()
    for start in range(0, len(texts), chunk):
        parts.append(np.asarray(embedder.embed_passages(texts[start : start + chunk])))
        done = min(start + chunk, len(texts))
        seconds = time.perf_counter() - started
        say(f"           embedded {done:,} of {len(texts):,} ({seconds:.0f} s)")
    return np.concatenate(parts) if parts else np.zeros((0, embedder.dimensions), np.float32)


def ensure_person(
    *, tenant: Tenant, database_url: str, rows: int, model: str, dimensions: int, pgvector: bool
) -> RecallPerson:
    """A person of `rows` messages in sessions of SESSION_MESSAGES, each with a vector of
    `model`, and an empty probe session; loaded once and reused (found by the person's id, the
    sessions' metadata and the counts)."""

    from memoryhub.accounts.models import EndUser
    from sessions_app.models import Session

    external_id = person_external_id(rows, embedded=pgvector)
    person, _ = EndUser.objects.get_or_create(tenant=tenant, external_id=external_id)
    marker, probe = f"recall-{rows}", probe_marker(rows)
    wanted_sessions = math.ceil(rows / SESSION_MESSAGES)
    loaded: float | None = None
    with pg_connect(database_url) as conn:
        history = [
            row[0]
            for row in conn.execute(
                "SELECT id FROM sessions_app_session WHERE tenant_id = %s AND end_user_id = %s "
                "AND metadata->>'bench' = %s ORDER BY created_at, id",
                (tenant.pk, person.pk, marker),
            ).fetchall()
        ]
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM sessions_app_message m JOIN sessions_app_session s "
            "        ON s.id = m.session_id WHERE s.end_user_id = %(u)s),"
            "       (SELECT count(*) FROM sessions_app_messagevector "
            "        WHERE tenant_id = %(t)s AND end_user_id = %(u)s AND model = %(model)s),"
            "       (SELECT count(*) FROM sessions_app_session WHERE end_user_id = %(u)s)",
            {"u": person.pk, "t": tenant.pk, "model": model},
        ).fetchone()
        # Every session of the person: the history's and the probe, nothing else.
        if counts != (rows, rows, wanted_sessions + 1) or len(history) != wanted_sessions:
            say(
                f"loading {rows:,} messages of {external_id} in {wanted_sessions:,} sessions, "
                + ("with their texts' embeddings" if pgvector else "with random vectors")
                + " (once; later runs reuse them)"
            )
            started = time.perf_counter()
            for sql in (
                "DELETE FROM sessions_app_messagevector WHERE end_user_id = %(u)s",
                "DELETE FROM sessions_app_message WHERE session_id IN "
                "(SELECT id FROM sessions_app_session WHERE end_user_id = %(u)s)",
                "DELETE FROM sessions_app_summary WHERE session_id IN "
                "(SELECT id FROM sessions_app_session WHERE end_user_id = %(u)s)",
                "DELETE FROM sessions_app_stateentry WHERE session_id IN "
                "(SELECT id FROM sessions_app_session WHERE end_user_id = %(u)s)",
                "DELETE FROM sessions_app_session WHERE end_user_id = %(u)s",
            ):
                conn.execute(sql, {"u": person.pk})
            conn.commit()
            now = dt.datetime.now(dt.UTC)
            made = Session.objects.bulk_create(
                [
                    Session(
                        tenant=tenant,
                        end_user=person,
                        agent_id="bench-recall",
                        metadata={"bench": marker},
                        last_active_at=now,
                    )
                    for _ in range(wanted_sessions)
                ]
            )
            Session.objects.create(
                tenant=tenant,
                end_user=person,
                agent_id="bench-recall",
                metadata={"bench": probe},
                last_active_at=now,
            )
            history = [session.pk for session in made]
            conn.execute(
                RECALL_LOAD,
                load_params(
                    tenant_id=tenant.pk,
                    sessions=history,
                    rows=rows,
                    per=SESSION_MESSAGES,
                    offset=rows,
                ),
            )
            conn.execute(
                "UPDATE sessions_app_session s SET last_seq = a.n, message_count = a.n, "
                "token_count = a.t, last_active_at = a.last, updated_at = now() FROM "
                "(SELECT session_id, count(*) AS n, sum(token_count) AS t, max(created_at) AS "
                "last FROM sessions_app_message WHERE session_id = ANY(%s) GROUP BY session_id) "
                "AS a WHERE s.id = a.session_id",
                (history,),
            )
            store_vectors(
                conn=conn,
                tenant_id=tenant.pk,
                end_user_id=person.pk,
                session_ids=history,
                model=model,
                dimensions=dimensions,
                seed=rows,
                pgvector=pgvector,
            )
            conn.commit()
            # VACUUM, as the other parts do after a bulk load: autovacuum would otherwise start
            # during the timed calls.
            conn.autocommit = True
            conn.execute("VACUUM ANALYZE sessions_app_message")
            conn.execute("VACUUM ANALYZE sessions_app_messagevector")
            conn.execute("ANALYZE sessions_app_session")
            conn.execute("ANALYZE accounts_enduser")
            loaded = time.perf_counter() - started
    probe_session = probe_session_id(tenant=tenant, person=person, rows=rows)
    if probe_session is None:
        raise BenchError(f"{external_id}: the probe session is missing")
    return RecallPerson(
        rows=rows,
        external_id=external_id,
        pk=person.pk,
        sessions=[str(value) for value in history],
        probe=probe_session,
        loaded_seconds=loaded,
    )


def ensure_recall(*, config: Config, api_key_ids: list[str]) -> RecallSetup:
    """The recall tenant (summaries and extraction off, messages kept), a person per size with
    their history, vectors and probe session, and the raw baseline's statement."""

    from memoryhub.llm.embeddings import get_embedder
    from sessions_app.embedding import embedding_enabled
    from sessions_app.pgvector import pgvector_enabled
    from sessions_app.selectors import message_search

    embedder = get_embedder()
    if not embedding_enabled() or embedder is None:
        raise BenchError("the recall part needs an embedder: run without EMBEDDINGS_BACKEND=off")
    tenant, secret = policy_tenant_key(
        RECALL_TENANT,
        api_key_ids=api_key_ids,
        memory_enabled=True,
        extraction_enabled=False,
        summary_threshold_tokens=SUMMARY_OUT_OF_REACH,
        recall_enabled=True,
        retention_days=None,
    )
    pgvector = pgvector_enabled()
    persons = [
        ensure_person(
            tenant=tenant,
            database_url=config.database_url,
            rows=rows,
            model=embedder.model_name,
            dimensions=embedder.dimensions,
            pgvector=pgvector,
        )
        for rows in config.recall_rows
    ]
    question = QUESTION_TEMPLATES[0].format(s="her brother", vb="likes", o="green tea", c="")
    statement = capture_ranking_statement(
        call=lambda: message_search(
            tenant=tenant, query=question, user_id=persons[0].external_id, top_k=SEARCH_TOP_K
        ),
        user=persons[0].external_id,
        question=question,
        constants=(tenant.pk,),
    )
    if f"LIMIT {SEARCH_TOP_K}" not in statement.sql:
        raise BenchError(f"the message search SQL has no LIMIT {SEARCH_TOP_K}: {statement.sql}")
    with pg_connect(config.database_url) as conn:
        total = conn.execute("SELECT count(*) FROM sessions_app_message").fetchone()
    return RecallSetup(
        tenant=tenant,
        secret=secret,
        persons=persons,
        statement=statement,
        model=embedder.model_name,
        pgvector=pgvector,
        table_rows=int(total[0]) if total else 0,
    )


# --- the questions --------------------------------------------------------------------------------

QUESTION_TEMPLATES = [
    "what did I tell you about {o}?",
    "when did we talk about {o}?",
    "does {s} still {vb} {o}?",
    "what did {s} say about {o} {c}?",
    "remind me who {vb} {o}",
    "did I mention {o} {c}?",
    "what do you remember about {s} and {o}?",
    "have we discussed {o} before?",
    "which of my friends {vb} {o}?",
    "was it {c} that {s} talked about {o}?",
]


@dataclass
class Questions:
    texts: list[str]
    distinct: int
    repeats: int  # questions that repeat an earlier one of the same list


def new_question(rng: random.Random) -> str:
    template = rng.choice(QUESTION_TEMPLATES)
    return template.format(
        s=rng.choice(FACT_SUBJECTS).lower(),
        vb=rng.choice(FACT_VERBS),
        o=rng.choice(FACT_OBJECTS)[0],
        c=rng.choice(FACT_CONTEXTS),
    ).replace(" ?", "?")


def question_stream(count: int, seed: int, repeat_share: float = REPEAT_SHARE) -> Questions:
    """`count` questions: each repeats an earlier one with `repeat_share`'s odds, else is new."""
    rng = random.Random(seed)
    asked: list[str] = []
    seen: set[str] = set()
    texts: list[str] = []
    for _ in range(count):
        if asked and rng.random() < repeat_share:
            texts.append(rng.choice(asked))
            continue
        text = new_question(rng)
        while text in seen:
            text = new_question(rng)
        seen.add(text)
        asked.append(text)
        texts.append(text)
    return Questions(texts=texts, distinct=len(asked), repeats=count - len(asked))


# --- the API runs ---------------------------------------------------------------------------------


def search_path(user_id: str, question: str) -> str:
    query = urlencode({"q": question, "user_id": user_id, "mode": "hybrid", "top_k": SEARCH_TOP_K})
    return f"/api/v1/messages/search/?{query}"


def context_path(session_id: str, question: str) -> str:
    query = urlencode({"query": question, "max_tokens": CONTEXT_MAX_TOKENS})
    return f"/api/v1/sessions/{session_id}/context/?{query}"


def warm_workers(*, port: int, secret: str, paths: list[str], workers: int) -> None:
    """The paths, `workers` clients at once: concurrent requests reach every sync worker, so
    each builds the person's index (and loads the embedder) before the clock starts."""
    errors: list[BaseException] = []

    def work(part: list[str]) -> None:
        api = ApiClient(port, secret)
        api.conn.timeout = 600  # a cold build of a big history on a busy machine
        try:
            for path in part:
                api.expect("GET", path, None, 200)
        except BaseException as error:
            errors.append(error)
        finally:
            api.close()

    threads = [
        threading.Thread(target=work, args=(paths[i::workers],), daemon=True)
        for i in range(workers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def timed_gets(*, port: int, secret: str, paths: list[str]) -> tuple[list[float], list[Any]]:
    """One client, sequentially: the latencies and the parsed answers."""
    import json

    api = ApiClient(port, secret)
    latencies: list[float] = []
    payloads: list[bytes] = []
    for path in paths:
        started = time.perf_counter()
        status, payload = api.request("GET", path)
        latencies.append(time.perf_counter() - started)
        if status != 200:
            raise BenchError(f"GET {path} answered {status}: {payload[:300]!r}")
        payloads.append(payload)
    api.close()
    return latencies, [json.loads(payload) for payload in payloads]


def worker_rss_mb(server_group: int | None) -> list[float]:
    """Resident memory of gunicorn's workers (its process group but the master), in MiB."""
    sizes: list[float] = []
    if server_group is None:
        return sizes
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            rest = stat.read_text().rsplit(")", 1)[1].split()
            pid = int(stat.parent.name)
            if int(rest[2]) != server_group or pid == server_group:
                continue
            for line in (stat.parent / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    sizes.append(int(line.split()[1]) / 1024)
    return sorted(sizes)


# --- results --------------------------------------------------------------------------------------


@dataclass
class SizeResult:
    rows: int
    sessions: int
    questions: int
    distinct_questions: int
    repeated_questions: int
    search: Latency
    search_cpu: dict[str, float] | None
    raw: Latency
    raw_cpu: dict[str, float] | None
    modes: dict[str, int]  # the mode the API says ran -> searches
    outsiders: int  # hits outside the person's sessions (0, or a bug)
    hits_mean: float
    raw_hits_mean: float
    overlap: float  # share of the raw top-k the API also returned
    context: Latency
    context_cpu: dict[str, float] | None
    context_tokens: int
    history_tokens: int
    history_hits: int
    worker_rss_mb: list[float]
    build_seconds: list[float] = field(default_factory=list)  # cold builds, in-process
    # A chat turn later (two messages and their vectors): the warm index extended, in-process.
    extend_seconds: list[float] = field(default_factory=list)
    index_bytes: int = 0
    index_docs: int = 0
    index_has_vectors: bool = False


@dataclass
class EmbedResult:
    model: str
    messages: int
    seconds: float
    cpu_seconds: float
    rate: float  # messages per second, wall
    first_call_seconds: float  # the embedder's load and first call, before the clock


@dataclass
class RecallResult:
    sizes: list[SizeResult]
    cache_max_bytes: int  # RECALL_CACHE_MAX_BYTES: the messages' index cache, per process
    fact_cache_max_bytes: int
    embed: EmbedResult | None = None
    appends_off: AppendResult | None = None
    appends_on: AppendResult | None = None
    enqueued_off: int = 0  # tasks the broker's queue got, embeddings off
    enqueued_on: int = 0  # tasks with embeddings on: batches of the appends' requests
    requests_on: int = 0  # session requests those batches carried
    expected_on: int = 0  # appends with embeddings on (each requested: the worst case)


def search_verdict(size: SizeResult) -> str:
    p95 = size.search.p95_ms
    return f"API p95 {p95:.2f} ms (target <= {TARGET_SEARCH_P95_MS:.0f} ms)  " + mark(
        p95 <= TARGET_SEARCH_P95_MS
    )


def context_verdict(size: SizeResult) -> str:
    p95 = size.context.p95_ms
    return f"p95 {p95:.2f} ms (target <= {TARGET_CONTEXT_P95_MS:.0f} ms)  " + mark(
        p95 <= TARGET_CONTEXT_P95_MS
    )


def appends_verdict(result: RecallResult) -> str:
    off, on = result.appends_off, result.appends_on
    assert off is not None
    assert on is not None
    ratio = on.latency.p99_ms / off.latency.p99_ms
    return (
        f"ratio on/off: p99 {ratio:.2f} (target <= {TARGET_APPEND_P99_RATIO}: unchanged within "
        f"noise)  {mark(ratio <= TARGET_APPEND_P99_RATIO)}    "
        f"p50 {on.latency.p50_ms / off.latency.p50_ms:.2f}    rate {on.rate / off.rate:.2f}"
    )


def requests_line(requests: int, tasks: int) -> str:
    return f"{requests} session requests in {tasks} batch tasks" if tasks else "no task"


def cpu_ms(result: AppendResult, owner: str) -> str:
    return f"{result.cpu[owner]:.2f}" if result.cpu is not None else "n/a"


def mib(value: float) -> str:
    return f"{value / 1024 / 1024:,.1f} MiB"


# --- the run --------------------------------------------------------------------------------------


def sizes_line(config: Config) -> str:
    rows = " and ".join(f"{value:,}" for value in config.recall_rows)
    return (
        f"recall: persons of {rows} messages, {config.recall_searches} hybrid searches and "
        f"context calls each, {config.embed_messages} messages embedded, appends with "
        "embeddings off vs on"
    )


def measure_size(*, setup: Setup, server: Gunicorn, person: RecallPerson, index: int) -> SizeResult:
    """One person: the API's hybrid searches and the raw baseline, then the context calls."""

    config = setup.config
    recall = setup.recall
    assert recall is not None
    secret = recall.secret
    say(
        f"\nperson     {person.external_id}: {person.rows:,} messages in "
        f"{len(person.sessions):,} sessions, each with "
        + (
            f"its text's embedding by {recall.model}"
            if recall.pgvector
            else f"a random unit vector of {recall.model}"
        )
    )
    questions = question_stream(config.recall_searches, seed=100 + index)
    say(
        f"questions  {len(questions.texts)} searches, {questions.distinct} distinct: "
        f"{100 * questions.repeats / len(questions.texts):.0f}% repeat an earlier one (each "
        "worker caches\n           the query vectors it embedded: a repeat served by another "
        "worker is embedded again)"
    )
    warm = question_stream(WARMUP_CALLS * config.workers, seed=200 + index, repeat_share=0.0)
    warm_workers(
        port=server.port,
        secret=secret,
        paths=[search_path(person.external_id, text) for text in warm.texts],
        workers=config.workers,
    )
    before = cpu_sample(server.pid)
    latencies, bodies = timed_gets(
        port=server.port,
        secret=secret,
        paths=[search_path(person.external_id, text) for text in questions.texts],
    )
    after = cpu_sample(server.pid)
    search_cpu = cpu_per_request(before, after, len(latencies))
    sessions = set(person.sessions)
    modes = Counter(str(body["mode"]) for body in bodies)
    outsiders = sum(
        1
        for body in bodies
        for hit in body["results"]
        if hit["message"]["session_id"] not in sessions
    )
    found = [[hit["message"]["id"] for hit in body["results"]] for body in bodies]
    pairs: list[tuple[int | str, str]] = [
        (person.external_id, text) for text in questions.texts[:RAW_MAX_SEARCHES]
    ]
    # Scoped to the tenant as the API's connection is: both pay the same row-level security.
    with pg_connect(config.database_url, tenant=recall.tenant.pk, autocommit=True) as conn:
        raw_searches(conn=conn, statement=recall.statement, pairs=pairs[:RAW_WARM_SEARCHES])
        before = cpu_sample(server.pid)
        raw_seconds, raw_found = raw_searches(conn=conn, statement=recall.statement, pairs=pairs)
        after = cpu_sample(server.pid)
        raw_cpu = cpu_per_request(before, after, len(raw_seconds))
    search, raw = Latency.of(latencies), Latency.of(raw_seconds)
    label = f"{person.rows:>9,}"
    pad = " " * len(label)
    say(f"{label}  API  {search.line()}")
    say(f"{pad}       {cpu_line(search_cpu, 'search')}")
    say(
        f"{pad}  raw  {raw.line()}"
        + (f"  (the first {len(pairs)} questions)" if len(pairs) < len(questions.texts) else "")
    )
    say(f"{pad}       {cpu_line(raw_cpu, 'search')}")
    hits = [len(ids) for ids in found]
    raw_hits = [len(ids) for ids in raw_found]
    shared = sum(len(set(a) & set(b)) for a, b in zip(found, raw_found, strict=False))
    overlap = shared / sum(raw_hits) if sum(raw_hits) else 1.0
    mode_text = ", ".join(f"{mode} {count}" for mode, count in sorted(modes.items()))
    if outsiders:
        say(f"check: WARNING: {outsiders} hits outside the person's sessions")
    else:
        say("check: every hit is one of the person's messages")
    say(
        f"       the mode that ran (the API's answer): {mode_text}"
        + ("" if set(modes) == {"hybrid"} else "  WARNING: not every search ran hybrid")
    )
    say(
        f"       hits per search API {sum(hits) / len(hits):.1f}, raw "
        f"{sum(raw_hits) / len(raw_hits):.1f}; {100 * overlap:.0f}% of the raw top "
        f"{SEARCH_TOP_K} also in the API's (BM25 + the vectors vs ts_rank_cd: they differ by "
        "design)"
    )
    size = SizeResult(
        rows=person.rows,
        sessions=len(person.sessions),
        questions=len(questions.texts),
        distinct_questions=questions.distinct,
        repeated_questions=questions.repeats,
        search=search,
        search_cpu=search_cpu,
        raw=raw,
        raw_cpu=raw_cpu,
        modes=dict(modes),
        outsiders=outsiders,
        hits_mean=sum(hits) / len(hits),
        raw_hits_mean=sum(raw_hits) / len(raw_hits),
        overlap=overlap,
        context=Latency.of([]),
        context_cpu=None,
        context_tokens=0,
        history_tokens=0,
        history_hits=0,
        worker_rss_mb=[],
    )
    say(
        f"ratio API/raw {raw.p50_ms / search.p50_ms:.3f} (as rates: raw p50 / API p50; "
        f"API p95 = {search.p95_ms / raw.p95_ms:.2f} x raw p95)    {search_verdict(size)}"
    )
    measure_context(setup=setup, server=server, person=person, index=index, size=size)
    size.worker_rss_mb = worker_rss_mb(server.pid)
    if size.worker_rss_mb:
        say(
            "memory     gunicorn workers' RSS after these calls: "
            + ", ".join(f"{value:.0f}" for value in size.worker_rss_mb)
            + " MiB"
        )
    return size


def measure_context(
    *, setup: Setup, server: Gunicorn, person: RecallPerson, index: int, size: SizeResult
) -> None:
    """GET .../context/?query=... of the person's empty probe session: the history section
    searches every other session of theirs."""
    config = setup.config
    recall = setup.recall
    assert recall is not None
    questions = question_stream(config.recall_searches, seed=300 + index)
    warm = question_stream(WARMUP_CALLS * config.workers, seed=400 + index, repeat_share=0.0)
    warm_workers(
        port=server.port,
        secret=recall.secret,
        paths=[context_path(person.probe, text) for text in warm.texts],
        workers=config.workers,
    )
    before = cpu_sample(server.pid)
    latencies, bodies = timed_gets(
        port=server.port,
        secret=recall.secret,
        paths=[context_path(person.probe, text) for text in questions.texts],
    )
    after = cpu_sample(server.pid)
    first = bodies[0]
    check_context_history(first, f"{person.rows:,}-message person")
    history = next(s for s in first["sections"] if s["name"] == "history")
    size.context = Latency.of(latencies)
    size.context_cpu = cpu_per_request(before, after, len(latencies))
    size.context_tokens = int(first["tokens"])
    size.history_tokens = int(history["tokens"])
    size.history_hits = len(history["included"])
    label = f"{person.rows:>9,}"
    pad = " " * len(label)
    say(
        f"context    GET /api/v1/sessions/{{new session}}/context/?query=...&max_tokens="
        f"{CONTEXT_MAX_TOKENS}, the history in the person's other sessions, "
        f"{len(questions.texts)} calls ({100 * questions.repeats / len(questions.texts):.0f}% "
        "repeated questions)"
    )
    say(f"response   {sections_line(first)}")
    say(f"{label}  {size.context.line()}")
    say(f"{pad}  {cpu_line(size.context_cpu, 'context call')}")
    say(f"context {context_verdict(size)}")


def check_context_history(payload: dict[str, Any], label: str) -> None:
    if payload["tokens"] > CONTEXT_MAX_TOKENS:
        raise BenchError(f"{label}: the context has {payload['tokens']} tokens, over the budget")
    history = next((s for s in payload["sections"] if s["name"] == "history"), None)
    if history is None or not history["included"]:
        raise BenchError(
            f"{label}: the context has no relevant history: "
            + "; ".join(f"{s['name']}: dropped {s['dropped'][:3]}" for s in payload["sections"])
        )


def measure_builds(*, setup: Setup, result: RecallResult) -> None:
    """In-process: each person's index built cold (the cache cleared first), as the first
    search of a worker builds it, and its size against the cache's bound."""
    import gc

    from sessions_app.recall import index_cache, person_index

    recall = setup.recall
    assert recall is not None
    say(
        "\nindex      cold build in-process: index_cache().clear(), then "
        "sessions_app.recall.person_index\n           (the version read, the person's messages "
        "and vectors, the build), as a worker's first search does;\n           the cache's "
        f"bound: RECALL_CACHE_MAX_BYTES = {mib(result.cache_max_bytes)} per process for the "
        f"messages' indexes\n           (and {mib(result.fact_cache_max_bytes)} for the facts', "
        "facts_app.recall.FACT_CACHE_SHARE of it)"
    )
    for person, size in zip(recall.persons, result.sizes, strict=True):
        builds = 3 if person.rows <= 20_000 else 2
        built = None
        for _ in range(builds):
            index_cache().clear()
            built = None
            gc.collect()
            started = time.perf_counter()
            built = person_index(tenant_id=recall.tenant.pk, end_user_id=person.pk)
            size.build_seconds.append(time.perf_counter() - started)
        if built is None:
            raise BenchError(f"{person.external_id}: person_index found no person")
        size.index_bytes = built.memory_bytes()
        size.index_docs = len(built)
        size.index_has_vectors = built.has_vectors
        fits = size.index_bytes <= result.cache_max_bytes
        per_cache = result.cache_max_bytes // max(size.index_bytes, 1)
        say(
            f"{person.rows:>9,}  build {size.build_seconds[0]:.2f} s first, "
            f"{statistics.median(size.build_seconds):.2f} s median of {builds}; memory_bytes "
            f"{mib(size.index_bytes)} ({size.index_bytes / max(size.index_docs, 1):,.0f} bytes a "
            f"message, vectors {'in' if size.index_has_vectors else 'not in'} the index); "
            + (
                f"the cache holds {per_cache:,} such persons"
                if fits
                else "WARNING: larger than the cache's bound: searches answer history_too_large"
            )
        )
        if fits:
            size.extend_seconds = measure_extensions(
                recall=recall, person=person, with_vectors=size.index_has_vectors
            )
            extend = statistics.median(size.extend_seconds)
            say(
                f"{'':>9}  after a chat turn: extended in {extend * 1000:.1f} ms (median of "
                f"{len(size.extend_seconds)}), {statistics.median(size.build_seconds) / extend:.1f}"
                " x less than the cold build it replaces"
            )
    index_cache().clear()
    gc.collect()


EXTEND_TURNS = 7
TURN = (
    ("user", "By the way, my sister moved to Porto and started a pottery class on Thursdays."),
    ("assistant", "Porto is lovely in spring. Should I remind you to call her after class?"),
)


def measure_extensions(
    *, recall: RecallSetup, person: RecallPerson, with_vectors: bool
) -> list[float]:
    """In-process, in a transaction rolled back at the end (the person is kept for later runs):
    `EXTEND_TURNS` chat turns appended to the person's last session, each with its vectors
    stored as the worker stores them; after each, person_index as the next search calls it.
    Before the index could be extended, each of those calls built the person's whole index
    again (the cold build above)."""
    from django.db import transaction

    from memoryhub.accounts.services import end_user_recall_touch
    from memoryhub.llm.embeddings import get_embedder, vector_to_bytes
    from sessions_app.models import MessageVector
    from sessions_app.recall import index_cache, person_index
    from sessions_app.services import MessageInput, message_append_batch

    seconds: list[float] = []
    embedder = get_embedder()
    with transaction.atomic():
        for turn in range(EXTEND_TURNS):
            made = message_append_batch(
                tenant=recall.tenant,
                session_id=uuid.UUID(person.sessions[-1]),
                messages=[MessageInput(role=role, content=content) for role, content in TURN],
            )
            if with_vectors and embedder is not None:
                vectors = random_unit_vectors(len(made), embedder.dimensions, seed=900 + turn)
                MessageVector.objects.bulk_create(
                    MessageVector(
                        tenant=recall.tenant,
                        message=message,
                        end_user_id=person.pk,
                        model=embedder.model_name,
                        vector=vector_to_bytes(vector),
                    )
                    for message, vector in zip(made, vectors, strict=True)
                )
                end_user_recall_touch(
                    tenant=recall.tenant, end_user_ids=[person.pk], vectors_only=True
                )
            started = time.perf_counter()
            person_index(tenant_id=recall.tenant.pk, end_user_id=person.pk)
            seconds.append(time.perf_counter() - started)
        transaction.set_rollback(True)
    index_cache().clear()  # it held the rolled-back turns
    return seconds


def measure_embedding(*, setup: Setup, result: RecallResult) -> None:
    """In-process, one thread as a worker runs it: message_vectors_compute over a fresh session
    of --embed-messages messages (the same kind of turns as the history)."""

    from memoryhub.llm.embeddings import get_embedder
    from sessions_app.embedding import message_vectors_compute
    from sessions_app.models import MessageVector

    config = setup.config
    recall = setup.recall
    assert recall is not None
    embedder = get_embedder()
    assert embedder is not None
    session_id = setup.new_session("recall-embed", tenant=recall.tenant)
    session = uuid.UUID(session_id)
    count = config.embed_messages
    with pg_connect(config.database_url) as conn:
        conn.execute(
            RECALL_LOAD,
            load_params(
                tenant_id=recall.tenant.pk, sessions=[session], rows=count, per=count, offset=0
            ),
        )
        conn.execute(
            "UPDATE sessions_app_session SET last_seq = %(n)s, message_count = %(n)s "
            "WHERE id = %(s)s",
            {"n": count, "s": session},
        )
        conn.commit()
    started = time.perf_counter()
    embedder.embed_passages(["Warm-up: the model loads on its first call."])
    first_call = time.perf_counter() - started
    cpu_before = time.process_time()
    started = time.perf_counter()
    done = message_vectors_compute(session_id=session)
    seconds = time.perf_counter() - started
    cpu_seconds = time.process_time() - cpu_before
    stored = MessageVector.objects.filter(message__session_id=session).count()
    if done != count or stored != count:
        raise BenchError(f"embedding: {done} computed, {stored} stored, expected {count}")
    result.embed = EmbedResult(
        model=embedder.model_name,
        messages=count,
        seconds=seconds,
        cpu_seconds=cpu_seconds,
        rate=count / seconds,
        first_call_seconds=first_call,
    )
    say(
        f"\nembedding  message_vectors_compute in-process, {embedder!r} (the worker's code: "
        "read the messages\n           without a vector, embed them in batches, store the "
        f"vectors): {count} messages of a fresh session\n           in {seconds:.2f} s = "
        f"{result.embed.rate:.1f} messages/s, {cpu_seconds / count * 1000:.1f} ms CPU a message "
        f"(the model's load and first call, {first_call:.2f} s, before)"
    )
    say(
        f"embedding  {result.embed.rate:.1f} messages/s per worker process (target >= "
        f"{TARGET_EMBED_RATE:.0f})  {mark(result.embed.rate >= TARGET_EMBED_RATE)}"
    )


class EmbeddingRequestReset(RequestReset):
    """What a finished embedding task does to its request: clear `embedding_requested_at`, so
    the next append requests (and enqueues) again."""

    SQL = "UPDATE sessions_app_session SET embedding_requested_at = NULL WHERE id = %s"
    KINDS = ()  # counts nothing: the batch tasks' keys are the check here


def measure_appends(*, setup: Setup, on_server: Gunicorn, result: RecallResult) -> None:
    """The append workload on two gunicorns, embeddings off and on, in alternating rounds
    (LLM_ROUNDS); every append's embedding request is cleared after it, as a finished task
    would, so that with embeddings on every append requests and enqueues: the worst case."""
    from sessions_app.pending import APPEND_GATHER_SECONDS

    config = setup.config
    recall = setup.recall
    assert recall is not None
    off_server = Gunicorn(
        env={**setup.env, "EMBEDDINGS_BACKEND": "off"},
        workers=config.workers,
        worker_class=config.worker_class,
        threads=config.threads,
    )
    servers = {"off": off_server, "on": on_server}
    per_mode: dict[str, list[ClientsOutcome]] = {"off": [], "on": []}
    enqueued = {"off": 0, "on": 0}
    requests = {"off": 0, "on": 0}
    per_round = max(1, config.appends // LLM_ROUNDS.count("on"))
    say(
        f"\nappends    {config.clients} clients, embeddings off (a gunicorn with "
        "EMBEDDINGS_BACKEND=off) vs on, alternating rounds;\n           the request is "
        "cleared after every append, so with embeddings on every append requests embedding\n"
        "           (each web process publishes one task per "
        f"{APPEND_GATHER_SECONDS} s for its appends' requests)"
    )
    try:
        off_server.start()
        sessions = {
            mode: [
                setup.new_session(f"recall-append-{mode}-{i}", tenant=recall.tenant)
                for i in range(config.clients)
            ]
            for mode in ("off", "on")
        }
        appended = dict.fromkeys(sessions, 0)
        for round_number, mode in enumerate(LLM_ROUNDS, 1):
            server = servers[mode]
            warmup = config.warmup if appended[mode] == 0 else 0
            resets = [
                EmbeddingRequestReset(config.database_url, value, 1) for value in sessions[mode]
            ]
            queued_tasks()  # the previous round's tasks: this round counts its own
            try:
                outcome = run_clients(
                    [
                        api_append_worker(
                            port=server.port,
                            secret=recall.secret,
                            session_id=session_id,
                            client=i,
                            warmup=warmup,
                            count=per_round,
                            after=reset,
                        )
                        for i, (session_id, reset) in enumerate(
                            zip(sessions[mode], resets, strict=True)
                        )
                    ],
                    server_group=server.pid,
                )
            finally:
                for reset in resets:
                    reset.close()
            # A web process publishes what its appends requested a moment after the last one.
            time.sleep(APPEND_GATHER_SECONDS + 0.5)
            tasks = queued_tasks()
            grew = len(tasks)
            enqueued[mode] += grew
            # The batch tasks carry the appends' requests of every kind: count the embedding's.
            batched = gathered(tasks, "embedding")
            requests[mode] += len(batched)
            if mode == "on" and not set(sessions[mode]) <= set(batched):
                say(f"WARNING: round {round_number}: a session's embedding request was not queued")
            per_mode[mode].append(outcome)
            appended[mode] += warmup + per_round
            done = append_result(outcome)
            say(
                f"round {round_number} {mode:>3}  {done.appends} appends in "
                f"{done.seconds:5.2f} s = {done.rate:7.1f}/s   p50 "
                f"{done.latency.p50_ms:6.2f} ms   p99 {done.latency.p99_ms:6.2f} ms   "
                f"queue +{grew} ({requests_line(len(batched), grew)})"
            )
        for mode, ids in sessions.items():
            check_gapless(config.database_url, ids, appended[mode])
    except BenchError:
        say(f"\ngunicorn (embeddings off) log (tail):\n{off_server.tail()}")
        raise
    finally:
        off_server.stop()
    result.appends_off = append_result(*per_mode["off"])
    result.appends_on = append_result(*per_mode["on"])
    result.enqueued_off, result.enqueued_on = enqueued["off"], enqueued["on"]
    result.requests_on = requests["on"]
    result.expected_on = appended["on"] * config.clients
    say_appends("off  ", result.appends_off)
    say_appends(" on  ", result.appends_on)
    say(
        f"check: the queue got {result.enqueued_off} tasks with embeddings off and "
        f"{result.enqueued_on} with them on for {result.expected_on} appends (warm-up included), "
        f"{requests_line(result.requests_on, result.enqueued_on)}; every round's sessions were "
        "in them; every session holds seqs 1..N without gaps"
    )
    if result.enqueued_off != 0 or not 0 < result.enqueued_on < result.expected_on:
        say("WARNING: the enqueued tasks are not what the settings should give")
    say(appends_verdict(result))


def run(setup: Setup) -> RecallResult:
    from django.conf import settings

    from facts_app.recall import FACT_CACHE_SHARE

    config = setup.config
    recall = setup.recall
    assert recall is not None
    section("Recall: hybrid message search, the context's relevant history, the index, embeddings")
    say(
        f"tenant     {RECALL_TENANT} (summaries and extraction off, messages kept); "
        f"sessions_app_message holds {recall.table_rows:,} rows"
    )
    say(
        "vectors    the histories' texts' embeddings (computed once at the load): pgvector "
        "holds them;\n           a person of RECALL_PGVECTOR_FROM_MESSAGES "
        f"({settings.RECALL_PGVECTOR_FROM_MESSAGES:,}) messages or more is ranked by the "
        "database\n           (its HNSW index's speed depends on what they mean), a smaller "
        "one in each worker's index"
        if recall.pgvector
        else "vectors    the histories' vectors are random unit vectors (stored as the worker "
        "stores real ones):\n           the search's speed does not depend on what they mean, "
        "and the embedder takes ~3-5 ms CPU a\n           message; no pgvector: each worker's "
        "index holds them"
    )
    say(
        "API        GET /api/v1/messages/search/?q=...&user_id=...&mode=hybrid&top_k="
        f"{SEARCH_TOP_K}, one client;\n           the query embedding included: a question "
        "new to the worker is embedded in the request"
    )
    say(
        "raw        the database's full-text search of the same person's messages "
        "(sessions_app.selectors.message_search's\n           statement, values inlined as "
        "Django sends them): a search without the app's index"
    )
    result = RecallResult(
        sizes=[],
        cache_max_bytes=int(settings.RECALL_CACHE_MAX_BYTES),
        fact_cache_max_bytes=int(settings.RECALL_CACHE_MAX_BYTES * FACT_CACHE_SHARE),
    )
    server = Gunicorn(
        env=setup.env,
        workers=config.workers,
        worker_class=config.worker_class,
        threads=config.threads,
    )
    try:
        server.start()
        say(f"gunicorn   up on 127.0.0.1:{server.port} (embeddings on)")
        for index, person in enumerate(recall.persons):
            result.sizes.append(
                measure_size(setup=setup, server=server, person=person, index=index)
            )
        measure_appends(setup=setup, on_server=server, result=result)
    except BenchError:
        say(f"\ngunicorn log (tail):\n{server.tail()}")
        raise
    finally:
        server.stop()
    measure_builds(setup=setup, result=result)
    measure_embedding(setup=setup, result=result)
    return result


# The query's embedding runs on the request's thread for a search without a person's index
# cached, and on the embedding-ahead thread otherwise (cProfile sees only this thread: there the
# wait for it shows as the future's result()).
QUERY_PHASES: list[Phase] = [
    (1, "query embedding, this thread (embed_query)", "memoryhub/llm/embeddings.py",
     "embed_query", "max"),
    (1, "waiting for the query embedded ahead (Future.result)", "concurrent/futures/_base.py",
     "result", "max"),
    (1, "the ranking (rank)", "memoryhub/core/recall/hybrid.py", "rank", "max"),
]  # fmt: skip
SEARCH_PHASES: list[Phase] = [
    *AUTH_PHASES,
    (1, "the person's index (person_index)", "sessions_app/recall.py", "person_index", "max"),
    *QUERY_PHASES,
    (1, "hit rows (_hit_rows)", "sessions_app/recall.py", "_hit_rows", "max"),
]  # fmt: skip


def profile(setup: Setup, client: InProcessClient) -> dict[str, Any]:
    """The hybrid search and the context call of the smallest person, in this process: where
    the time of each goes. Every question is new (no query vector cached), the worst case."""
    config = setup.config
    recall = setup.recall
    assert recall is not None
    client = InProcessClient(recall.secret)  # the recall tenant's key, not the bench tenant's
    person = recall.persons[0]
    results: dict[str, Any] = {}
    questions = question_stream(4 * config.profile_requests + 200, seed=900, repeat_share=0.0).texts
    # A half each: the context call asked the search's questions, whose vectors this process had
    # cached, so its profile left out the query's embedding.
    half = len(questions) // 2
    for key, what, path_of, asked, phases in (
        ("recall_search", "hybrid search", lambda q: search_path(person.external_id, q),
         questions[:half], SEARCH_PHASES),
        ("recall_context", "context call with history", lambda q: context_path(person.probe, q),
         questions[half:], [*CONTEXT_PHASES, *QUERY_PHASES]),
    ):  # fmt: skip
        section(f"Profile of one {what} ({person.rows:,}-message person, new questions)")

        def call(index: int, path_of: Any = path_of, asked: list[str] = asked) -> None:
            client("GET", path_of(asked[index % len(asked)]), None, 200)

        measured = profile_requests(
            what=what, request=call, count=config.profile_requests, phases=phases
        )
        print_profile(measured, top=True)
        results[key] = asdict(measured)
    return results


def record(result: RecallResult, setup: Setup) -> dict[str, Any]:
    recall = setup.recall
    return {
        "recall": asdict(result),
        "recall_sql": recall.statement.sql if recall is not None else None,
    }


def summary(result: RecallResult, config: Config, profiles: dict[str, Any]) -> None:
    for size in result.sizes:
        say(
            f"recall  search {size.rows:>7,}  p50 {size.search.p50_ms:6.2f} ms   p95 "
            f"{size.search.p95_ms:6.2f} ms   {search_verdict(size)}"
        )
        say(
            f"recall  raw    {size.rows:>7,}  p50 {size.raw.p50_ms:6.2f} ms   p95 "
            f"{size.raw.p95_ms:6.2f} ms   ratio API/raw {size.raw.p50_ms / size.search.p50_ms:.3f}"
            " (raw p50 / API p50)"
        )
        say(
            f"recall  context {size.rows:>6,}  p50 {size.context.p50_ms:6.2f} ms   p95 "
            f"{size.context.p95_ms:6.2f} ms   {context_verdict(size)}"
        )
        if size.build_seconds:
            say(
                f"recall  index  {size.rows:>7,}  cold build "
                f"{statistics.median(size.build_seconds):.2f} s, memory_bytes "
                f"{mib(size.index_bytes)} (cache bound {mib(result.cache_max_bytes)} per process)"
                + (
                    f"; after a chat turn extended in "
                    f"{statistics.median(size.extend_seconds) * 1000:.1f} ms"
                    if size.extend_seconds
                    else ""
                )
            )
    if result.embed is not None:
        say(
            f"recall  embedding {result.embed.rate:.1f} messages/s per worker process (target >= "
            f"{TARGET_EMBED_RATE:.0f})  {mark(result.embed.rate >= TARGET_EMBED_RATE)}"
        )
    if result.appends_off is not None and result.appends_on is not None:
        say(
            f"recall  appends off p99 {result.appends_off.latency.p99_ms:6.2f} ms   on p99 "
            f"{result.appends_on.latency.p99_ms:6.2f} ms    rate off "
            f"{result.appends_off.rate:6.1f}/s  on {result.appends_on.rate:6.1f}/s"
        )
        say(
            f"recall  appends CPU per append off {cpu_ms(result.appends_off, 'total_ms')} ms "
            f"(gunicorn {cpu_ms(result.appends_off, 'gunicorn_ms')})   on "
            f"{cpu_ms(result.appends_on, 'total_ms')} ms (gunicorn "
            f"{cpu_ms(result.appends_on, 'gunicorn_ms')})"
        )
        say(f"recall  appends {appends_verdict(result)}")


def verdicts(result: RecallResult, config: Config) -> list[Verdict]:
    rows: list[Verdict] = []
    for size in result.sizes:
        rows.append(
            Verdict(
                target=f"hybrid search p95 <= {TARGET_SEARCH_P95_MS:.0f} ms at {size.rows:,} "
                "messages/person (embedding incl.)",
                measured=f"p95 {size.search.p95_ms:.2f} ms",
                baseline=f"p95 {size.raw.p95_ms:.2f} ms (lexical SQL)",
                ratio=f"{size.search.p95_ms / size.raw.p95_ms:.1f}x raw",
                ok=size.search.p95_ms <= TARGET_SEARCH_P95_MS,
            )
        )
        rows.append(
            Verdict(
                target=f"context p95 <= {TARGET_CONTEXT_P95_MS:.0f} ms with history, "
                f"{size.rows:,} messages/person",
                measured=f"p95 {size.context.p95_ms:.2f} ms",
                ok=size.context.p95_ms <= TARGET_CONTEXT_P95_MS,
            )
        )
    if result.embed is not None:
        rows.append(
            Verdict(
                target=f"(#13) embedding >= {TARGET_EMBED_RATE:.0f} messages/s per worker",
                measured=f"{result.embed.rate:.1f} messages/s",
                ok=result.embed.rate >= TARGET_EMBED_RATE,
            )
        )
    off, on = result.appends_off, result.appends_on
    if off is not None and on is not None:
        ratio = on.latency.p99_ms / off.latency.p99_ms
        rows.append(
            Verdict(
                target=f"(#13) append p99 embeddings on/off <= {TARGET_APPEND_P99_RATIO}",
                measured=f"p99 {on.latency.p99_ms:.2f} ms on",
                baseline=f"p99 {off.latency.p99_ms:.2f} ms off",
                ratio=f"{ratio:.2f}",
                ok=ratio <= TARGET_APPEND_P99_RATIO,
            )
        )
    return rows
