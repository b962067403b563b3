"""Person-bound tokens: minting (scope, audit, limits), verification (expiry, signature,
revocation, rotation) and what a token can reach beyond the route matrix."""

from __future__ import annotations

import datetime as dt

import jwt
import pytest
from django.utils import timezone

from memoryhub.accounts.models import AuditEvent, EndUser
from memoryhub.credentials.keys import signing_secret
from memoryhub.credentials.models import PersonToken, SigningKey
from tests.helpers import client_for, error_code


@pytest.fixture
def minter(tenant, make_key):
    return client_for(make_key(tenant, scopes=["read", "write", "purge", "mint"])[1])


def _mint(minter, user_id="alice", **body):
    response = minter.post(f"/api/v1/users/{user_id}/tokens/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_it_mints_a_token_that_acts_as_the_person(minter):
    minted = _mint(minter)
    assert set(minted) >= {"token", "jti", "expires_at", "scopes"}
    assert minted["scopes"] == ["read", "write"]
    person = client_for(minted["token"])
    made = person.post("/api/v1/sessions/", {"external_key": "k"}, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["user_id"] == "alice"
    listed = person.get("/api/v1/users/")
    assert [row["user_id"] for row in listed.json()["results"]] == ["alice"]


def test_the_claims_are_the_documented_ones(minter, tenant):
    token = _mint(minter, ttl_seconds=60)["token"]
    claims = jwt.decode(token, options={"verify_signature": False})
    assert set(claims) == {"tenant", "user", "scopes", "iat", "exp", "jti"}
    assert claims["tenant"] == tenant.slug
    assert claims["user"] == "alice"
    assert claims["exp"] - claims["iat"] == 60
    assert jwt.get_unverified_header(token)["alg"] == "HS256"


def test_minting_needs_the_mint_scope(tenant, make_key):
    plain = client_for(make_key(tenant, scopes=["read", "write"])[1])
    response = plain.post("/api/v1/users/alice/tokens/", {}, format="json")
    assert response.status_code == 403
    assert error_code(response) == "insufficient_scope"


def test_a_token_cannot_mint_or_grant_more_than_the_key_holds(minter):
    person = client_for(_mint(minter)["token"])
    assert person.post("/api/v1/users/alice/tokens/", {}, format="json").status_code == 403
    response = minter.post(
        "/api/v1/users/alice/tokens/", {"scopes": ["global-memory"]}, format="json"
    )
    assert response.status_code == 403
    response = minter.post("/api/v1/users/alice/tokens/", {"scopes": ["mint"]}, format="json")
    assert response.status_code == 400


def test_minting_is_audited_without_the_token(minter, tenant):
    minted = _mint(minter)
    event = AuditEvent.objects.get(tenant=tenant, object_type="person_token")
    assert event.action == "key_create"
    assert event.object_id == minted["jti"]
    assert event.detail["user_id"] == "alice"
    assert minted["token"] not in str(event.detail)


def test_the_lifetime_is_bounded(minter, settings):
    settings.MEMORYHUB_PERSON_TOKEN_MAX_TTL_SECONDS = 600
    response = minter.post("/api/v1/users/alice/tokens/", {"ttl_seconds": 601}, format="json")
    assert response.status_code == 400
    assert "ttl_seconds" in response.json()["error"]["fields"]


def test_an_expired_token_is_401(minter, tenant):
    minted = _mint(minter)
    row = PersonToken.objects.get(jti=minted["jti"])
    key = SigningKey.objects.get(tenant=tenant)
    past = timezone.now() - dt.timedelta(minutes=5)
    claims = {**jwt.decode(minted["token"], options={"verify_signature": False})}
    claims.update(iat=past - dt.timedelta(minutes=1), exp=past)
    expired = jwt.encode(
        claims, signing_secret(salt=key.salt), algorithm="HS256", headers={"kid": "1"}
    )
    response = client_for(expired).get("/api/v1/users/")
    assert response.status_code == 401
    assert "expired" in response.json()["error"]["message"]
    assert row.revoked_at is None


def test_a_bad_signature_is_401(minter):
    token = _mint(minter)["token"]
    claims = jwt.decode(token, options={"verify_signature": False})
    forged = jwt.encode(claims, b"not-the-secret" * 4, algorithm="HS256", headers={"kid": "1"})
    assert client_for(forged).get("/api/v1/users/").status_code == 401
    tampered = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    assert client_for(tampered).get("/api/v1/users/").status_code == 401
    none_alg = jwt.encode(claims, key=None, algorithm="none")
    assert client_for(none_alg).get("/api/v1/users/").status_code == 401


def test_a_revoked_token_is_401_and_revoking_is_audited(minter, tenant):
    minted = _mint(minter)
    person = client_for(minted["token"])
    assert person.get("/api/v1/users/").status_code == 200
    assert minter.delete(f"/api/v1/tokens/{minted['jti']}/").status_code == 204
    response = person.get("/api/v1/users/")
    assert response.status_code == 401
    assert "revoked" in response.json()["error"]["message"]
    assert AuditEvent.objects.filter(tenant=tenant, action="key_revoke").count() == 1
    listed = minter.get("/api/v1/users/alice/tokens/").json()["results"]
    assert minted["jti"] not in [row["jti"] for row in listed]


def test_rotating_the_secret_retires_old_tokens(minter, tenant):
    old = client_for(_mint(minter)["token"])
    rotated = minter.post("/api/v1/tokens/rotate-secret/", {}, format="json")
    assert rotated.status_code == 200, rotated.content
    assert rotated.json()["version"] == 2
    assert old.get("/api/v1/users/").status_code == 401
    new = client_for(_mint(minter)["token"])
    assert new.get("/api/v1/users/").status_code == 200
    assert AuditEvent.objects.filter(tenant=tenant, object_type="token_signing_key").exists()


def test_a_grace_period_keeps_the_previous_secret_for_a_while(minter):
    old = client_for(_mint(minter)["token"])
    minter.post("/api/v1/tokens/rotate-secret/", {"grace_seconds": 300}, format="json")
    assert old.get("/api/v1/users/").status_code == 200
    # A second rotation retires the first key whatever the grace.
    minter.post("/api/v1/tokens/rotate-secret/", {"grace_seconds": 300}, format="json")
    assert old.get("/api/v1/users/").status_code == 401


def test_a_token_for_another_tenants_person_is_impossible(minter, other_tenant, make_key):
    outsider = client_for(make_key(other_tenant, scopes=["read", "write", "mint"])[1])
    theirs = _mint(outsider, "alice")
    _mint(minter, "alice")
    # Their token names their tenant and person: it reaches nothing of ours.
    response = client_for(theirs["token"]).get("/api/v1/users/alice/")
    assert response.status_code == 200
    assert EndUser.objects.get(tenant=other_tenant, external_id="alice")
    # Re-signing their claims for our tenant needs our secret; with theirs it fails.
    claims = jwt.decode(theirs["token"], options={"verify_signature": False})
    their_key = SigningKey.objects.get(tenant=other_tenant)
    claims["tenant"] = "acme"
    moved = jwt.encode(
        claims, signing_secret(salt=their_key.salt), algorithm="HS256", headers={"kid": "1"}
    )
    assert client_for(moved).get("/api/v1/users/").status_code == 401
    # A jti of theirs is not ours to revoke.
    assert minter.delete(f"/api/v1/tokens/{theirs['jti']}/").status_code == 404


def test_erasing_the_person_kills_their_tokens(minter):
    minted = _mint(minter, scopes=["read", "write", "purge"])
    person = client_for(minted["token"])
    assert person.delete("/api/v1/users/alice/").status_code == 200
    assert person.get("/api/v1/users/").status_code == 401


def test_tenant_wide_memories_are_readable_not_writable(minter, tenant, make_key):
    admin = client_for(make_key(tenant, scopes=["read", "write", "global-memory", "mint"])[1])
    admin.put("/api/v1/memories/house_rule/", {"content": "be kind"}, format="json")
    person = client_for(_mint(minter)["token"])
    assert person.get("/api/v1/memories/house_rule/").status_code == 200
    response = person.put("/api/v1/memories/house_rule/", {"content": "x"}, format="json")
    assert response.status_code == 403
    granted = client_for(_mint(admin, scopes=["read", "write", "global-memory"])["token"])
    response = granted.put("/api/v1/memories/house_rule/", {"content": "y"}, format="json")
    assert response.status_code == 200


def test_a_session_bound_token_sees_only_its_session(minter, api):
    one = api.post("/api/v1/sessions/", {"user_id": "alice", "external_key": "1"}).json()["id"]
    two = api.post("/api/v1/sessions/", {"user_id": "alice", "external_key": "2"}).json()["id"]
    person = client_for(_mint(minter, session_id=one)["token"])
    assert person.get(f"/api/v1/sessions/{one}/").status_code == 200
    assert person.get(f"/api/v1/sessions/{two}/").status_code == 404
    listed = person.get("/api/v1/sessions/").json()["results"]
    assert [row["id"] for row in listed] == [one]


def test_names_held_by_another_persons_rows_are_refused_not_500(minter, api):
    bob = api.post("/api/v1/sessions/", {"user_id": "bob", "external_key": "bob:main"}).json()
    api.post(
        "/api/v1/task-contexts/",
        {
            "task_id": "t-bob",
            "session_id": bob["id"],
            "event_type": "x",
            "response_event": "y",
            "sub_tasks": ["sub-bob"],
        },
        format="json",
    )
    alice = client_for(_mint(minter)["token"])
    own = alice.post("/api/v1/sessions/", {"external_key": "alice:main"}, format="json").json()
    taken = alice.post("/api/v1/sessions/", {"external_key": "bob:main"}, format="json")
    assert taken.status_code == 409
    assert bob["id"] not in taken.content.decode()
    sub = alice.post(
        "/api/v1/task-contexts/",
        {
            "task_id": "t-alice",
            "session_id": own["id"],
            "event_type": "x",
            "response_event": "y",
            "sub_tasks": ["sub-bob"],
        },
        format="json",
    )
    assert sub.status_code in (404, 409), sub.content
    assert "t-bob" not in sub.content.decode()


def test_an_idempotency_key_never_replays_another_persons_answer(minter, api):
    bob_token = client_for(_mint(minter, "bob")["token"])
    alice_token = client_for(_mint(minter, "alice")["token"])
    body = {"content": "secret of bob", "day": timezone.localdate().isoformat()}
    first = bob_token.post(
        "/api/v1/users/bob/notes/daily/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )
    assert first.status_code in (200, 201), first.content
    body["content"] = "alice's own"
    second = alice_token.post(
        "/api/v1/users/alice/notes/daily/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )
    assert second.status_code in (200, 201), second.content
    assert "secret of bob" not in second.content.decode()
    assert second.headers.get("Idempotent-Replayed") is None


def test_staff_revoke_a_token_in_the_admin(minter, tenant, client):
    from memoryhub.accounts.models import User

    minted = _mint(minter)
    client.force_login(User.objects.create_superuser(username="root", password="pw-tests-only"))
    row = PersonToken.objects.get(jti=minted["jti"])
    response = client.post(
        "/admin/credentials/persontoken/",
        {"action": "revoke", "_selected_action": [row.pk]},
    )
    assert response.status_code == 302
    assert client_for(minted["token"]).get("/api/v1/users/").status_code == 401
    assert AuditEvent.objects.filter(tenant=tenant, action="key_revoke", actor="root").exists()
