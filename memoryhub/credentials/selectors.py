"""Reads of person-bound credentials: verifying a presented token, listing a person's tokens."""

from __future__ import annotations

import uuid
from typing import Any

import jwt
from django.db.models import QuerySet
from django.utils import timezone

from memoryhub.accounts.binding import PersonBinding, PersonCredential, tenant_bound
from memoryhub.accounts.models import EndUser, Tenant
from memoryhub.accounts.selectors import ApiKeyInvalid
from memoryhub.core.errors import ResourceNotFound
from memoryhub.credentials.keys import ALGORITHM, signing_secret
from memoryhub.credentials.models import PersonToken, SigningKey
from sessions_app.models import Session

REQUIRED_CLAIMS = ["exp", "iat", "jti", "tenant", "user", "scopes"]


def _salt_for(*, key: SigningKey, kid: Any) -> str:
    if kid == str(key.version):
        return key.salt
    previous_valid = key.previous_valid_until is not None and (
        key.previous_valid_until > timezone.now()
    )
    if kid == str(key.version - 1) and key.previous_salt and previous_valid:
        return key.previous_salt
    raise ApiKeyInvalid("This token was signed with a retired key (the secret was rotated).")


def person_token_verify(presented: str) -> PersonCredential:
    """The credential a presented token is, or ApiKeyInvalid (the API's 401): a signature by
    the tenant's current key (or, within its grace period, the previous one), not expired,
    minted here (a row by its `jti`), not revoked, and for a person who still exists."""
    try:
        header = jwt.get_unverified_header(presented)
        unverified = jwt.decode(presented, options={"verify_signature": False})
    except jwt.InvalidTokenError:
        raise ApiKeyInvalid("Malformed token.") from None
    if header.get("alg") != ALGORITHM or not isinstance(unverified.get("tenant"), str):
        raise ApiKeyInvalid("Invalid token.")
    found = list(
        SigningKey.objects.select_related("tenant")
        .filter(tenant__slug=unverified["tenant"])
        .order_by()[:1]
    )
    if not found:
        raise ApiKeyInvalid("Invalid token.")
    key = found[0]
    try:
        claims = jwt.decode(
            presented,
            signing_secret(salt=_salt_for(key=key, kid=header.get("kid"))),
            algorithms=[ALGORITHM],
            options={"require": REQUIRED_CLAIMS},
        )
    except jwt.ExpiredSignatureError:
        raise ApiKeyInvalid("This token has expired.") from None
    except jwt.InvalidTokenError:
        raise ApiKeyInvalid("Invalid token.") from None
    rows = list(
        PersonToken.objects.select_related("end_user")
        .filter(tenant_id=key.tenant_id, jti=str(claims["jti"]))
        .order_by()[:1]
    )
    if not rows or rows[0].end_user.external_id != claims["user"]:
        raise ApiKeyInvalid("Invalid token.")
    row = rows[0]
    if row.revoked_at is not None:
        raise ApiKeyInvalid("This token has been revoked.")
    binding = PersonBinding(
        end_user=row.end_user,
        session_id=row.session_id,
        agent_id=row.agent_id or None,
    )
    return PersonCredential(
        tenant=tenant_bound(tenant=key.tenant, binding=binding),
        binding=binding,
        scopes=frozenset(row.scopes),
        jti=row.jti,
        minted_by=row.minted_by,
        expires_at=row.expires_at,
        claims=claims,
    )


def person_tokens_active(*, tenant: Tenant, end_user: EndUser) -> QuerySet[PersonToken]:
    """The person's tokens that still work: not expired, not revoked; newest first."""
    return (
        PersonToken.objects.for_tenant(tenant)
        .filter(end_user=end_user, revoked_at__isnull=True, expires_at__gt=timezone.now())
        .order_by("-created_at", "-pk")
    )


def person_token_get(*, tenant: Tenant, jti: str) -> PersonToken:
    found = list(PersonToken.objects.for_tenant(tenant).filter(jti=jti)[:1])
    if not found:
        raise ResourceNotFound("No such token.")
    return found[0]


def session_of_person(*, end_user: EndUser, session_id: uuid.UUID) -> bool:
    return Session.objects.filter(
        tenant_id=end_user.tenant_id, end_user=end_user, pk=session_id
    ).exists()
