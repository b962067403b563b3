"""Person-bound credentials, as the kernel sees them: who the request is narrowed to, and where.

A person-bound credential (a short-lived token minted for one end user, memoryhub.credentials)
authenticates as its tenant *and* its person. Authentication puts a `PersonBinding` on the
request's tenant object (`tenant.person`), the same place every selector and service already
receives the tenant from; `TenantQuerySet.for_tenant()` then narrows each person-owned model to
that person, and the API's base view (accounts.api) refuses, as a 404, any id a request names
that is not the person's. A row-level-security wall can read the person from the same place.

The kernel knows no sessions or facts: the credentials app registers, when it loads, how each
person-owned model reaches its person (`person_scope_register`) and which request parameter
names which kind of object (`person_param_register`), as NetBox's apps register into its
search. A tenant with no binding (every API key, every task) is narrowed by tenant only.
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import models

if TYPE_CHECKING:
    from memoryhub.accounts.models import Actor, EndUser, Tenant


@dataclass(frozen=True)
class PersonBinding:
    """The one person (and optionally one session or agent) a credential may act for."""

    end_user: EndUser
    session_id: uuid.UUID | None = None
    agent_id: str | None = None


@dataclass(frozen=True)
class PersonCredential:
    """`request.auth` for a person-bound token: what ApiKey is for a tenant key."""

    tenant: Tenant
    binding: PersonBinding
    scopes: frozenset[str]
    jti: str
    minted_by: str  # the prefix of the tenant key that minted it
    expires_at: dt.datetime
    claims: dict[str, Any] = field(default_factory=dict, compare=False)

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes

    @property
    def prefix(self) -> str:
        """What rate limits count against: each token on its own."""
        return f"token:{self.jti}"

    @property
    def end_user(self) -> EndUser:
        return self.binding.end_user


def credential_actor(credential: Any) -> Actor:
    """Who a request's writes are audited as: the key by its prefix; a token by its id and the
    key that minted it (never the token)."""
    from memoryhub.accounts.models import Actor, ActorType

    if isinstance(credential, PersonCredential):
        return Actor(
            type=ActorType.API_KEY,
            name=f"token:{credential.jti} (api_key:{credential.minted_by})",
        )
    return Actor.api_key(credential.prefix)


def tenant_bound(*, tenant: Tenant, binding: PersonBinding) -> Tenant:
    """`tenant` narrowed to `binding`: a copy, so no other holder of the row sees the binding."""
    from memoryhub.accounts.models import Tenant

    bound = Tenant(pk=tenant.pk, slug=tenant.slug, name=tenant.name, created_at=tenant.created_at)
    bound.person = binding
    return bound


# --- what the apps register -------------------------------------------------------------------

# {model: binding -> the rows of that model a bound request may see}
PersonScope = Callable[[PersonBinding], models.Q]
_scopes: dict[type[models.Model], PersonScope] = {}


def person_scope_register(model: type[models.Model], scope: PersonScope) -> None:
    _scopes[model] = scope


def person_scope(model: type[models.Model], binding: PersonBinding) -> models.Q | None:
    """The narrowing of `model` for `binding`; None when the model is not person-owned."""
    scope = _scopes.get(model)
    return None if scope is None else scope(binding)


def person_scoped_models() -> list[type[models.Model]]:
    return list(_scopes)


class Ownership(enum.Enum):
    """What a named object is to a bound request."""

    OWN = "own"  # the person's: read and write
    SHARED = "shared"  # tenant-wide (a memory or fact with no person): read; writes need a grant
    FOREIGN = "foreign"  # another person's, or no one's: 404, as if it did not exist
    ABSENT = "absent"  # nothing by that id in the tenant: the view answers (a 404, or a create)


# {parameter name: (tenant, value) -> Ownership}
ParamOwner = Callable[["Tenant", str], Ownership]
_params: dict[str, ParamOwner] = {}


def person_param_register(name: str, owner: ParamOwner) -> None:
    _params[name] = owner


def person_params() -> dict[str, ParamOwner]:
    return dict(_params)


def named_objects(
    *, path: dict[str, Any], query: Iterable[tuple[str, str]], body: Any
) -> list[tuple[str, str]]:
    """Every (parameter, value) a request names an object with: path, query string and the top
    level of a JSON object body (a batch's items name no other objects)."""
    named = [(name, str(value)) for name, value in path.items() if name in _params]
    named += [(name, value) for name, value in query if name in _params]
    if isinstance(body, dict):
        named += [
            (name, str(value))
            for name, value in body.items()
            if name in _params and isinstance(value, str | int) and not isinstance(value, bool)
        ]
    return named
