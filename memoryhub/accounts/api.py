"""The base classes every API view starts from: tenancy is applied here, once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError, transaction
from django.db.models import QuerySet
from rest_framework import exceptions, views, viewsets
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request

from memoryhub.accounts.binding import (
    Ownership,
    PersonCredential,
    credential_actor,
    named_objects,
    person_params,
)
from memoryhub.accounts.models import Actor, ApiKey, ApiKeyScope, Tenant
from memoryhub.accounts.permissions import SAFE_METHODS, InsufficientScope
from memoryhub.core.errors import ResourceNotFound
from memoryhub.core.limits import limit

# Collection writes that name no person act for the bound person ({url name: does this body}):
# a person-bound token's new session is its person's, and its "older than" purge only theirs.
PERSON_DEFAULTS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "session-list": lambda body: True,
    "purge": lambda body: body.get("scope") == "older_than",
}


class TenantScopedMixin(views.APIView):
    """Gives views `self.tenant` (from the API key or token) and narrows `get_queryset()` to it.

    With a person-bound token the tenant carries the person (accounts.binding): every
    `for_tenant()` narrows to them, and before the scope check and the view a request that names
    (in its path, query or body) an object of anyone else is answered 404."""

    @property
    def tenant(self) -> Tenant:
        credential = self.request.auth
        # The permission class runs first; this is a guard.
        if not isinstance(credential, ApiKey | PersonCredential):
            raise exceptions.NotAuthenticated()
        return credential.tenant

    @property
    def api_key(self) -> ApiKey | PersonCredential:
        """The credential: a tenant's key, or a person-bound token (both answer has_scope)."""
        credential = self.request.auth
        assert isinstance(credential, ApiKey | PersonCredential)
        return credential

    @property
    def person_credential(self) -> PersonCredential | None:
        credential = self.request.auth
        return credential if isinstance(credential, PersonCredential) else None

    @property
    def actor(self) -> Actor:
        """Who is acting, for the audit log: the key by its prefix, or the token by its id."""
        return credential_actor(self.api_key)

    def check_permissions(self, request: Request) -> None:
        # Before the scope check: another person's id is a 404 whatever the token's scopes
        # (a 403 would say the id exists).
        person = self.person_credential
        if person is not None:
            self._keep_to_person(request=request, person=person, path=self.kwargs)
        super().check_permissions(request)

    def _keep_to_person(
        self, *, request: Request, person: PersonCredential, path: dict[str, Any]
    ) -> None:
        writing = request.method not in SAFE_METHODS
        body = request.data if writing else None
        owners = person_params()
        query = [
            (name, str(value)) for name, values in request.query_params.lists() for value in values
        ]
        for name, value in named_objects(path=path, query=query, body=body):
            ownership = owners[name](self.tenant, value)
            if ownership is Ownership.FOREIGN:
                raise ResourceNotFound("Not found.")
            if (
                ownership is Ownership.SHARED
                and writing
                and not person.has_scope(ApiKeyScope.GLOBAL_MEMORY)
            ):
                raise InsufficientScope("Tenant-wide memory needs the global-memory scope.")
        match = request.resolver_match
        default = PERSON_DEFAULTS.get(match.url_name or "") if match else None
        if (
            writing
            and default
            and isinstance(body, dict)
            and "user_id" not in body
            and default(body)
        ):
            body["user_id"] = person.end_user.external_id

    def get_queryset(self) -> QuerySet[Any]:
        queryset = getattr(self, "queryset", None)
        assert queryset is not None, f"{type(self).__name__} must set queryset"
        return queryset.all().for_tenant(self.tenant)


class TenantScopedAPIView(TenantScopedMixin):
    """For verbs (append, assemble, purge): small APIViews over one service call."""


class TenantScopedGenericViewSet(TenantScopedMixin, viewsets.GenericViewSet):
    """For resources: declarative viewsets whose every query is the tenant's."""


def _invalid_cursor() -> exceptions.ValidationError:
    return exceptions.ValidationError({"cursor": ["Invalid cursor."]}, code="invalid_cursor")


class LimitCursorPagination(CursorPagination):
    """Cursor pagination with `?limit=` (bounded) and a 400, not a 404, for a malformed cursor."""

    page_size_query_param = "limit"

    def __init__(self) -> None:
        # Read at request time, not import time, so settings overrides apply.
        self.page_size = limit("PAGE_SIZE_DEFAULT")
        self.max_page_size = limit("PAGE_SIZE_MAX")

    def decode_cursor(self, request: Request) -> Any:
        try:
            return super().decode_cursor(request)
        except exceptions.NotFound:
            raise _invalid_cursor() from None

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> Any:
        # A cursor is ours only if we made it, but a client can hand-make one that decodes: its
        # position then reaches the database as a value of the ordering's type, and a value
        # that is not one (a number for a time, bytes for text) fails there. That is the
        # client's bad cursor (400), not our error.
        if request.query_params.get(self.cursor_query_param) is None:
            return super().paginate_queryset(queryset, request, view)
        try:
            # A savepoint, so that PostgreSQL's refusal does not abort an outer transaction.
            with transaction.atomic():
                return super().paginate_queryset(queryset, request, view)
        except (
            DjangoValidationError,
            DataError,
            ValueError,
            TypeError,
            OverflowError,
        ):
            raise _invalid_cursor() from None

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return limit("PAGE_SIZE_DEFAULT")
        try:
            size = int(raw)
        except ValueError:
            size = 0
        if size < 1:
            raise exceptions.ValidationError(
                {"limit": [f"Must be an integer between 1 and {self.max_page_size}."]}
            )
        return min(size, limit("PAGE_SIZE_MAX"))
