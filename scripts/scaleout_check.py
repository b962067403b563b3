"""The scale-out check (`make scaleout-test`, through scripts/scaleout_test.sh): the image's roles
as separate containers on this machine's PostgreSQL and Redis (--network=host), and what must
hold when there are several of each.

1. `migrate` (with the first tenant and its key), then web A and web B on two ports, a worker and
   a beat; a second `migrate` makes no second tenant.
2. Through A: a session, messages and a fact; through B, at once: the same messages, the same
   search results in every mode (messages and facts: hybrid, lexical, semantic; again once the
   worker has embedded them) and the same context. Deleted through B: gone through A.
3. A summary asked through A; the worker is SIGKILLed inside the (slow, fake) LLM call and a new
   worker started: exactly one summary.
4. Web A stopped: B keeps serving. Containers run as a non-root user; the healthcheck reports
   healthy. A second beat started by mistake: retention still runs once per tick.
5. compose.yaml is valid (docker-compose's schema check where installed, else a structural one).

Standard library only (PyYAML for the fallback compose check). Settings from the environment:
SCALEOUT_IMAGE, SCALEOUT_REDIS_DB (its cache uses the next one), SCALEOUT_PG_DB, SCALEOUT_PORT_A,
SCALEOUT_PORT_B, SCALEOUT_LLM_PORT, PGHOST/PGPORT, CONTAINER.
"""

from __future__ import annotations

import http.server
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
CONTAINER = os.environ.get("CONTAINER", "podman")
IMAGE = os.environ.get("SCALEOUT_IMAGE", "localhost/memoryhub:latest")
REDIS_DB = int(os.environ.get("SCALEOUT_REDIS_DB", "9"))
PG_HOST = os.environ.get("PGHOST", "127.0.0.1")
PG_PORT = os.environ.get("PGPORT", "5432")
PG_DB = os.environ.get("SCALEOUT_PG_DB", "memoryhub_scaleout")
PG_ROLE = "memoryhub"
PORT_A = int(os.environ.get("SCALEOUT_PORT_A", "18081"))
PORT_B = int(os.environ.get("SCALEOUT_PORT_B", "18082"))
LLM_PORT = int(os.environ.get("SCALEOUT_LLM_PORT", "18089"))
PREFIX = "mh-scaleout-"
LLM_DELAY_SECONDS = 5.0  # the summary call: long enough to kill the worker inside it
CLEANUP_INTERVAL_SECONDS = 10
SUMMARY_TEXT = "The user grows tomatoes and plans a trip to Lisbon in May."
WAIT_SECONDS = 120.0

T = TypeVar("T")
results: list[tuple[str, bool, str]] = []


def log(message: str) -> None:
    print(f"[scaleout {time.strftime('%H:%M:%S')}] {message}", flush=True)


def check(name: str, ok: bool, detail: str = "") -> None:
    results.append((name, ok, detail))
    log(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")


def run(
    *args: str, check_rc: bool = True, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(  # noqa: S603 (the commands are this script's own)
        list(args), capture_output=True, text=True, timeout=timeout, check=False
    )
    if check_rc and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} -> {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = WAIT_SECONDS) -> T:
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found is not None and found is not False:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.5)


# --- a fake OpenAI-compatible LLM on the host ---------------------------------------------------


class FakeLLM(http.server.BaseHTTPRequestHandler):
    summary_calls_started = 0
    summary_calls_answered = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        system = " ".join(
            str(m.get("content") or "") for m in body.get("messages", []) if m["role"] == "system"
        )
        if "running summary" in system:
            with FakeLLM.lock:
                FakeLLM.summary_calls_started += 1
            time.sleep(LLM_DELAY_SECONDS)
            text = SUMMARY_TEXT
        else:
            text = "NONE"  # fact extraction: nothing to remember
        payload = json.dumps(
            {
                "id": "chatcmpl-scaleout",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "fake"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
            }
        ).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            if text == SUMMARY_TEXT:
                with FakeLLM.lock:
                    FakeLLM.summary_calls_answered += 1
        except OSError:
            pass  # the worker that asked was killed meanwhile

    def log_message(self, format: str, *args: Any) -> None:
        pass


# --- containers ---------------------------------------------------------------------------------


def app_env(**extra: str) -> list[str]:
    env = {
        "DATABASE_URL": f"postgres://{PG_ROLE}@{PG_HOST}:{PG_PORT}/{PG_DB}",
        "REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
        "DJANGO_SECRET_KEY": "scaleout-check-only-not-a-secret-but-long-enough-for-django-0123",
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DJANGO_SECURE_SSL_REDIRECT": "false",
        "DJANGO_SECURE_COOKIES": "false",
        "DJANGO_SETTINGS_MODULE": "scaleout_settings",
        "PYTHONPATH": "/scaleout",
        # One process per web container: which process answers is then no matter of chance (each
        # process's first search after new vectors is one late, by design; see below).
        "GUNICORN_WORKERS": "1",
        "GUNICORN_THREADS": "4",
        "CELERY_WORKER_CONCURRENCY": "1",
        "LLM_BASE_URL": f"http://127.0.0.1:{LLM_PORT}/v1",
        "LLM_MODEL": "fake-model",
        "LLM_TIMEOUT_SECONDS": "60",
        "MEMORYHUB_SUMMARY_KEEP_RECENT": "2",
        "MEMORYHUB_CLEANUP_INTERVAL_SECONDS": str(CLEANUP_INTERVAL_SECONDS),
        "LOG_FORMAT": "text",
        # The worker embeds a session's appends this long after them: the "at once" reads come
        # first, before any vector exists.
        "EMBEDDINGS_DELAY_SECONDS": "6",
        **extra,
    }
    return [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]


def container_args(name: str) -> list[str]:
    settings = ROOT / "scripts" / "scaleout_settings.py"
    return [
        "--name",
        PREFIX + name,
        "--network=host",
        "-v",
        f"{settings}:/scaleout/scaleout_settings.py:ro",
    ]


def start(name: str, role: str, **env: str) -> None:
    run(CONTAINER, "run", "-d", *container_args(name), *app_env(**env), IMAGE, role)


def one_shot(name: str, *command: str, **env: str) -> str:
    done = run(CONTAINER, "run", "--rm", *container_args(name), *app_env(**env), IMAGE, *command)
    return done.stdout + done.stderr


def remove_all() -> None:
    names = run(CONTAINER, "ps", "-a", "--format", "{{.Names}}", check_rc=False).stdout.split()
    mine = [name for name in names if name.startswith(PREFIX)]
    if mine:
        run(CONTAINER, "rm", "-f", "-t", "2", *mine, check_rc=False)


def logs(name: str) -> str:
    done = run(CONTAINER, "logs", "-t", PREFIX + name, check_rc=False)
    return done.stdout + done.stderr


# --- the API ------------------------------------------------------------------------------------


class Api:
    def __init__(self, port: int, key: str) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.key = key

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 (http to 127.0.0.1 only)
            self.base + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                return error.code, json.loads(raw)
            except ValueError:
                return error.code, raw.decode(errors="replace")

    def get(self, path: str) -> Any:
        status, body = self.call("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {self.base}{path} -> {status} {body}")
        return body

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.base + "/readyz", timeout=5) as response:  # noqa: S310
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False


def hits(body: dict[str, Any]) -> list[tuple[Any, ...]]:
    """A search answer's ranking, as comparable tuples (the mode that ran, ids, scores)."""
    ranked = [
        (hit.get("id") or hit.get("message", {}).get("id"), round(float(hit.get("score", 0)), 6))
        for hit in body.get("results", [])
    ]
    return [(body.get("mode"),), *ranked]


def psql(sql: str) -> str:
    done = run("psql", "-h", PG_HOST, "-p", PG_PORT, "-U", "postgres", "-tAc", sql, "-d", PG_DB)
    return done.stdout.strip()


# --- the steps ----------------------------------------------------------------------------------


def prepare_services() -> None:
    log(f"database {PG_DB} (owner {PG_ROLE}), Redis db {REDIS_DB} and {REDIS_DB + 1}")
    admin = ["-h", PG_HOST, "-p", PG_PORT, "-U", "postgres"]
    run("dropdb", *admin, "--if-exists", "--force", PG_DB)
    run("createdb", *admin, "-O", PG_ROLE, PG_DB)
    # pgvector where the machine has it: the worker then writes vectors there (README).
    if psql("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'") == "1":
        psql("CREATE EXTENSION IF NOT EXISTS vector")
    for db in (REDIS_DB, REDIS_DB + 1):
        run("redis-cli", "-n", str(db), "FLUSHDB")


def migrate_and_bootstrap() -> str:
    started = time.monotonic()
    output = one_shot("migrate", "migrate", MEMORYHUB_BOOTSTRAP="true")
    match = re.search(r"API key:\s+(\S+)", output)
    check("migrate + first tenant prints an API key", match is not None, output[-300:])
    assert match is not None
    log(f"migrate took {time.monotonic() - started:.1f} s")
    again = one_shot("migrate-again", "migrate", MEMORYHUB_BOOTSTRAP="true")
    check(
        "a second migrate makes no second tenant or key",
        "API key:" not in again and psql("SELECT count(*) FROM accounts_tenant") == "1",
    )
    return match.group(1)


def consistency(a: Api, b: Api) -> None:
    status, session = a.call(
        "POST", "/api/v1/sessions/", {"user_id": "ada", "agent_id": "chat", "external_key": "k1"}
    )
    sid = session["id"]
    turns = [
        ("user", "I grow tomatoes and aubergines on my balcony in Porto."),
        ("assistant", "Lovely! How are the tomatoes doing this summer?"),
        ("user", "They are ripening. In May I am taking the train to Lisbon for a conference."),
        ("assistant", "Have a good trip to Lisbon; I will remember the conference."),
        ("user", "My sister Ines will look after the garden while I am away."),
        ("assistant", "Noted: Ines waters the tomatoes in May."),
    ]
    status, _ = a.call(
        "POST",
        f"/api/v1/sessions/{sid}/messages/",
        {"messages": [{"role": role, "content": text} for role, text in turns]},
    )
    check("append through A", status in (200, 201), str(status))
    status, fact = a.call(
        "POST", "/api/v1/facts/", {"user_id": "ada", "content": "Ada grows tomatoes in Porto."}
    )
    check("a fact through A", status in (200, 201), str(status))

    read_b = b.get(f"/api/v1/sessions/{sid}/messages/?last=50")["results"]
    check(
        "B reads what A wrote, at once",
        [m["content"] for m in read_b] == [text for _, text in turns],
        f"{len(read_b)} messages",
    )

    def searches(api: Api) -> dict[str, Any]:
        answers: dict[str, Any] = {}
        for mode in ("hybrid", "lexical", "semantic"):
            answers[f"messages/{mode}"] = hits(
                api.get(f"/api/v1/messages/search/?q=tomatoes+Lisbon&user_id=ada&mode={mode}")
            )
            answers[f"facts/{mode}"] = hits(
                api.get(f"/api/v1/facts/search/?q=tomatoes&user_id=ada&mode={mode}")
            )
        context = api.get(f"/api/v1/sessions/{sid}/context/?query=tomatoes")
        answers["context"] = json.dumps(context, sort_keys=True)
        return answers

    # At once (B's first search builds its index from the database), then again once the worker
    # has embedded everything (the semantic and hybrid modes then use the vectors).
    now_b, now_a = searches(b), searches(a)
    found = [key for key, ranked in now_b.items() if key != "context" and len(ranked) > 1]
    check("B finds A's words at once", "messages/lexical" in found, f"non-empty: {found}")
    # What rests on words is the same at once. What rests on vectors waits for the worker, which
    # may embed between the two asks (it runs after EMBEDDINGS_DELAY_SECONDS): compared below.
    words = [key for key in now_a if "lexical" in key or key == "context"]
    check(
        "lexical search (messages, facts) and context: A and B the same, at once",
        all(now_a[key] == now_b[key] for key in words),
        _diff({key: now_a[key] for key in words}, {key: now_b[key] for key in words}),
    )

    def embedded() -> bool:
        jobs = a.get(f"/api/v1/sessions/{sid}/jobs/")
        states = {job["kind"]: job["state"] for job in jobs.get("results", jobs.get("jobs", []))}
        return states.get("embedding") == "done"

    wait_for("the worker to embed the messages", embedded)
    # New vectors (unlike new or deleted messages) do not hold a search up: a process's first
    # search after them uses its index once more, without them, and rebuilds it after the
    # response (README: Search and recall). So each process is asked until its hybrid search
    # uses them; the number of asks is reported.
    hybrid = "/api/v1/messages/search/?q=tomatoes+Lisbon&user_id=ada&mode=hybrid"
    asks = {"A": 0, "B": 0}

    def uses_vectors(api: Api, name: str) -> bool:
        asks[name] += 1
        return bool(api.get(hybrid)["mode"] == "hybrid")

    wait_for("A's hybrid search to use the vectors", lambda: uses_vectors(a, "A"))
    wait_for("B's hybrid search to use the vectors", lambda: uses_vectors(b, "B"))
    wait_for(
        "the fact's vector",
        lambda: a.get("/api/v1/facts/search/?q=tomatoes&user_id=ada&mode=semantic")["results"],
    )
    searches(a), searches(b)  # the facts' indexes too: one search each after their vectors
    later_a, later_b = searches(a), searches(b)
    modes = {key: ranked[0][0] for key, ranked in later_a.items() if key != "context"}
    check(
        "after embedding: every mode runs as asked, A and B the same",
        later_a == later_b
        and all(key.endswith(str(mode)) for key, mode in modes.items())
        and len(later_a["messages/semantic"]) > 1,
        f"modes that ran: {modes}; hybrid searches until the vectors were used: {asks}; "
        f"semantic hits {len(later_a['messages/semantic']) - 1} {_diff(later_a, later_b)}",
    )

    status, _ = b.call("DELETE", f"/api/v1/sessions/{sid}/")
    check("delete the session through B", status in (200, 204), str(status))
    status_a, _ = a.call("GET", f"/api/v1/sessions/{sid}/messages/?last=50")
    gone = {
        mode: a.get(f"/api/v1/messages/search/?q=tomatoes+Lisbon&user_id=ada&mode={mode}")[
            "results"
        ]
        for mode in ("hybrid", "lexical", "semantic")
    }
    check(
        "deleted through B: A returns nothing of it (messages, every search mode)",
        status_a == 404 and not any(gone.values()),
        f"messages {status_a}, hits {[len(v) for v in gone.values()]}",
    )
    status, _ = b.call("DELETE", f"/api/v1/facts/{fact['id']}/")
    facts_a = a.get("/api/v1/facts/search/?q=tomatoes&user_id=ada&mode=lexical")["results"]
    check("fact deleted through B: A's search misses it", status == 204 and not facts_a)


def _diff(left: dict[str, Any], right: dict[str, Any]) -> str:
    differing = [key for key in left if left.get(key) != right.get(key)]
    return "".join(
        f"\n    {key}: A {str(left.get(key))[:300]}\n    {key}: B {str(right.get(key))[:300]}"
        for key in differing
    )


def summary_survives_a_killed_worker(a: Api, b: Api) -> None:
    status, session = a.call("POST", "/api/v1/sessions/", {"user_id": "bo", "agent_id": "chat"})
    sid = session["id"]
    a.call(
        "POST",
        f"/api/v1/sessions/{sid}/messages/",
        {
            "messages": [
                {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} tomatoes"}
                for i in range(8)
            ]
        },
    )
    before = FakeLLM.summary_calls_started
    status, _ = a.call("POST", f"/api/v1/sessions/{sid}/summarize/", {})
    check("summary asked through A", status == 202, str(status))
    wait_for("the worker's LLM call", lambda: FakeLLM.summary_calls_started > before, 60)
    run(CONTAINER, "kill", "-s", "KILL", PREFIX + "worker")
    log("worker SIGKILLed inside the LLM call; starting another")
    start("worker-2", "worker")
    started = time.monotonic()
    wait_for("the summary", lambda: b.call("GET", f"/api/v1/sessions/{sid}/summary/")[0] == 200)
    took = time.monotonic() - started
    time.sleep(LLM_DELAY_SECONDS + 3)  # room for a duplicate to appear, if one were coming
    count = psql(
        f"SELECT count(*) FROM sessions_app_summary WHERE session_id = '{sid}'"  # noqa: S608
    )
    text = b.get(f"/api/v1/sessions/{sid}/summary/").get("text")
    check(
        "killed mid-task, redone by the new worker: exactly one summary",
        count == "1" and text == SUMMARY_TEXT,
        f"{count} summary row(s); LLM summary calls {FakeLLM.summary_calls_started} "
        f"(answered {FakeLLM.summary_calls_answered}); redone {took:.0f} s after the kill",
    )


def survivors(b: Api) -> None:
    run(CONTAINER, "stop", "-t", "10", PREFIX + "web-a")
    status, session = b.call("POST", "/api/v1/sessions/", {"user_id": "cy", "agent_id": "chat"})
    status2, _ = b.call(
        "POST",
        f"/api/v1/sessions/{session['id']}/messages/",
        {"messages": [{"role": "user", "content": "still here"}]},
    )
    check("web A stopped: B keeps serving", status == 201 and status2 in (200, 201))
    for name in ("web-b", "worker-2", "beat"):
        uid = run(CONTAINER, "exec", PREFIX + name, "id", "-u").stdout.strip()
        check(f"{name} runs as a non-root user", uid not in ("", "0"), f"uid {uid}")
    for name in ("web-b", "worker-2"):
        done = run(CONTAINER, "healthcheck", "run", PREFIX + name, check_rc=False)
        check(f"healthcheck {name}", done.returncode == 0, (done.stdout + done.stderr).strip())


def one_retention_run_per_tick() -> None:
    """Beat sends the cleanup every CLEANUP_INTERVAL_SECONDS; a second beat sends it too."""
    start("beat-2", "beat")
    window = CLEANUP_INTERVAL_SECONDS * 3.5
    log(f"two beats for {window:.0f} s")
    time.sleep(window)
    run(CONTAINER, "stop", "-t", "5", PREFIX + "beat-2")
    time.sleep(3)
    sent = {
        name: logs(name).count("Sending due task retention-cleanup") for name in ("beat", "beat-2")
    }
    worker = logs("worker-2")
    ran = _stamps(worker, "retention_cleanup: running")
    skipped = _stamps(worker, "this tick ran already")
    gaps = [later - earlier for earlier, later in itertools.pairwise(ran)]
    check(
        "a second beat: retention still runs once per tick",
        sent["beat-2"] >= 1 and len(skipped) >= 1 and all(gap >= 8 for gap in gaps),
        f"sent by beat {sent['beat']}, by beat-2 {sent['beat-2']}; ran {len(ran)} times "
        f"(gaps {[round(g) for g in gaps]} s), skipped {len(skipped)}",
    )


def _stamps(text: str, needle: str) -> list[float]:
    """The times (podman logs -t) of the lines that contain `needle`."""
    found = []
    for line in text.splitlines():
        if needle in line:
            match = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)", line)
            if match:
                whole, _, fraction = match.group(1).partition(".")
                seconds = time.mktime(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
                found.append(seconds + float(f"0.{fraction or 0}"))
    return sorted(found)


def compose_is_valid() -> None:
    env = {
        **os.environ,
        "MEMORYHUB_ENV_FILE": str(ROOT / ".env.example"),
        "DJANGO_SECRET_KEY": "x" * 50,
        "POSTGRES_PASSWORD": "p",
        "MEMORYHUB_DB_PASSWORD": "q",
    }
    tool = shutil.which("docker-compose")
    if tool:
        done = subprocess.run(  # noqa: S603
            [tool, "-f", str(ROOT / "compose.yaml"), "config", "-q"],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        check(
            "compose.yaml passes docker-compose's schema check (config -q)",
            done.returncode == 0,
            done.stderr.strip()[-300:],
        )
        return
    import yaml  # the structural check, where no compose tool is installed

    spec = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = spec["services"]
    ok = (
        {"postgres", "redis", "migrate", "web", "worker", "beat"} <= set(services)
        and services["web"]["depends_on"]["migrate"]["condition"]
        == "service_completed_successfully"
        and all("-" in str(port) for port in services["web"].get("ports", []))
    )
    check("compose.yaml: structure (no compose tool installed)", ok)


def main() -> int:
    # podman's settings for machines without systemd (deploy/podman/containers.conf).
    os.environ.setdefault("CONTAINERS_CONF", str(ROOT / "deploy" / "podman" / "containers.conf"))
    if shutil.which(CONTAINER) is None:
        print(f"{CONTAINER} is not installed", file=sys.stderr)
        return 2
    server = http.server.ThreadingHTTPServer(("127.0.0.1", LLM_PORT), FakeLLM)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    remove_all()
    began = time.monotonic()
    try:
        prepare_services()
        key = migrate_and_bootstrap()
        started = time.monotonic()
        start("web-a", "web", PORT=str(PORT_A))
        start("web-b", "web", PORT=str(PORT_B))
        start("worker", "worker")
        start("beat", "beat")
        a, b = Api(PORT_A, key), Api(PORT_B, key)
        wait_for("web A and web B to be ready", lambda: a.ready() and b.ready())
        log(f"web A and B ready {time.monotonic() - started:.1f} s after start")
        consistency(a, b)
        summary_survives_a_killed_worker(a, b)
        survivors(b)
        one_retention_run_per_tick()
        compose_is_valid()
    except Exception as error:
        check("the check ran to its end", False, f"{type(error).__name__}: {error}")
        for name in ("web-a", "web-b", "worker", "worker-2", "beat"):
            print(f"--- {name} (last lines) ---\n" + "\n".join(logs(name).splitlines()[-15:]))
    finally:
        if not os.environ.get("SCALEOUT_KEEP"):
            remove_all()
        server.shutdown()
    failed = [name for name, ok, _ in results if not ok]
    log(
        f"{len(results) - len(failed)} of {len(results)} checks passed in "
        f"{time.monotonic() - began:.0f} s"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
