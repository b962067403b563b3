"""Fixtures for the tests that run real Celery workers and beats (see workers.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memoryhub.celery import app
from tests.sessions_app.workers import CeleryBeat, CeleryWorker


@pytest.fixture
def celery_workers(tmp_path: Path) -> Iterator[Callable[..., CeleryWorker]]:
    """Start real workers: `celery_workers(env={...}, pool="prefork")` returns one that is ready.
    Each logs to its own file under tmp_path; all are stopped (or killed) at teardown."""
    started: list[CeleryWorker] = []

    def start(**options: Any) -> CeleryWorker:
        name = f"worker{len(started) + 1}"
        worker = CeleryWorker(name=name, log_path=tmp_path / f"{name}.log", **options)
        started.append(worker)
        return worker.start().wait_ready()

    try:
        yield start
    finally:
        for worker in reversed(started):
            worker.stop()


@pytest.fixture
def enqueue_for_real() -> Iterator[None]:
    # Tests run tasks eagerly by default; this sends them to the broker instead.
    previous = app.conf.task_always_eager
    app.conf.task_always_eager = False
    yield
    app.conf.task_always_eager = previous


@pytest.fixture
def celery_beat(tmp_path: Path) -> Iterator[Callable[..., CeleryBeat]]:
    """Start a real `celery beat`: `celery_beat(env={...})` returns it once it is up. It logs to
    tmp_path/beat.log and is stopped at teardown."""
    started: list[CeleryBeat] = []

    def start(**options: Any) -> CeleryBeat:
        name = f"beat{len(started) + 1}"
        beat = CeleryBeat(name=name, log_path=tmp_path / f"{name}.log", **options)
        started.append(beat)
        return beat.start().wait_ready()

    try:
        yield start
    finally:
        for beat in reversed(started):
            beat.stop()
