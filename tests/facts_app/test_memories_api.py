import pytest

from facts_app.models import UserMemory, UserMemoryVersion
from memoryhub.accounts.models import AuditAction, AuditEvent, EndUser
from tests.helpers import client_for, error_code, error_fields

USER = "whatsapp:+4912345"


def url(key: str | None = None, user: str | None = USER, versions: bool = False) -> str:
    base = f"/api/v1/users/{user}/memories/" if user else "/api/v1/memories/"
    if key is None:
        return base
    return f"{base}{key}/versions/" if versions else f"{base}{key}/"


def save(api, key, content, user=USER, **fields):
    return api.put(url(key, user), {"content": content, **fields}, format="json")


def test_it_saves_lists_gets_and_deletes_a_memory(api, tenant):
    created = save(api, "favourite_colour", "green", pinned=True)
    listed = api.get(url())
    fetched = api.get(url("favourite_colour"))
    deleted = api.delete(url("favourite_colour"))

    assert created.status_code == 201
    assert created.json()["version"] == 1
    assert [row["key"] for row in listed.json()["results"]] == ["favourite_colour"]
    assert fetched.json()["content"] == "green"
    assert fetched.json()["pinned"] is True
    assert deleted.status_code == 204
    assert api.get(url("favourite_colour")).status_code == 404
    assert AuditEvent.objects.filter(
        tenant=tenant, action=AuditAction.DELETE, object_type="user_memory"
    ).exists()


def test_saving_an_existing_key_keeps_the_old_text_as_a_version(api):
    save(api, "diet", "vegetarian")
    updated = save(api, "diet", "vegan")
    history = api.get(url("diet", versions=True)).json()

    assert updated.status_code == 200
    assert updated.json()["version"] == 2
    assert history["current"]["content"] == "vegan"
    assert [(v["version"], v["content"]) for v in history["versions"]] == [(1, "vegetarian")]


def test_saving_the_same_text_again_makes_no_new_version(api):
    save(api, "diet", "vegan")
    save(api, "diet", "vegan", pinned=True)

    assert UserMemoryVersion.objects.count() == 0
    assert UserMemory.objects.get().pinned is True


def test_expired_memories_are_not_listed(api):
    save(api, "temp", "until yesterday", expires_at="2000-01-01T00:00:00Z")
    save(api, "kept", "forever")

    assert [row["key"] for row in api.get(url()).json()["results"]] == ["kept"]


@pytest.mark.parametrize(
    ("key", "code"),
    [
        ("Upper", "invalid_key"),
        ("1st", "invalid_key"),
        ("has-dash", "invalid_key"),
        ("k" * 65, "too_long"),
        ("system_prompt", "reserved_key"),
        ("internal_notes", "reserved_key"),
    ],
)
def test_bad_or_reserved_keys_are_refused(api, key, code):
    response = save(api, key, "x")

    assert response.status_code == 400
    assert error_fields(response)["key"][0]["code"] == code
    assert not UserMemory.objects.exists()


def test_blank_or_oversized_content_is_refused(api, limits):
    limits["MEMORY_CONTENT_MAX_BYTES"] = 10

    assert error_fields(save(api, "k", "   "))["content"][0]["code"] == "blank"
    assert error_fields(save(api, "k", "x" * 11))["content"][0]["code"] == "too_large"


def test_reading_an_unknown_person_is_a_404_but_writing_creates_them(api, tenant):
    assert api.get(url(user="nobody")).status_code == 404
    assert save(api, "k", "v", user="newcomer").status_code == 201
    assert EndUser.objects.filter(tenant=tenant, external_id="newcomer").exists()


class TestTenantWide:
    def test_writing_needs_the_global_memory_scope(self, api, tenant, make_key):
        refused = save(api, "house_rules", "Be kind", user=None)
        _, secret = make_key(tenant, scopes=["read", "write", "global-memory"])

        allowed = save(client_for(secret), "house_rules", "Be kind", user=None)

        assert refused.status_code == 403
        assert error_code(refused) == "insufficient_scope"
        assert allowed.status_code == 201
        assert allowed.json()["user_id"] is None
        assert api.get(url(user=None)).json()["results"][0]["key"] == "house_rules"

    def test_tenant_wide_and_personal_keys_do_not_collide(self, api, tenant, make_key):
        _, secret = make_key(tenant, scopes=["read", "write", "global-memory"])
        save(client_for(secret), "tone", "formal", user=None)
        save(api, "tone", "casual")

        assert api.get(url("tone", user=None)).json()["content"] == "formal"
        assert api.get(url("tone")).json()["content"] == "casual"


class TestOutsider:
    @pytest.fixture(autouse=True)
    def _mine(self, api):
        save(api, "secret", "mine")

    def test_list_is_404(self, outsider_api):
        assert outsider_api.get(url()).status_code == 404

    def test_get_is_404(self, outsider_api):
        assert outsider_api.get(url("secret")).status_code == 404

    def test_versions_is_404(self, outsider_api):
        assert outsider_api.get(url("secret", versions=True)).status_code == 404

    def test_delete_is_404(self, outsider_api):
        assert outsider_api.delete(url("secret")).status_code == 404
        assert UserMemory.objects.filter(key="secret").exists()

    def test_put_writes_into_the_outsiders_own_tenant(self, outsider_api, tenant, other_tenant):
        assert save(outsider_api, "secret", "theirs").status_code == 201
        assert UserMemory.objects.get(tenant=tenant, key="secret").content == "mine"
        assert UserMemory.objects.get(tenant=other_tenant, key="secret").content == "theirs"

    def test_tenant_wide_memories_do_not_cross(self, outsider_api, tenant, make_key):
        _, secret = make_key(tenant, scopes=["read", "write", "global-memory"])
        save(client_for(secret), "rules", "ours", user=None)

        assert outsider_api.get(url("rules", user=None)).status_code == 404
        assert outsider_api.get(url(user=None)).json()["results"] == []
