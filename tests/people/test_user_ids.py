"""A user id no database row can hold (NUL, or longer than the column) names no one: reads are a
404, writes a 400 — never a 500 (PostgreSQL refuses NUL in text parameters)."""

import pytest

from memoryhub.accounts.models import EndUser

UNSTORABLE = ["a%00b", "x" * 256]
READS = [
    "/api/v1/users/{}/",
    "/api/v1/users/{}/export/",
    "/api/v1/users/{}/memories/",
    "/api/v1/users/{}/memories/diet/",
    "/api/v1/users/{}/memories/diet/versions/",
    "/api/v1/users/{}/notes/",
    "/api/v1/users/{}/notes/long-term/",
    "/api/v1/users/{}/notes/long-term/history/",
    "/api/v1/users/{}/notes/daily/2026-11-01/",
]


@pytest.mark.parametrize("user_id", UNSTORABLE)
@pytest.mark.parametrize("path", READS)
def test_reads_are_404(api, path, user_id):
    assert api.get(path.format(user_id)).status_code == 404


@pytest.mark.parametrize("user_id", UNSTORABLE)
def test_writes_are_400_and_create_no_one(api, user_id):
    memory = api.put(f"/api/v1/users/{user_id}/memories/diet/", {"content": "x"}, format="json")
    note = api.put(f"/api/v1/users/{user_id}/notes/long-term/", {"content": "x"}, format="json")

    assert memory.status_code == 400
    assert "user_id" in memory.json()["error"]["fields"]
    assert note.status_code == 400
    assert not EndUser.objects.exists()


def test_erasing_one_is_404(tenant, make_key):
    from tests.helpers import client_for

    _, secret = make_key(tenant, scopes=["read", "write", "purge"])

    assert client_for(secret).delete("/api/v1/users/a%00b/").status_code == 404
