"""memoryhub.core.threads: a helper thread per process, a new one after a fork."""

from __future__ import annotations

import os
import threading

from memoryhub.core import threads
from memoryhub.core.threads import ProcessThread


def test_the_helper_thread_is_started_once_and_named() -> None:
    helper = ProcessThread("helper-test")

    first = helper.executor()
    name = first.submit(lambda: threading.current_thread().name).result()

    assert helper.executor() is first
    assert name.startswith("helper-test")


def test_a_forked_process_starts_a_thread_of_its_own(monkeypatch) -> None:
    helper = ProcessThread("helper-test")
    parent = helper.executor()
    parent_thread = parent.submit(threading.get_ident).result()

    # What a fork changes: the pid (the parent's thread is not in the child).
    child_pid = os.getpid() + 1
    monkeypatch.setattr(threads.os, "getpid", lambda: child_pid)
    child = helper.executor()

    assert child is not parent
    assert child.submit(threading.get_ident).result() != parent_thread
