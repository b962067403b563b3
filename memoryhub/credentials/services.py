"""Every write of person-bound credentials: mint, revoke, rotate the signing key; audited."""

from __future__ import annotations

import datetime as dt
import secrets
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import jwt
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from memoryhub.accounts.models import Actor, ApiKeyScope, AuditAction, EndUser, Tenant
from memoryhub.accounts.permissions import InsufficientScope
from memoryhub.accounts.services import audit_event_record
from memoryhub.core.errors import InvalidInput
from memoryhub.credentials.keys import ALGORITHM, signing_secret
from memoryhub.credentials.models import PersonToken, SigningKey
from memoryhub.credentials.selectors import session_of_person

# What a token may carry: never `mint` (a person cannot make credentials).
TOKEN_SCOPES = (
    ApiKeyScope.READ,
    ApiKeyScope.WRITE,
    ApiKeyScope.PURGE,
    ApiKeyScope.GLOBAL_MEMORY,
)
# Rows of tokens this long past their expiry are pruned when the tenant mints again.
PRUNE_AFTER = dt.timedelta(days=1)


@dataclass(frozen=True)
class Minted:
    token: str  # shown once, never stored
    row: PersonToken


def _signing_key(*, tenant: Tenant) -> SigningKey:
    found = SigningKey.objects.filter(tenant_id=tenant.pk).first()
    if found is not None:
        return found
    try:
        with transaction.atomic():
            return SigningKey.objects.create(tenant_id=tenant.pk, salt=secrets.token_hex(32))
    except IntegrityError:  # a concurrent first mint made it
        return SigningKey.objects.get(tenant_id=tenant.pk)


def token_scopes_choose(*, held: Iterable[str], requested: list[str] | None) -> list[str]:
    """The scopes a new token gets: those asked for (all held by the minting key), or by
    default read and write as far as the key holds them. Purge and global-memory are never
    implied: they are grants the minter names (seed 001: Global needs an explicit grant)."""
    held_set = set(held)
    if requested is None:
        return [scope for scope in (ApiKeyScope.READ, ApiKeyScope.WRITE) if scope in held_set]
    unknown = sorted(set(requested) - set(TOKEN_SCOPES))
    if unknown:
        raise InvalidInput(
            field="scopes",
            message=f"Not a token scope: {', '.join(unknown)} (from {', '.join(TOKEN_SCOPES)}).",
            code="invalid_choice",
        )
    missing = sorted(set(requested) - held_set)
    if missing:
        raise InsufficientScope(
            f"A key can only grant scopes it holds; it lacks: {', '.join(missing)}."
        )
    return sorted(set(requested))


def person_token_mint(
    *,
    tenant: Tenant,
    end_user: EndUser,
    scopes: list[str],
    ttl_seconds: int,
    actor: Actor,
    session_id: uuid.UUID | None = None,
    agent_id: str = "",
) -> Minted:
    """Mint a signed token for one person (optionally one session or agent), audited.

    Claims: tenant (slug), user (the person's id), session/agent when bound, scopes, iat, exp,
    jti; HS256 with the tenant's current key, whose version is the header's `kid`."""
    max_ttl: int = settings.MEMORYHUB_PERSON_TOKEN_MAX_TTL_SECONDS
    if not 1 <= ttl_seconds <= max_ttl:
        raise InvalidInput(field="ttl_seconds", message=f"Must be between 1 and {max_ttl} seconds.")
    if session_id is not None and not session_of_person(end_user=end_user, session_id=session_id):
        raise InvalidInput(
            field="session_id", message="No such session of this person.", code="not_found"
        )
    now = timezone.now().replace(microsecond=0)
    expires_at = now + dt.timedelta(seconds=ttl_seconds)
    jti = uuid.uuid4().hex
    claims: dict[str, object] = {
        "tenant": tenant.slug,
        "user": end_user.external_id,
        "scopes": scopes,
        "iat": now,
        "exp": expires_at,
        "jti": jti,
    }
    if session_id is not None:
        claims["session"] = str(session_id)
    if agent_id:
        claims["agent"] = agent_id
    with transaction.atomic():
        key = _signing_key(tenant=tenant)
        token = jwt.encode(
            claims,
            signing_secret(salt=key.salt),
            algorithm=ALGORITHM,
            headers={"kid": str(key.version)},
        )
        row = PersonToken.objects.create(
            tenant_id=tenant.pk,
            jti=jti,
            end_user=end_user,
            session_id=session_id,
            agent_id=agent_id,
            scopes=scopes,
            minted_by=actor.name,
            expires_at=expires_at,
        )
        audit_event_record(
            tenant=tenant,
            actor=actor,
            action=AuditAction.KEY_CREATE,
            object_type="person_token",
            object_id=jti,
            detail={
                "user_id": end_user.external_id,
                "scopes": scopes,
                "expires_at": expires_at.isoformat(),
                "session_id": str(session_id) if session_id else None,
                "agent_id": agent_id or None,
            },
        )
    # Bounded: a revoked token's row must outlive its expiry (until then it is what refuses
    # the token), not much more.
    stale = PersonToken.objects.filter(
        tenant_id=tenant.pk, expires_at__lt=now - PRUNE_AFTER
    ).values_list("pk", flat=True)[:1000]
    PersonToken.objects.filter(pk__in=list(stale)).delete()
    return Minted(token=token, row=row)


def person_token_revoke(*, token: PersonToken, actor: Actor) -> PersonToken:
    """Revoke by id: the row stays until the token would have expired, refusing it. Revoking
    a revoked token again changes nothing (and writes no second audit event)."""
    with transaction.atomic():
        updated = PersonToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        if updated:
            audit_event_record(
                tenant=token.tenant,
                actor=actor,
                action=AuditAction.KEY_REVOKE,
                object_type="person_token",
                object_id=token.jti,
                detail={"user_id": token.end_user.external_id},
            )
    token.refresh_from_db(fields=["revoked_at"])
    return token


def signing_key_rotate(*, tenant: Tenant, grace_seconds: int, actor: Actor) -> SigningKey:
    """A new signing secret for the tenant's person tokens. Tokens signed with the old one stop
    working at once (grace 0, the default: a rotation usually answers a leak) or after
    `grace_seconds`; older keys than the previous one never verify."""
    max_ttl: int = settings.MEMORYHUB_PERSON_TOKEN_MAX_TTL_SECONDS
    if not 0 <= grace_seconds <= max_ttl:
        raise InvalidInput(
            field="grace_seconds", message=f"Must be between 0 and {max_ttl} seconds."
        )
    with transaction.atomic():
        _signing_key(tenant=tenant)
        key = SigningKey.objects.select_for_update().get(tenant_id=tenant.pk)
        key.previous_salt = key.salt
        key.previous_valid_until = (
            timezone.now() + dt.timedelta(seconds=grace_seconds) if grace_seconds else None
        )
        key.salt = secrets.token_hex(32)
        key.version += 1
        key.save()
        audit_event_record(
            tenant=tenant,
            actor=actor,
            action=AuditAction.UPDATE,
            object_type="token_signing_key",
            object_id=str(key.version),
            detail={"version": key.version, "grace_seconds": grace_seconds},
        )
    return key
