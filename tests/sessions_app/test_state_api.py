import pytest

from sessions_app.models import StateEntry
from tests.helpers import error_fields


def state_url(session, key: str | None = None) -> str:
    base = f"/api/v1/sessions/{session.id}/state/"
    return f"{base}{key}/" if key else base


def put(api, session, key, value):
    return api.put(state_url(session, key), {"value": value}, format="json")


def keys(api, session) -> list[str]:
    return [row["key"] for row in api.get(state_url(session)).json()["results"]]


def test_it_sets_gets_and_deletes_a_key(api, session):
    created = put(api, session, "working_memory", {"goal": "book a table", "step": 2})
    fetched = api.get(state_url(session, "working_memory"))
    deleted = api.delete(state_url(session, "working_memory"))
    gone = api.get(state_url(session, "working_memory"))

    assert created.status_code == 201
    assert fetched.json()["value"] == {"goal": "book a table", "step": 2}
    assert deleted.status_code == 204
    assert gone.status_code == 404


def test_setting_an_existing_key_updates_it_with_200(api, session):
    put(api, session, "topic", "rust")

    response = put(api, session, "topic", "memory systems")

    assert response.status_code == 200
    assert api.get(state_url(session, "topic")).json()["value"] == "memory systems"
    assert StateEntry.objects.filter(session=session).count() == 1


@pytest.mark.parametrize("value", [None, 0, "", [], {}, [1, "two", {"three": 3.0}], True])
def test_any_json_value_round_trips(api, session, value):
    put(api, session, "k", value)

    assert api.get(state_url(session, "k")).json()["value"] == value


def test_it_evicts_the_oldest_key_past_the_cap(api, session, limits):
    limits["STATE_CAP"] = 3
    for key in ("a", "b", "c"):
        put(api, session, key, key)

    response = put(api, session, "d", "d")

    assert response.json()["evicted"] == ["a"]
    assert keys(api, session) == ["b", "c", "d"]


def test_setting_a_key_moves_it_to_the_end_so_it_is_evicted_last(api, session, limits):
    limits["STATE_CAP"] = 3
    for key in ("a", "b", "c"):
        put(api, session, key, key)

    put(api, session, "a", "again")
    put(api, session, "d", "d")

    assert keys(api, session) == ["c", "a", "d"]


def test_the_default_cap_is_200(api, session):
    for i in range(201):
        put(api, session, f"k{i}", i)

    listing = api.get(state_url(session)).json()

    assert listing["count"] == 200
    assert listing["cap"] == 200
    assert listing["results"][0]["key"] == "k1"


def test_a_value_over_the_limit_is_refused(api, session, limits):
    limits["STATE_VALUE_MAX_BYTES"] = 20

    response = put(api, session, "k", "x" * 50)

    assert response.status_code == 400
    assert error_fields(response)["value"][0]["code"] == "too_large"
    assert not StateEntry.objects.exists()


def test_a_missing_value_is_refused(api, session):
    response = api.put(state_url(session, "k"), {}, format="json")

    assert response.status_code == 400
    assert error_fields(response)["value"][0]["code"] == "required"


def test_a_key_over_255_characters_is_refused(api, session):
    response = put(api, session, "k" * 256, 1)

    assert response.status_code == 400
    assert "key" in error_fields(response)


def test_deleting_a_missing_key_is_a_404(api, session):
    assert api.delete(state_url(session, "nope")).status_code == 404


def test_a_read_only_key_can_read_but_not_write_state(api, read_only_api, session):
    put(api, session, "k", 1)

    assert read_only_api.get(state_url(session, "k")).status_code == 200
    assert (
        read_only_api.put(state_url(session, "k"), {"value": 2}, format="json").status_code == 403
    )
    assert read_only_api.delete(state_url(session, "k")).status_code == 403


def test_setting_state_touches_the_session(api, session):
    before = session.last_active_at

    put(api, session, "k", 1)

    session.refresh_from_db()
    assert session.last_active_at > before


class TestOutsider:
    @pytest.fixture(autouse=True)
    def _state(self, api, session):
        put(api, session, "secret", "mine")

    def test_list_is_404(self, outsider_api, session):
        assert outsider_api.get(state_url(session)).status_code == 404

    def test_get_is_404(self, outsider_api, session):
        assert outsider_api.get(state_url(session, "secret")).status_code == 404

    def test_put_is_404_and_changes_nothing(self, outsider_api, session):
        response = outsider_api.put(
            state_url(session, "secret"), {"value": "theirs"}, format="json"
        )

        assert response.status_code == 404
        assert StateEntry.objects.get(session=session, key="secret").value == "mine"

    def test_delete_is_404_and_deletes_nothing(self, outsider_api, session):
        assert outsider_api.delete(state_url(session, "secret")).status_code == 404
        assert StateEntry.objects.filter(session=session, key="secret").exists()
