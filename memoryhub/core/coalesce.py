"""Requests gathered across a web process's requests and handed on together, off the request
thread: for work whose hand-off (a Celery publish, ~0.5 ms of CPU) would otherwise be paid per
request while one hand-off per moment would do.

`Coalescer.add(key)` costs a set insert. A thread of the process's own waits until something is
pending, gathers for `window` seconds, then calls `flush` once with every key gathered. The
thread starts on the first `add` in each process (a gunicorn worker forks after import, and a
thread does not survive a fork) and is a daemon; an interpreter that exits normally (a worker
stopping, or recycled after max_requests) flushes what is pending first. A process killed with
keys pending loses them, and a `flush` that fails (the broker down) drops its keys after logging:
what they were for must be recoverable by other means, as after_response's work must.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)


class Coalescer:
    def __init__(self, *, name: str, flush: Callable[[list[str]], None], window: float) -> None:
        self.name = name
        self._flush = flush
        self.window = window
        self._pending: set[str] = set()
        self._wake = threading.Condition()
        self._thread_pid: int | None = None

    def add(self, key: str) -> None:
        with self._wake:
            self._pending.add(key)
            if self._thread_pid != os.getpid():
                self._start()
            if len(self._pending) == 1:
                self._wake.notify()

    def flush_now(self) -> None:
        """Hand on what is pending at once, on this thread (at exit; in tests)."""
        with self._wake:
            keys, self._pending = sorted(self._pending), set()
        if not keys:
            return
        try:
            self._flush(keys)
        except Exception:
            logger.exception("%s: could not hand on %d key(s)", self.name, len(keys))

    def _start(self) -> None:
        # Called with the lock held, once per process: after a fork the parent's thread is gone.
        self._thread_pid = os.getpid()
        threading.Thread(target=self._run, name=f"coalesce-{self.name}", daemon=True).start()
        atexit.register(self.flush_now)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._pending:
                    self._wake.wait()
            time.sleep(self.window)
            self.flush_now()
