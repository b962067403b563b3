"""What the WSGI module does at import: under gunicorn's `preload_app` it runs once, in the
master, and every worker is a fork of it (gunicorn.conf.py).

- It loads what the first requests would otherwise load while their clients wait: every view of
  the URLconf and the token counter's encoding (memoryhub.core.warm).
- It opens no database connection and starts no thread: a connection opened in the master would
  be one socket shared by every worker forked from it, and a thread does not survive a fork.
- The configuration preloads, and freezes the master's objects before each fork.

The import runs in a fresh interpreter (this one has imported everything long since).
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import subprocess
import sys

from tests.sessions_app.workers import ROOT, database_url

_PROBE = """
import json, sys, threading
import memoryhub.wsgi
from django.db import connections
from memoryhub.core import tokens

print(json.dumps({
    "views": [name for name in ("sessions_app.api.views", "facts_app.api.facts",
                                "memoryhub.context.api", "memoryhub.web.views")
              if name in sys.modules],
    "encoding_loaded": tokens._counter.cache_info().currsize,
    "connections_open": [c.alias for c in connections.all(initialized_only=True)
                         if c.connection is not None],
    "threads": [t.name for t in threading.enumerate()],
}))
"""


def test_importing_the_wsgi_module_warms_the_process_without_a_connection_or_a_thread() -> None:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "memoryhub.settings",
    }
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["views"] == [
        "sessions_app.api.views",
        "facts_app.api.facts",
        "memoryhub.context.api",
        "memoryhub.web.views",
    ]
    assert found["encoding_loaded"] == 1
    assert found["connections_open"] == []
    assert found["threads"] == ["MainThread"]


def test_gunicorn_preloads_the_application_and_freezes_it_before_each_fork() -> None:
    # The file reads ./.env into the environment (as gunicorn would): not into this process's.
    environment = dict(os.environ)
    try:
        config = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
    finally:
        os.environ.clear()
        os.environ.update(environment)
    assert config["preload_app"] is True
    gc.unfreeze()
    try:
        config["pre_fork"](None, None)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
