"""`make bench-recall`: evidence recall of MemoryHub's message search and context, through the API.

    .venv/bin/python -m bench.recall                          # SQLite in a temp dir, all modes
    .venv/bin/python -m bench.recall --database postgres      # a database created for the run
    .venv/bin/python -m bench.recall --modes lexical --limit-conversations 1

Serves MemoryHub for real (a fresh database, migrated; gunicorn; a Celery worker on its own
filesystem broker), loads LoCoMo's development conversations through the public API (one person
per conversation, one session per LoCoMo session, each turn a message), waits for the embedding
backlog to drain, then asks every question of categories 1-4 through
`GET /api/v1/messages/search/` in each mode and through `GET /sessions/{id}/context/` on an empty
session of the same person. Prints evidence recall@5/10/20 per category and mode, search
latency, the share of evidence turns present in a 4,000-token context, and the targets.

The data is read where it lies (../shared/data/locomo-dev/, CC BY-NC 4.0) and never written
anywhere. A report, not a test: the exit code is 0 unless something broke. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from bench import locomo
from bench.config import RESULTS_DIR, ROOT
from bench.harness import (
    SUMMARY_OUT_OF_REACH,
    ApiClient,
    Gunicorn,
    check_postgres_and_create_database,
    database_name,
    django_environment,
    migrate,
    setup_django,
    terminate_on_sigterm,
    with_database,
)
from bench.measure import BenchError, Latency, mark, say, section

POSTGRES_SERVER = "postgres://postgres@127.0.0.1:5432/postgres"
TENANT_SLUG = "memoryhub-bench-recall"
MODES = ("hybrid", "lexical", "semantic")
DEFAULT_MODE = "default"  # the label when the API has no `mode` parameter: whatever it ranks by
KS = (5, 10, 20)
TOP_K = max(KS)
BATCH = 100  # messages per append request (the API's MESSAGE_BATCH_MAX is at least this)
CONTEXT_TOKENS = 4000
# A turn may be shown cut short: its first characters are enough to count it present.
TURN_PREFIX_CHARS = 60
# R@10 over categories 1-4 (issue "Recall"), and the share of evidence turns in the context.
TARGETS = {"hybrid": 77.0, "lexical": 74.0}
CONTEXT_TARGET = 70.0
EMBED_POLL_SECONDS = 1.0


# --- the database ---------------------------------------------------------------------------------


@dataclass
class Database:
    url: str
    label: str  # what the report calls it
    drop: Callable[[], None] | None  # removes what was created for the run


def fresh_database(choice: str, *, keep: bool) -> Database:
    """`sqlite`: a file in a temporary folder; `postgres`: a database created on the local server
    for this run; anything else is a database URL used as it is (migrated, never dropped)."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d%H%M%S")
    if choice == "sqlite":
        folder = tempfile.mkdtemp(prefix="bench-recall-")
        path = Path(folder) / "db.sqlite3"

        def remove_folder() -> None:
            shutil.rmtree(folder, ignore_errors=True)

        return Database(f"sqlite:///{path}", f"SQLite {path}", None if keep else remove_folder)
    if choice == "postgres":
        name = f"memoryhub_bench_recall_{stamp}_{os.getpid()}"
        url = with_database(POSTGRES_SERVER, name)
        info = check_postgres_and_create_database(url)

        def drop_database() -> None:
            import psycopg
            from psycopg import sql

            with psycopg.connect(POSTGRES_SERVER, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )

        label = f"PostgreSQL {info['server_version']} database {name}"
        return Database(url, label, None if keep else drop_database)
    scheme = urlsplit(choice).scheme
    if scheme.startswith("postgres"):
        info = check_postgres_and_create_database(choice)
        return Database(
            choice, f"PostgreSQL {info['server_version']} {database_name(choice)}", None
        )
    if scheme == "sqlite":
        return Database(choice, f"SQLite {urlsplit(choice).path}", None)
    raise BenchError(f"--database {choice!r}: say sqlite, postgres, or a database URL.")


def bench_environment(database_url: str) -> dict[str, str]:
    """harness's environment (DEBUG off, tasks really enqueued), always on kombu's filesystem
    transport in a temporary folder: the run's own Celery worker drains it, and a shared Redis
    database would hand it other benches' tasks."""
    env = django_environment(database_url)
    if env.pop("REDIS_URL", None):
        env["CELERY_DATA_DIR"] = tempfile.mkdtemp(prefix="bench-celery-")
    os.environ.pop("REDIS_URL", None)  # setup_django() adds env to os.environ, never removes
    return env


def bench_tenant_key() -> str:
    """A tenant of the run and the secret of a key with every scope. Its policy turns off what
    would need an LLM (summaries, extraction) and keeps old messages: LoCoMo's are from 2022-23."""
    from memoryhub.accounts.models import ApiKeyScope, MemoryPolicy, Tenant
    from memoryhub.accounts.services import api_key_create, tenant_create

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    slug = f"{TENANT_SLUG}-{stamp}"
    tenant = Tenant.objects.filter(slug=slug).first() or tenant_create(slug=slug, name=slug)
    MemoryPolicy.objects.update_or_create(
        tenant=tenant,
        agent_id="",
        defaults={
            "summary_threshold_tokens": SUMMARY_OUT_OF_REACH,
            "extraction_enabled": False,
            "retention_days": None,
        },
    )
    _, secret = api_key_create(tenant=tenant, name="bench-recall", scopes=list(ApiKeyScope.values))
    return secret


# --- the Celery worker ----------------------------------------------------------------------------


class CeleryWorker:
    """One `celery worker` (solo pool) in its own process group, like `make run`'s: it runs what
    the API enqueues after commit (message embeddings once they exist). Stopped group-wide."""

    def __init__(self, *, env: dict[str, str]) -> None:
        self.env = env
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in stop())
            prefix="bench-recall-worker-", suffix=".log", delete=False
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "memoryhub",
            "worker",
            "--pool",
            "solo",
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
        ]
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise BenchError(
                f"the Celery worker exited with {self.process.returncode}:\n{self.tail()}"
            )

    def tail(self, lines: int = 30) -> str:
        self.log.flush()
        text = Path(self.log.name).read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        self.process = None
        self.log.close()
        with contextlib.suppress(OSError):
            os.unlink(self.log.name)


# --- loading the conversations --------------------------------------------------------------------


def person_of(conversation: locomo.Conversation) -> str:
    return f"locomo:{conversation.sample_id}"


@dataclass
class Loaded:
    """What the load left: where each turn went, both ways, and how it went."""

    turn_at: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)  # person → dia
    dia_at: dict[tuple[str, int], str] = field(default_factory=dict)  # (session id, seq) → dia
    messages: int = 0
    sessions: int = 0
    requests: int = 0
    seconds: float = 0.0
    dates: str = "unknown"  # "stored", or why not


def turn_message(
    turn: locomo.Turn, conversation: locomo.Conversation, created_at: str | None
) -> dict[str, Any]:
    role = "user" if turn.speaker == conversation.speaker_a else "assistant"
    message: dict[str, Any] = {"role": role, "content": turn.stored_text, "name": turn.speaker}
    if created_at is not None:
        message["created_at"] = created_at
    return message


def session_for(client: ApiClient, *, person: str, external_key: str) -> str:
    body = {"user_id": person, "external_key": external_key, "metadata": {"bench": "recall"}}
    data = json.dumps(body).encode()
    status, payload = client.request("POST", "/api/v1/sessions/", data)
    if status not in (200, 201):
        raise BenchError(f"POST /api/v1/sessions/ answered {status}: {payload[:300]!r}")
    return str(json.loads(payload)["id"])


def append_batch(
    client: ApiClient, session_id: str, messages: list[dict[str, Any]]
) -> tuple[int, Any]:
    status, payload = client.request(
        "POST",
        f"/api/v1/sessions/{session_id}/messages/",
        json.dumps({"messages": messages}).encode(),
    )
    return status, json.loads(payload) if payload else None


def load_conversations(client: ApiClient, conversations: list[locomo.Conversation]) -> Loaded:
    """Every turn through the public API, in order, batched. The first batch tells whether the
    API takes `created_at`: refused (400 naming it) → sent without from then on; accepted but
    not stored (an API that ignores unknown fields) → the same. Either way the report says so."""
    loaded = Loaded()
    send_dates: bool | None = None  # None: not known yet
    started = time.perf_counter()
    for conversation in conversations:
        person = person_of(conversation)
        where = loaded.turn_at.setdefault(person, {})
        for session in conversation.sessions:
            session_id = session_for(
                client,
                person=person,
                external_key=f"{person}:{session.number}",
            )
            loaded.sessions += 1
            created_at = session.started_at.isoformat().replace("+00:00", "Z")
            for start in range(0, len(session.turns), BATCH):
                turns = session.turns[start : start + BATCH]
                dated = created_at if send_dates is not False else None
                batch = [turn_message(turn, conversation, dated) for turn in turns]
                status, body = append_batch(client, session_id, batch)
                loaded.requests += 1
                if send_dates is None and status == 400 and "created_at" in json.dumps(body):
                    send_dates = False
                    loaded.dates = f"refused by the API (400: {json.dumps(body)[:200]})"
                    batch = [turn_message(turn, conversation, None) for turn in turns]
                    status, body = append_batch(client, session_id, batch)
                    loaded.requests += 1
                if status != 201:
                    raise BenchError(
                        f"appending to session {session_id} answered {status}: "
                        f"{json.dumps(body)[:300]}"
                    )
                stored = body["messages"]
                if send_dates is None:
                    stored_at = dt.datetime.fromisoformat(stored[0]["created_at"])
                    send_dates = stored_at == session.started_at
                    loaded.dates = (
                        "stored"
                        if send_dates
                        else f"ignored by the API (sent {created_at}, stored "
                        f"{stored[0]['created_at']})"
                    )
                for turn, message in zip(turns, stored, strict=True):
                    key = (str(message["session_id"]), int(message["seq"]))
                    where[turn.dia_id] = key
                    loaded.dia_at[key] = turn.dia_id
                loaded.messages += len(stored)
    loaded.seconds = time.perf_counter() - started
    return loaded


# --- the embedding backlog ------------------------------------------------------------------------


def messages_embedded(client: ApiClient, person: str) -> int | None:
    """The person's `recall.messages_embedded` from `GET /api/v1/users/{user_id}/`, or None
    when the API does not report it."""
    status, payload = client.request("GET", f"/api/v1/users/{quote(person, safe='')}/")
    if status != 200:
        raise BenchError(f"GET /api/v1/users/{person}/ answered {status}: {payload[:300]!r}")
    status_of_recall = json.loads(payload).get("recall") or {}
    value = status_of_recall.get("messages_embedded")
    return int(value) if value is not None else None


@dataclass
class Drain:
    available: bool
    total: int = 0
    embedded_when_loaded: int = 0  # already embedded when the last append returned
    embedded: int = 0
    seconds_after_load: float = 0.0  # from the end of the load until drained (or timed out)
    seconds_total: float = 0.0  # from the first append until drained (or timed out)
    timed_out: bool = False

    @property
    def rate_after_load(self) -> float | None:
        remaining = self.embedded - self.embedded_when_loaded
        return remaining / self.seconds_after_load if self.seconds_after_load > 0 else None

    @property
    def rate_overall(self) -> float | None:
        return self.embedded / self.seconds_total if self.seconds_total > 0 else None


def wait_for_embeddings(
    client: ApiClient,
    *,
    persons: list[str],
    total: int,
    load_seconds: float,
    timeout: float,
    worker: CeleryWorker,
) -> Drain:
    """Poll each person's embedded-message count until all `total` messages are embedded."""
    started = time.perf_counter()
    counts = [messages_embedded(client, person) for person in persons]
    if any(count is None for count in counts):
        return Drain(available=False, total=total)
    drain = Drain(available=True, total=total, embedded_when_loaded=sum(c or 0 for c in counts))
    embedded = drain.embedded_when_loaded
    last_report = started
    while embedded < total:
        now = time.perf_counter()
        if now - started > timeout:
            drain.timed_out = True
            break
        worker.check_alive()
        if now - last_report >= 10:
            say(f"           {embedded:,} of {total:,} embedded after {now - started:.0f} s")
            last_report = now
        time.sleep(EMBED_POLL_SECONDS)
        embedded = sum(messages_embedded(client, person) or 0 for person in persons)
    drain.embedded = embedded
    drain.seconds_after_load = time.perf_counter() - started
    drain.seconds_total = load_seconds + drain.seconds_after_load
    return drain


# --- search ---------------------------------------------------------------------------------------


def search_path(question: str, person: str, mode: str) -> str:
    params = {"q": question, "user_id": person, "top_k": TOP_K}
    if mode != DEFAULT_MODE:
        params["mode"] = mode
    return f"/api/v1/messages/search/?{urlencode(params)}"


def mode_parameter_supported(client: ApiClient, person: str) -> bool:
    """Does the search read `mode`? DRF ignores query parameters it does not know, so a refusal
    of a mode that cannot exist (400 naming `mode`) is the tell; a 200 means it was ignored."""
    status, payload = client.request("GET", search_path("hello", person, "no-such-mode"))
    if status == 400 and b"mode" in payload:
        return True
    if status == 200:
        return False
    raise BenchError(f"the search probe answered {status}: {payload[:300]!r}")


@dataclass
class ModeRun:
    recalls: dict[int, dict[int, list[float]]]  # category → k → one recall per question
    latencies: list[float]  # seconds per search
    empty_queries: int = 0  # answered 400: no searchable word (counted as found nothing)
    no_hits: int = 0  # answered with no hit at all


def search_hits(client: ApiClient, question: str, person: str, mode: str) -> list[Any] | None:
    """The hits' messages, best first; None when the API found no searchable word in it."""
    status, payload = client.request("GET", search_path(question, person, mode))
    if status == 400 and b'"q"' in payload:
        return None
    if status != 200:
        raise BenchError(f"search ({mode}) answered {status}: {payload[:300]!r}")
    return [hit["message"] for hit in json.loads(payload)["results"]]


def run_mode(
    client: ApiClient,
    conversations: list[locomo.Conversation],
    loaded: Loaded,
    mode: str,
) -> ModeRun:
    run = ModeRun(recalls=defaultdict(lambda: defaultdict(list)), latencies=[])
    for conversation in conversations:
        person = person_of(conversation)
        for question in conversation.questions:
            started = time.perf_counter()
            messages = search_hits(client, question.text, person, mode)
            run.latencies.append(time.perf_counter() - started)
            if messages is None:
                run.empty_queries += 1
                messages = []
            if not messages:
                run.no_hits += 1
            # A hit that is no LoCoMo turn keeps its rank: it still takes a place in the top k.
            ranked = [
                loaded.dia_at.get((str(message["session_id"]), int(message["seq"])))
                for message in messages
            ]
            gold = set(question.evidence)
            for k in KS:
                found = len(gold & {dia for dia in ranked[:k] if dia is not None})
                run.recalls[question.category][k].append(found / len(gold))
    return run


def mean_pct(values: list[float]) -> float | None:
    return 100 * sum(values) / len(values) if values else None


def recall_table(run: ModeRun) -> dict[str, dict[str, Any]]:
    """Rows: each category and "all" (1-4); per row R@k in percent and n questions."""
    table: dict[str, dict[str, Any]] = {}
    overall: dict[int, list[float]] = defaultdict(list)
    for category, name in locomo.CATEGORIES.items():
        row = run.recalls.get(category, {})
        table[f"{category} {name}"] = {
            **{f"R@{k}": mean_pct(row.get(k, [])) for k in KS},
            "n": len(row.get(KS[0], [])),
        }
        for k in KS:
            overall[k].extend(row.get(k, []))
    table["all 1-4"] = {**{f"R@{k}": mean_pct(overall[k]) for k in KS}, "n": len(overall[KS[0]])}
    return table


# --- evidence in context --------------------------------------------------------------------------


def squeezed(text: str) -> str:
    return " ".join(text.split())


def turn_present(turn: locomo.Turn, content: str) -> bool:
    """The turn is in the (whitespace-normalised) context: whole, or its first characters when
    it is shown cut short."""
    text = squeezed(turn.text)
    return text in content or text[:TURN_PREFIX_CHARS] in content


@dataclass
class ContextRun:
    present: dict[int, list[float]]  # category → per question: share of its evidence present
    turns_present: dict[int, list[int]]  # category → [present, evidence turns]
    latencies: list[float]
    tokens: list[int]
    section_tokens: dict[str, list[int]]  # section name → its tokens, per call


def run_context(
    client: ApiClient, conversations: list[locomo.Conversation], *, max_tokens: int
) -> ContextRun:
    run = ContextRun(
        present=defaultdict(list),
        turns_present=defaultdict(lambda: [0, 0]),
        latencies=[],
        tokens=[],
        section_tokens=defaultdict(list),
    )
    for conversation in conversations:
        person = person_of(conversation)
        probe = session_for(client, person=person, external_key=f"{person}:probe")
        turns = conversation.turns()
        for question in conversation.questions:
            query = urlencode({"query": question.text, "max_tokens": max_tokens})
            started = time.perf_counter()
            status, payload = client.request(
                "GET", f"/api/v1/sessions/{probe}/context/?{query}&format=markdown"
            )
            run.latencies.append(time.perf_counter() - started)
            if status != 200:
                raise BenchError(f"context answered {status}: {payload[:300]!r}")
            body = json.loads(payload)
            content = squeezed(body.get("content") or "")
            run.tokens.append(int(body.get("tokens", 0)))
            for item in body.get("sections", []):
                run.section_tokens[item["name"]].append(int(item["tokens"]))
            present = sum(turn_present(turns[dia], content) for dia in question.evidence)
            run.present[question.category].append(present / len(question.evidence))
            counted = run.turns_present[question.category]
            counted[0] += present
            counted[1] += len(question.evidence)
    return run


def context_table(run: ContextRun) -> dict[str, dict[str, Any]]:
    """Per category and overall: the share of evidence turns present (pooled over turns) and
    the mean per question."""
    table: dict[str, dict[str, Any]] = {}
    pooled = [0, 0]
    per_question: list[float] = []
    for category, name in locomo.CATEGORIES.items():
        present, total = run.turns_present.get(category, [0, 0])
        shares = run.present.get(category, [])
        table[f"{category} {name}"] = {
            "turns_pct": 100 * present / total if total else None,
            "question_mean_pct": mean_pct(shares),
            "turns": total,
            "n": len(shares),
        }
        pooled[0] += present
        pooled[1] += total
        per_question.extend(shares)
    table["all 1-4"] = {
        "turns_pct": 100 * pooled[0] / pooled[1] if pooled[1] else None,
        "question_mean_pct": mean_pct(per_question),
        "turns": pooled[1],
        "n": len(per_question),
    }
    return table


# --- the report -----------------------------------------------------------------------------------


def pct(value: float | None, width: int = 8) -> str:
    return f"{'n/a':>{width}}" if value is None else f"{value:>{width}.1f}"


def say_recall_table(mode: str, table: dict[str, dict[str, Any]]) -> None:
    say(f"mode {mode}")
    say(f"  {'category':<16}" + "".join(f"{'R@' + str(k):>8}" for k in KS) + f"{'n':>6}")
    for name, row in table.items():
        cells = "".join(pct(row[f"R@{k}"]) for k in KS)
        say(f"  {name:<16}{cells}{row['n']:>6}")


def say_context_table(table: dict[str, dict[str, Any]], max_tokens: int) -> None:
    say(f"evidence turns present in the context at {max_tokens:,} tokens (markdown)")
    say(f"  {'category':<16}{'turns %':>9}{'per q %':>9}{'turns':>7}{'n':>6}")
    for name, row in table.items():
        say(
            f"  {name:<16}{pct(row['turns_pct'], 9)}{pct(row['question_mean_pct'], 9)}"
            f"{row['turns']:>7}{row['n']:>6}"
        )


def verdicts(
    tables: dict[str, dict[str, dict[str, Any]]], context: dict[str, dict[str, Any]] | None
) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for mode, target in TARGETS.items():
        row = tables.get(mode, {}).get("all 1-4")
        value = row["R@10"] if row else None
        lines.append(
            {
                "target": f"{mode} R@10 >= {target:g} (categories 1-4)",
                "value": value,
                "verdict": "not run" if value is None else mark(value >= target),
            }
        )
    value = context["all 1-4"]["turns_pct"] if context else None
    lines.append(
        {
            "target": f"evidence in context >= {CONTEXT_TARGET:g} % at {CONTEXT_TOKENS:,} tokens",
            "value": value,
            "verdict": "not run" if value is None else mark(value >= CONTEXT_TARGET),
        }
    )
    return lines


# --- the run --------------------------------------------------------------------------------------


@dataclass
class Options:
    data: Path
    database: str
    modes: list[str]
    limit_conversations: int | None
    captions: bool
    context: bool
    context_tokens: int
    workers: int
    embed_timeout: float
    settle_seconds: float
    keep_database: bool
    save: bool


def parse_args(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.recall",
        description="Evidence recall of MemoryHub's message search and context on LoCoMo, "
        "through the API.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA, help="LoCoMo JSON")
    parser.add_argument(
        "--database",
        default="sqlite",
        help="sqlite (a file in a temporary folder), postgres (a database created on "
        "127.0.0.1:5432 as user postgres, dropped at the end), or a database URL (used as is)",
    )
    parser.add_argument(
        "--modes", default=",".join(MODES), help="search modes to measure, comma-separated"
    )
    parser.add_argument("--limit-conversations", type=int, help="only the first N conversations")
    parser.add_argument(
        "--captions",
        action=argparse.BooleanOptionalAction,
        default=True,
        help='store a shared photo as "[shares a photo of <caption>]" after the turn\'s text, as '
        "the retrieval study did",
    )
    parser.add_argument(
        "--context",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="measure evidence in the context too",
    )
    parser.add_argument("--context-tokens", type=int, default=CONTEXT_TOKENS)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument(
        "--embed-timeout",
        type=float,
        default=900,
        help="seconds to wait for the embedding backlog to drain",
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=0,
        help="while the API reports no embedding status: seconds to wait after the load "
        "before searching, for the worker to embed",
    )
    parser.add_argument(
        "--keep-database", action="store_true", help="keep the run's database (to look at it)"
    )
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results/")
    args = parser.parse_args(argv)
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    unknown = sorted(set(modes) - set(MODES))
    if unknown or not modes:
        parser.error(f"--modes: choose from {', '.join(MODES)} (got {args.modes!r})")
    return Options(
        data=args.data,
        database=args.database,
        modes=modes,
        limit_conversations=args.limit_conversations,
        captions=args.captions,
        context=args.context,
        context_tokens=args.context_tokens,
        workers=args.workers,
        embed_timeout=args.embed_timeout,
        settle_seconds=args.settle_seconds,
        keep_database=args.keep_database,
        save=not args.no_save,
    )


@contextlib.contextmanager
def served(env: dict[str, str], *, workers: int) -> Iterator[tuple[Gunicorn, CeleryWorker]]:
    server = Gunicorn(env=env, workers=workers, worker_class="sync", threads=1)
    worker = CeleryWorker(env=env)
    try:
        worker.start()
        server.start()
        say(f"gunicorn   up on 127.0.0.1:{server.port} ({workers} sync workers)")
        say(f"worker     celery (solo pool), pid {worker.process.pid if worker.process else '?'}")
        yield server, worker
    except BenchError:
        say(f"\ngunicorn log (tail):\n{server.tail()}")
        say(f"\nworker log (tail):\n{worker.tail()}")
        raise
    finally:
        server.stop()
        worker.stop()


def measure(options: Options, conversations: list[locomo.Conversation]) -> dict[str, Any]:
    results: dict[str, Any] = {"options": {**vars(options), "data": str(options.data)}}
    notes: list[str] = []
    database = fresh_database(options.database, keep=options.keep_database)
    env = bench_environment(database.url)
    say(f"database   {database.label}")
    say(f"broker     kombu filesystem in {env['CELERY_DATA_DIR']}")
    try:
        migrate(env)
        setup_django(env)
        secret = bench_tenant_key()
        from django.db import connections

        connections.close_all()  # SQLite: no open handle while gunicorn writes
        with served(env, workers=options.workers) as (server, worker):
            client = ApiClient(server.port, secret)
            try:
                results.update(run_api(client, worker, options, conversations, notes))
            finally:
                client.close()
    finally:
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        shutil.rmtree(env["CELERY_DATA_DIR"], ignore_errors=True)
        if database.drop is not None:
            database.drop()
        elif options.keep_database:
            say(f"kept       {database.url}")
    results["database"] = database.label
    results["notes"] = notes
    return results


def run_api(
    client: ApiClient,
    worker: CeleryWorker,
    options: Options,
    conversations: list[locomo.Conversation],
    notes: list[str],
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    turns = sum(len(s.turns) for c in conversations for s in c.sessions)
    questions = sum(len(c.questions) for c in conversations)
    skipped = sum(c.skipped_questions for c in conversations)

    section("Load: LoCoMo through the public API")
    loaded = load_conversations(client, conversations)
    say(
        f"loaded     {loaded.messages:,} messages into {loaded.sessions} sessions of "
        f"{len(conversations)} people in {loaded.seconds:.1f} s ({loaded.requests} requests, "
        f"{loaded.messages / loaded.seconds:,.0f} messages/s)"
    )
    say(f"dates      {loaded.dates}")
    if loaded.dates != "stored":
        notes.append(f"session dates are missing: created_at {loaded.dates}")
        say("NOTE: the messages carry no LoCoMo dates (stored at now): date-aware ranking and")
        say("      the temporal questions are measured without them.")
    if loaded.messages != turns:
        raise BenchError(f"stored {loaded.messages} messages for {turns} turns")
    results["load"] = {
        "conversations": [c.sample_id for c in conversations],
        "turns": turns,
        "sessions": loaded.sessions,
        "requests": loaded.requests,
        "seconds": loaded.seconds,
        "dates": loaded.dates,
        "captions": options.captions,
    }

    section("Embeddings: waiting for the backlog to drain")
    persons = [person_of(c) for c in conversations]
    drain = wait_for_embeddings(
        client,
        persons=persons,
        total=loaded.messages,
        load_seconds=loaded.seconds,
        timeout=options.embed_timeout,
        worker=worker,
    )
    if not drain.available:
        say("embedding status endpoint not available (no recall.messages_embedded on")
        say("GET /api/v1/users/{user_id}/): not waiting")
        notes.append("embedding status endpoint not available")
        if options.settle_seconds > 0:
            say(f"waiting    {options.settle_seconds:.0f} s (--settle-seconds) instead")
            time.sleep(options.settle_seconds)
            worker.check_alive()
    else:
        rate = drain.rate_after_load
        overall = drain.rate_overall
        say(
            f"embedded   {drain.embedded:,} of {drain.total:,} ({drain.embedded_when_loaded:,} "
            f"when the load finished); drained {drain.seconds_after_load:.1f} s after it"
        )
        say(
            f"rate       {'n/a' if rate is None else f'{rate:,.1f}'} messages/s after the load, "
            f"{'n/a' if overall is None else f'{overall:,.1f}'} messages/s from the first append"
        )
        if drain.timed_out:
            say(f"NOTE: not drained within {options.embed_timeout:.0f} s; searching anyway")
            notes.append("embedding backlog not drained before searching")
    results["embeddings"] = {
        "available": drain.available,
        "total": drain.total,
        "embedded": drain.embedded,
        "embedded_when_loaded": drain.embedded_when_loaded,
        "seconds_after_load": drain.seconds_after_load,
        "rate_after_load": drain.rate_after_load,
        "rate_overall": drain.rate_overall,
        "timed_out": drain.timed_out,
    }

    section(f"Search: {questions} questions (categories 1-4), top_k={TOP_K}")
    if skipped:
        say(f"skipped    {skipped} questions whose evidence names no turn")
    modes = list(options.modes)
    if not mode_parameter_supported(client, persons[0]):
        say("NOTE: the search ignores `mode` (no such parameter yet): measuring its default only")
        notes.append("search has no mode parameter: only the default ranking measured")
        modes = [DEFAULT_MODE]
    tables: dict[str, dict[str, dict[str, Any]]] = {}
    latencies: dict[str, Latency] = {}
    no_hits: dict[str, int] = {}
    first = conversations[0].questions[0].text
    for mode in modes:
        status, payload = client.request("GET", search_path(first, persons[0], mode))
        if status != 200:
            say(f"NOTE: mode {mode} answered {status} ({payload[:200]!r}): skipped")
            notes.append(f"mode {mode} refused: {status}")
            continue
        started = time.perf_counter()
        run = run_mode(client, conversations, loaded, mode)
        tables[mode] = recall_table(run)
        latencies[mode] = Latency.of(run.latencies)
        no_hits[mode] = run.no_hits
        say_recall_table(mode, tables[mode])
        say(f"  search   {latencies[mode].line()}")
        if run.empty_queries:
            say(f"  {run.empty_queries} questions had no searchable word (400): found nothing")
        if run.no_hits > len(run.latencies) // 10:
            say(f"NOTE: {run.no_hits} of {len(run.latencies)} searches found nothing (no vectors?)")
            notes.append(f"mode {mode}: {run.no_hits} of {len(run.latencies)} searches empty")
        say(f"  ({time.perf_counter() - started:.0f} s)")
    results["search"] = {
        mode: {
            "recall": tables[mode],
            "latency_ms": vars(latencies[mode]),
            "searches_without_hits": no_hits[mode],
        }
        for mode in tables
    }

    context: dict[str, dict[str, Any]] | None = None
    if options.context:
        section("Evidence in context: GET /sessions/{probe}/context/?query=<question>")
        run_ctx = run_context(client, conversations, max_tokens=options.context_tokens)
        context = context_table(run_ctx)
        say_context_table(context, options.context_tokens)
        context_latency = Latency.of(run_ctx.latencies)
        say(f"  context  {context_latency.line()}")
        mean_tokens = sum(run_ctx.tokens) / len(run_ctx.tokens) if run_ctx.tokens else 0
        sections = ", ".join(
            f"{name} {sum(values) / len(values):.0f}"
            for name, values in run_ctx.section_tokens.items()
        )
        say(f"  tokens   {mean_tokens:.0f} per context on average; by section: {sections or '-'}")
        results["context"] = {
            "max_tokens": options.context_tokens,
            "present": context,
            "latency_ms": vars(context_latency),
            "mean_tokens": mean_tokens,
            "section_mean_tokens": {
                name: sum(values) / len(values) for name, values in run_ctx.section_tokens.items()
            },
        }

    section("Summary")
    for mode, table in tables.items():
        row = table["all 1-4"]
        say(
            f"{mode:<9} R@5 {pct(row['R@5'], 5)}  R@10 {pct(row['R@10'], 5)}  "
            f"R@20 {pct(row['R@20'], 5)}  (n {row['n']})   search p50 "
            f"{latencies[mode].p50_ms:.1f} ms, p95 {latencies[mode].p95_ms:.1f} ms"
        )
    # Without `mode` the search's one ranking is today's lexical one: judged by that target.
    judged = {"lexical": tables[DEFAULT_MODE]} if DEFAULT_MODE in tables else tables
    results["verdicts"] = verdicts(judged, context)
    for line in results["verdicts"]:
        value = "" if line["value"] is None else f"{line['value']:.1f}"
        say(f"target     {line['target']:<52} {value:>6}  {line['verdict']}")
    if DEFAULT_MODE in tables:
        say("           (the default ranking judged against the lexical target)")
    for note in notes:
        say(f"NOTE       {note}")
    return results


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    started = time.perf_counter()
    try:
        with terminate_on_sigterm():
            try:
                conversations = locomo.load(options.data, captions=options.captions)
            except FileNotFoundError as error:
                raise BenchError(str(error)) from None
            conversations = conversations[: options.limit_conversations]
            if not conversations:
                raise BenchError("no conversations to load")
            section(
                f"Recall on LoCoMo ({len(conversations)} conversations: "
                f"{', '.join(c.sample_id for c in conversations)})"
            )
            results = measure(options, conversations)
    except BenchError as error:
        print(f"\nbench-recall: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nbench-recall: interrupted", file=sys.stderr)
        return 130
    elapsed = time.perf_counter() - started
    results["elapsed_seconds"] = elapsed
    if options.save:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
        kind = "postgres" if "PostgreSQL" in results["database"] else "sqlite"
        target = RESULTS_DIR / f"{stamp}-recall-{kind}.json"
        target.write_text(json.dumps(results, indent=2, default=str) + "\n")
        say(f"results    {target.relative_to(ROOT)}")
    say(f"done in {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
