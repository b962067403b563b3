"""Helper threads of a web or worker process."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor


class ProcessThread:
    """One helper thread of this process, started on first use.

    A thread does not survive a fork (gunicorn --preload, Celery's prefork pool): a process
    forked after the first use starts its own thread, on its own first use.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._pid = 0

    def executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None or self._pid != os.getpid():
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
                self._pid = os.getpid()
            return self._executor
