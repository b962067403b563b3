"""Fixtures shared by the sessions tests."""

from __future__ import annotations

import pytest

from memoryhub.core.coalesce import Coalescer
from sessions_app import pending


@pytest.fixture
def gathered(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The web process's batches of appended requests, kept instead of published (a window no
    test waits out)."""
    batches: list[list[str]] = []
    monkeypatch.setattr(
        pending, "APPEND_REQUESTS", Coalescer(name="test", flush=batches.append, window=3600)
    )
    return batches
