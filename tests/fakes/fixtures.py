"""pytest fixtures for the test doubles (registered in tests/conftest.py via pytest_plugins)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAIServer

FAKE_LLM_TIMEOUT_SECONDS = 5.0


@pytest.fixture
def fake_llm(settings: Any) -> Iterator[FakeOpenAIServer]:
    """A running fake chat-completions server with MemoryHub's LLM settings pointing at it."""
    server = FakeOpenAIServer().start()
    settings.LLM_BASE_URL = server.base_url
    settings.LLM_MODEL = server.model
    settings.LLM_API_KEY = "test-key"
    # Short enough that a broken test fails quickly; timeout tests shorten it further.
    settings.LLM_TIMEOUT_SECONDS = FAKE_LLM_TIMEOUT_SECONDS
    try:
        yield server
    finally:
        server.stop()
