"""Context: GET /api/v1/sessions/{id}/context/?max_tokens=4000 on two sessions of one person
(1,000 messages, and --context-rows), interleaved; p95 of each and their ratio."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from bench.config import CONTEXT_SMALL_ROWS, Config
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
from bench.parts.facts import (
    FACT_CONTEXTS,
    FACT_OBJECTS,
    FACT_QUESTIONS,
    FACT_SUBJECTS,
    FACT_VERBS,
    FactSet,
)
from bench.profiling import AUTH_PHASES, InProcessClient, Phase, print_profile, profile_requests

if TYPE_CHECKING:
    from memoryhub.accounts.models import Tenant

# Issue 18's targets, with the relevant-history section on (the tenant's policy default: the
# context searches the person's history for the session's last user turn).
TARGET_CONTEXT_P95_MS = 10.0  # API context call p95, both sessions, at most
TARGET_CONTEXT_RATIO = 1.2  # p95(1,000,000-message session) / p95(1,000-message session), at most
TARGET_CONTEXT_ROWS = 1_000_000
CONTEXT_MAX_TOKENS = 4_000

# A person-owned session's user turns ask things about the fact set's words; the assistant turns
# answer with a fact-like sentence. The content is a function of the distance from the newest
# message (k = rows - seq), so every context session ends with the same turns: its context
# differs only by how much history lies behind it.
CONTEXT_OPENERS = [
    "", "Quick question: ", "By the way, ", "Remind me, ", "Sorry to ask again, ",
    "Before I forget: ", "One more thing, ", "Hey! ",
]  # fmt: skip
CONTEXT_FOLLOW_UPS = [
    "Anything else you want me to keep in mind?",
    "I can set a reminder for that if you like.",
    "Let me know if that has changed.",
    "Should I add that to your notes?",
    "That came up last week as well.",
    "I'll take that into account next time.",
]
CONTEXT_LONG_TAIL = (
    " For context, here is what I have from our earlier conversations: the plans for the trip, "
    "the list of restaurants we talked about, who is coming to the party on Saturday, and the "
    "questions you wanted to ask the landlord about the heating."
)
CONTEXT_LOAD = """
INSERT INTO sessions_app_message
    (tenant_id, session_id, seq, role, content, name, tool_call_id, tool_calls, metadata,
     token_count, created_at)
SELECT %(tenant)s, %(session)s, g.g, m.role, m.content, '', '', NULL, '{}'::jsonb,
       greatest(1, length(m.content) / 4), now() - make_interval(secs => k.k * 20)
FROM (SELECT %(questions)s::text[] AS q, %(openers)s::text[] AS op, %(follow)s::text[] AS fu,
             %(subjects)s::text[] AS s, %(verbs)s::text[] AS vb, %(objects)s::text[] AS o,
             %(contexts)s::text[] AS c) AS w
CROSS JOIN generate_series(1, %(rows)s) AS g(g)
CROSS JOIN LATERAL (SELECT (%(rows)s - g.g)::bigint AS k) AS k  -- 0: the newest message
CROSS JOIN LATERAL (
    SELECT 1 + (hashint8extended(k.k, 11) & 2147483647) %% cardinality(w.q) AS q,
           1 + (hashint8extended(k.k, 12) & 2147483647) %% cardinality(w.op) AS op,
           1 + (hashint8extended(k.k, 13) & 2147483647) %% cardinality(w.fu) AS fu,
           1 + (hashint8extended(k.k, 14) & 2147483647) %% 50 AS s,
           1 + (hashint8extended(k.k, 15) & 2147483647) %% 50 AS vb,
           1 + (hashint8extended(k.k, 16) & 2147483647) %% 50 AS o,
           1 + (hashint8extended(k.k, 17) & 2147483647) %% 50 AS c,
           (hashint8extended(k.k, 18) & 2147483647) %% 5 = 0 AS long  -- 20%% are longer
) AS p
CROSS JOIN LATERAL (
    SELECT CASE WHEN k.k %% 2 = 0 THEN 'user' ELSE 'assistant' END AS role,
           CASE WHEN k.k %% 2 = 0
                THEN w.op[p.op] || w.q[p.q]
                     || CASE WHEN p.long THEN ' I am asking because of the plans for Saturday.'
                             ELSE '' END
                ELSE 'From what I remember, ' || lower(w.s[p.s]) || ' ' || w.vb[p.vb] || ' '
                     || w.o[p.o] || ' ' || w.c[p.c] || '. ' || w.fu[p.fu]
                     || CASE WHEN p.long THEN %(tail)s ELSE '' END
           END AS content
) AS m
"""
CONTEXT_USER_MEMORIES = [
    # (key, content, pinned)
    ("name", "Her name is Alex Morgan; she prefers to be called Alex.", True),
    ("timezone", "Lives in Berlin (Europe/Berlin); usually writes in the evening.", False),
    ("diet", "Vegetarian; allergic to peanuts and shellfish.", True),
    ("job", "Works as a data engineer at a logistics company, mostly remote.", False),
    ("family", "Has a brother (Tom) and a daughter (Mia, 7); her mother lives in Lyon.", False),
    ("preferences", "Likes short answers with bullet points; dislikes emojis.", False),
]
CONTEXT_TENANT_MEMORIES = [
    ("bench_reply_style", "Answer in the user's language; keep replies under 150 words.", True),
    ("bench_support_hours", "Human support is available Monday to Friday, 9:00-17:00 CET.", False),
]
CONTEXT_LONG_TERM_NOTE = """# About Alex
- Data engineer, remote; on call every fourth week (next: the week of the 14th).
- Training for a half marathon in the autumn; runs on Tuesdays, Thursdays and Sundays.
- Learning Japanese (lesson on Wednesdays); planning a trip to Tokyo next spring.
- Mother in Lyon: calls on Sundays; birthday in early March.
# Open threads
- Wants to compare two mountain bikes before the end of the month.
- Asked for a reminder to renew the passport (expires in August).
- Looking for a vegetarian restaurant for her brother's birthday dinner."""
CONTEXT_DAILY_NOTES = {
    # days before today: content
    0: "Asked about the deployment window on Thursday; on call this week.",
    1: "Booked the dentist for next Tuesday at 8:30.",
    3: "Mia's school trip is on Friday; needs a packed lunch (no peanuts).",
    6: "Started the new running plan: 3 x 5 km this week.",
}
CONTEXT_SUMMARY = (
    "Alex and the assistant have talked over many weeks about her family, her food preferences "
    "and allergies, her running plan and the trip to Tokyo. Earlier in this conversation she "
    "asked what her brother, her colleagues and her friends like, and the assistant answered "
    "from what it remembered; open items are the bike comparison, the passport renewal and the "
    "restaurant for her brother's birthday."
)

# Every one of these sections must include something, or the bench is not measuring it.
CONTEXT_SECTIONS = (
    "memories",
    "facts",
    "long_term_note",
    "today_note",
    "recent_notes",
    "summary",
    "messages",
)


@dataclass
class ContextSession:
    id: str
    rows: int
    loaded_seconds: float | None  # None: reused from an earlier run


@dataclass
class ContextSetup:
    person: str  # external id: the fact set's first user
    facts: int  # the person's facts
    small: ContextSession
    large: ContextSession
    table_rows: int  # sessions_app_message, all sessions
    memories: int
    tenant_memories: int
    daily_notes: int


def ensure_context_person(*, tenant: Tenant, person: str) -> tuple[int, int, int]:
    """Memories (the person's and tenant-wide), a long-term note and daily notes of the last
    week for `person`. Idempotent: saving the same text again writes nothing, and a day's note
    is appended only when that day has none. Returns (memories, tenant memories, daily notes)."""
    from facts_app.selectors.notes import note_recall
    from facts_app.services.memories import memory_save
    from facts_app.services.notes import note_daily_append, note_long_term_save, today_utc
    from memoryhub.accounts.selectors import end_user_get_for_tenant

    end_user = end_user_get_for_tenant(tenant=tenant, external_id=person)
    for key, content, pinned in CONTEXT_USER_MEMORIES:
        memory_save(tenant=tenant, end_user=end_user, key=key, content=content, pinned=pinned)
    for key, content, pinned in CONTEXT_TENANT_MEMORIES:
        memory_save(tenant=tenant, end_user=None, key=key, content=content, pinned=pinned)
    note_long_term_save(tenant=tenant, end_user=end_user, content=CONTEXT_LONG_TERM_NOTE)
    today = today_utc()
    recall = note_recall(tenant=tenant, end_user=end_user, today=today, days=8)
    have = {note.day for note in recall.daily if note.content}
    for days_ago, content in CONTEXT_DAILY_NOTES.items():
        day = today - dt.timedelta(days=days_ago)
        if day not in have:
            note_daily_append(tenant=tenant, end_user=end_user, content=content, day=day)
    return len(CONTEXT_USER_MEMORIES), len(CONTEXT_TENANT_MEMORIES), len(CONTEXT_DAILY_NOTES)


def ensure_context_session(
    *, tenant: Tenant, database_url: str, person: str, rows: int
) -> ContextSession:
    """A session of `person` holding exactly `rows` messages (alternating user and assistant,
    varied text) and a summary of all but the last 40, bulk-loaded once and reused afterwards
    (found by its metadata and owner)."""

    from sessions_app.models import Session, Summary
    from sessions_app.services import session_create_or_get

    marker = f"context-{rows}"
    session = (
        Session.objects.filter(tenant=tenant, metadata__bench=marker, end_user__external_id=person)
        .order_by("-message_count")
        .first()
    )
    if session is None:
        session, _ = session_create_or_get(
            tenant=tenant, user_id=person, agent_id="bench-context", metadata={"bench": marker}
        )
    loaded: float | None = None
    with pg_connect(database_url) as conn:
        count, top = conn.execute(
            "SELECT count(*), coalesce(max(seq), 0) FROM sessions_app_message "
            "WHERE session_id = %s",
            (session.pk,),
        ).fetchone() or (0, 0)
        counters = conn.execute(
            "SELECT last_seq, message_count FROM sessions_app_session WHERE id = %s",
            (session.pk,),
        ).fetchone()
        if (count, top) != (rows, rows) or counters != (rows, rows):
            say(
                f"loading {rows:,} messages into a context session of {person} "
                "(once; later runs reuse it)"
            )
            started = time.perf_counter()
            conn.execute("DELETE FROM sessions_app_message WHERE session_id = %s", (session.pk,))
            conn.execute(
                CONTEXT_LOAD,
                {
                    "tenant": tenant.pk,
                    "session": session.pk,
                    "rows": rows,
                    "questions": FACT_QUESTIONS,
                    "openers": CONTEXT_OPENERS,
                    "follow": CONTEXT_FOLLOW_UPS,
                    "subjects": FACT_SUBJECTS,
                    "verbs": FACT_VERBS,
                    "objects": [name for name, _ in FACT_OBJECTS],
                    "contexts": FACT_CONTEXTS,
                    "tail": CONTEXT_LONG_TAIL,
                },
            )
            conn.execute(
                "UPDATE sessions_app_session SET last_seq = %(rows)s, message_count = %(rows)s, "
                "token_count = (SELECT coalesce(sum(token_count), 0) FROM sessions_app_message "
                "WHERE session_id = %(session)s), last_active_at = now(), updated_at = now() "
                "WHERE id = %(session)s",
                {"rows": rows, "session": session.pk},
            )
            conn.commit()
            # VACUUM too, as for the facts: autovacuum would otherwise start on the table during
            # the timed calls.
            conn.autocommit = True
            conn.execute("VACUUM ANALYZE sessions_app_message")
            conn.execute("ANALYZE sessions_app_session")
            loaded = time.perf_counter() - started
    through = rows - 40
    if not Summary.objects.filter(session=session, through_seq=through).exists():
        Summary.objects.filter(session=session).delete()
        Summary.objects.create(
            tenant=tenant,
            session=session,
            text=CONTEXT_SUMMARY,
            through_seq=through,
            token_count=len(CONTEXT_SUMMARY) // 4,
            model=Summary.MANUAL_MODEL,
        )
    return ContextSession(id=str(session.pk), rows=rows, loaded_seconds=loaded)


def ensure_context(*, tenant: Tenant, config: Config, fact_set: FactSet) -> ContextSetup:

    person = fact_set.user_ids[0]
    memories, tenant_memories, daily = ensure_context_person(tenant=tenant, person=person)
    small = ensure_context_session(
        tenant=tenant, database_url=config.database_url, person=person, rows=CONTEXT_SMALL_ROWS
    )
    large = ensure_context_session(
        tenant=tenant, database_url=config.database_url, person=person, rows=config.context_rows
    )
    with pg_connect(config.database_url) as conn:
        total = conn.execute("SELECT count(*) FROM sessions_app_message").fetchone()
        facts = conn.execute(
            "SELECT count(*) FROM facts_app_fact f JOIN accounts_enduser u "
            "ON u.id = f.end_user_id WHERE u.tenant_id = %s AND u.external_id = %s",
            (tenant.pk, person),
        ).fetchone()
    return ContextSetup(
        person=person,
        facts=int(facts[0]) if facts else 0,
        small=small,
        large=large,
        table_rows=int(total[0]) if total else 0,
        memories=memories,
        tenant_memories=tenant_memories,
        daily_notes=daily,
    )


def context_path(session_id: str) -> str:
    return f"/api/v1/sessions/{session_id}/context/?max_tokens={CONTEXT_MAX_TOKENS}"


def check_context(payload: dict[str, Any], label: str) -> None:
    if payload["tokens"] > CONTEXT_MAX_TOKENS:
        raise BenchError(f"{label}: the context has {payload['tokens']} tokens, over the budget")
    empty = [
        s["name"]
        for s in payload["sections"]
        if s["name"] in CONTEXT_SECTIONS and not s["included"]
    ]
    if empty:
        raise BenchError(
            f"{label}: the context left sections empty ({', '.join(empty)}): "
            + "; ".join(f"{s['name']}: dropped {s['dropped'][:3]}" for s in payload["sections"])
        )


def sections_line(payload: dict[str, Any]) -> str:
    parts = [
        f"{s['name']} {s['tokens']} ({len(s['included'])})"
        for s in payload["sections"]
        if s["included"]
    ]
    return f"{payload['tokens']} of {payload['max_tokens']} tokens: " + ", ".join(parts)


def api_contexts(
    *, port: int, secret: str, paths: list[str], count: int, warmup: int
) -> tuple[list[list[float]], list[dict[str, Any]]]:
    """One client, sequentially, the paths interleaved (a, b, a, b, ...) so that both see the
    same machine; per path its latencies, and its first response."""
    api = ApiClient(port, secret)
    first = [api.expect("GET", path, None, 200) for path in paths]
    for _ in range(warmup):
        for path in paths:
            api.expect("GET", path, None, 200)
    latencies: list[list[float]] = [[] for _ in paths]
    for _ in range(count):
        for index, path in enumerate(paths):
            started = time.perf_counter()
            status, payload = api.request("GET", path)
            latencies[index].append(time.perf_counter() - started)
            if status != 200:
                raise BenchError(f"context answered {status}: {payload[:300]!r}")
    api.close()
    return latencies, first


def context_note(config: Config) -> str:
    if config.context_rows >= TARGET_CONTEXT_ROWS:
        return ""
    return f"  (the targets are set at {TARGET_CONTEXT_ROWS:,} messages: --big)"


@dataclass
class ContextResult:
    small_rows: int
    large_rows: int
    small: Latency
    large: Latency
    ratio: float  # p95(large) / p95(small)
    cpu: dict[str, float] | None  # per context call, both sessions
    tokens: int
    sections: list[dict[str, Any]]


def context_verdict(result: ContextResult, config: Config) -> str:
    worst = max(result.small.p95_ms, result.large.p95_ms)
    big = result.large_rows >= TARGET_CONTEXT_ROWS
    return (
        f"p95 {worst:.2f} ms (worst of both; target <= {TARGET_CONTEXT_P95_MS:.0f} ms)  "
        f"{judged(worst <= TARGET_CONTEXT_P95_MS, big)}    ratio p95({result.large_rows:,})/"
        f"p95({result.small_rows:,}) {result.ratio:.2f} (target <= {TARGET_CONTEXT_RATIO})  "
        f"{judged(result.ratio <= TARGET_CONTEXT_RATIO, big)}" + context_note(config)
    )


CONTEXT_PHASES: list[Phase] = [
    *AUTH_PHASES,
    (
        1,
        "query-string validation (ContextQuerySerializer)",
        "rest_framework/serializers.py",
        "is_valid",
        "max",
    ),
    (
        1,
        "session + its summary (session_get_for_context)",
        "sessions_app/selectors.py",
        "session_get_for_context",
        "max",
    ),
    (1, "policy (memory_policy_for)", "memoryhub/accounts/selectors.py", "memory_policy_for",
     "max"),
    (1, "gather (context_inputs_for_session)", "memoryhub/context/gather.py",
     "context_inputs_for_session", "max"),
    (2, "messages, memories, notes, facts' candidates: one statement (context_reads_for_session)",
     "memoryhub/context/selectors.py", "context_reads_for_session", "max"),
    (2, "facts ranking (fact_recall_for_context)", "facts_app/selectors/facts.py",
     "fact_recall_for_context", "max"),
    (2, "relevant history (_relevant_history: the recall and the neighbours)",
     "memoryhub/context/gather.py", "_relevant_history", "max"),
    (1, "assemble (assemble_context), with its final renders", "memoryhub/context/assemble.py",
     "assemble_context", "max"),
    (1, "render (render_markdown, all calls: the assembler's check and the response)",
     "memoryhub/context/render.py", "render_markdown", "max"),
    (1, "token counting (count_tokens_cached, all calls)", "memoryhub/core/tokens.py",
     "count_tokens_cached", "max"),
]  # fmt: skip


def sizes_line(config: Config) -> str:
    return (
        f"context sessions of {CONTEXT_SMALL_ROWS:,} and {config.context_rows:,} messages, "
        f"{config.context_calls} calls each"
        + ("" if "facts" in config.only else f" (facts: {config.facts:,})")
    )


def run(setup: Setup, server: Gunicorn) -> ContextResult:
    """Both sessions' context calls, interleaved; their first responses checked."""
    config = setup.config
    context = setup.context
    assert context is not None
    small, large = context.small, context.large
    section(
        f"Context: GET /api/v1/sessions/{{id}}/context/?max_tokens={CONTEXT_MAX_TOKENS}, "
        f"sessions of {small.rows:,} and {large.rows:,} messages, one client"
    )
    say(
        f"person     {context.person}: {context.facts} facts, {context.memories} memories "
        f"(+{context.tenant_memories} tenant-wide), a long-term note, "
        f"{context.daily_notes} daily notes, a summary per session; sessions_app_message holds "
        f"{context.table_rows:,} rows"
    )
    paths = [context_path(small.id), context_path(large.id)]
    before = cpu_sample(server.pid)
    (small_seconds, large_seconds), first = api_contexts(
        port=server.port, secret=setup.secret, paths=paths, count=config.context_calls, warmup=20
    )
    after = cpu_sample(server.pid)
    for payload, session in zip(first, (small, large), strict=True):
        check_context(payload, f"{session.rows:,}-message session")
    say(f"response   {small.rows:>9,}: {sections_line(first[0])}")
    say(f"response   {large.rows:>9,}: {sections_line(first[1])}")
    small_latency, large_latency = Latency.of(small_seconds), Latency.of(large_seconds)
    cpu = cpu_per_request(before, after, 2 * (config.context_calls + 21))
    say(f"{small.rows:>9,}  {small_latency.line()}")
    say(f"{large.rows:>9,}  {large_latency.line()}")
    say(f"           {cpu_line(cpu, 'context call')} (warm-up included)")
    result = ContextResult(
        small_rows=small.rows,
        large_rows=large.rows,
        small=small_latency,
        large=large_latency,
        ratio=large_latency.p95_ms / small_latency.p95_ms,
        cpu=cpu,
        tokens=int(first[1]["tokens"]),
        sections=first[1]["sections"],
    )
    say(context_verdict(result, config))
    return result


def record(result: ContextResult, setup: Setup) -> dict[str, Any]:
    assert setup.context is not None
    return {
        "context": asdict(result),
        "context_person": setup.context.person,
        "context_person_facts": setup.context.facts,
        "messages_table_rows": setup.context.table_rows,
    }


def profile(setup: Setup, client: InProcessClient) -> dict[str, Any]:
    config = setup.config
    assert setup.context is not None
    results: dict[str, Any] = {}
    for key, session in (
        ("context_small", setup.context.small),
        ("context_large", setup.context.large),
    ):
        path = context_path(session.id)

        def context_call(index: int, path: str = path) -> None:
            client("GET", path, None, 200)

        large = key == "context_large"
        section(
            f"Profile of one context call ({session.rows:,}-message session, "
            f"max_tokens={CONTEXT_MAX_TOKENS})"
        )
        measured = profile_requests(
            what="context call",
            request=context_call,
            count=config.profile_requests,
            phases=CONTEXT_PHASES,
            dump=config.profile_out if large and config.only == ("context",) else None,
        )
        print_profile(measured, top=large)
        say(
            f"database floor (the DB statement times above, summed): {measured.db_ms:.2f} ms "
            f"of {measured.wall_ms:.2f} ms per context call"
        )
        results[key] = asdict(measured)
    return results


def summary(result: ContextResult, config: Config, profiles: dict[str, Any]) -> None:
    for rows, latency in ((result.small_rows, result.small), (result.large_rows, result.large)):
        say(
            f"context API p50 {latency.p50_ms:6.2f} ms   p95 {latency.p95_ms:6.2f} ms"
            f"{'':10}{rows:,}-message session"
        )
    say(f"context {context_verdict(result, config)}")
    floor = profiles.get("context_large", {}).get("db_ms")
    if floor is not None:
        say(f"context database floor {floor:.2f} ms per call (in-process profile)")


def history_included(result: ContextResult) -> bool:
    """Whether the long session's context held the relevant-history section (issue 18 sets its
    targets with every section on)."""
    return any(s["name"] == "history" and s["included"] for s in result.sections)


def verdicts(result: ContextResult, config: Config) -> list[Verdict]:
    worst = max(result.small.p95_ms, result.large.p95_ms)
    judged = result.large_rows >= TARGET_CONTEXT_ROWS
    history = history_included(result)
    suffix = "" if history else " (history section EMPTY)"
    return [
        Verdict(
            target=f"context call p95 <= {TARGET_CONTEXT_P95_MS:.0f} ms, relevant history on",
            measured=f"p95 {worst:.2f} ms (worst of {result.small_rows:,}/"
            f"{result.large_rows:,}){suffix}",
            ok=(worst <= TARGET_CONTEXT_P95_MS and history) if judged else None,
        ),
        Verdict(
            target=f"context flat: p95({TARGET_CONTEXT_ROWS:,})/p95({result.small_rows:,}) <= "
            f"{TARGET_CONTEXT_RATIO}",
            measured=f"p95 {result.large.p95_ms:.2f} ms at {result.large_rows:,}",
            baseline=f"p95 {result.small.p95_ms:.2f} ms at {result.small_rows:,}",
            ratio=f"{result.ratio:.2f}",
            ok=(result.ratio <= TARGET_CONTEXT_RATIO and history) if judged else None,
        ),
    ]
