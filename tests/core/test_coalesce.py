"""Keys gathered across threads and handed on in one call after the window; a failing hand-off
is logged, not raised (what the keys were for must be recoverable otherwise)."""

from __future__ import annotations

import logging
import threading

import pytest

from memoryhub.core.coalesce import Coalescer


def test_keys_added_from_several_threads_are_handed_on_together() -> None:
    handed: list[list[str]] = []
    done = threading.Event()

    def flush(keys: list[str]) -> None:
        handed.append(keys)
        done.set()

    gathered = Coalescer(name="test", flush=flush, window=0.3)

    def add_twice(key: str) -> None:
        gathered.add(key)
        gathered.add(key)

    adders = [threading.Thread(target=add_twice, args=(f"k{n}",)) for n in range(5)]
    for adder in adders:
        adder.start()
    for adder in adders:
        adder.join()

    assert done.wait(timeout=10)
    assert handed == [["k0", "k1", "k2", "k3", "k4"]]


def test_what_is_pending_can_be_handed_on_at_once_and_only_once() -> None:
    handed: list[list[str]] = []
    gathered = Coalescer(name="test", flush=handed.append, window=3600)
    gathered.add("b")
    gathered.add("a")

    gathered.flush_now()
    gathered.flush_now()

    assert handed == [["a", "b"]]


def test_a_failing_hand_off_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    def broken(keys: list[str]) -> None:
        raise ConnectionError("broker down")

    gathered = Coalescer(name="test", flush=broken, window=3600)
    gathered.add("a")

    with caplog.at_level(logging.ERROR, logger="memoryhub.core.coalesce"):
        gathered.flush_now()

    assert "could not hand on 1 key(s)" in caplog.text
    # The keys went with the failed hand-off: nothing is left pending.
    handed: list[list[str]] = []
    gathered._flush = handed.append
    gathered.flush_now()
    assert handed == []
