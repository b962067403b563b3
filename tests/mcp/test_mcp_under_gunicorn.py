"""The production server serves MCP as it is: `gunicorn -c gunicorn.conf.py memoryhub.wsgi`, its
threaded workers, no ASGI server beside it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memoryhub.accounts.models import Tenant
from memoryhub.accounts.services import api_key_create
from tests.live_gunicorn import Gunicorn
from tests.mcp.helpers import call, connected

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Gunicorn]:
    running = Gunicorn(
        log_path=tmp_path / "gunicorn.log", env={"GUNICORN_WORKERS": "1", "GUNICORN_THREADS": "2"}
    ).start()
    yield running
    running.stop()


def test_gunicorns_threaded_workers_serve_a_conversation_over_mcp(server: Gunicorn) -> None:
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    secret = api_key_create(tenant=tenant, name="mcp", scopes=["read", "write"])[1]

    async def conversation() -> dict[str, Any]:
        async with connected(f"http://127.0.0.1:{server.port}/mcp/", secret) as session:
            await call(
                session,
                "add_messages",
                session_key="chat:1",
                user_id="ada",
                messages=[{"role": "user", "content": "My cat is called Pixel."}],
            )
            await call(session, "add_memory", user_id="ada", key="cat", content="Pixel, a cat")
            found = await call(session, "search_memories", user_id="ada", query="cat")
            context = await call(session, "get_context", session_key="chat:1")
        return {"found": found, "context": context}

    seen = asyncio.run(conversation())

    assert [memory["key"] for memory in seen["found"]["memories"]] == ["cat"]
    assert "Pixel, a cat" in seen["context"]["content"], server.log_tail()
