"""The base classes every API view starts from: tenancy is applied here, once."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError, transaction
from django.db.models import QuerySet
from rest_framework import exceptions, views, viewsets
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request

from memoryhub.accounts.models import Actor, ApiKey, Tenant
from memoryhub.core.limits import limit


class TenantScopedMixin(views.APIView):
    """Gives views `self.tenant` (from the API key) and narrows `get_queryset()` to it."""

    @property
    def tenant(self) -> Tenant:
        api_key = self.request.auth
        if not isinstance(api_key, ApiKey):  # the permission class runs first; this is a guard
            raise exceptions.NotAuthenticated()
        return api_key.tenant

    @property
    def api_key(self) -> ApiKey:
        api_key = self.request.auth
        assert isinstance(api_key, ApiKey)
        return api_key

    @property
    def actor(self) -> Actor:
        """Who is acting, for the audit log: the key, by its prefix."""
        return Actor.api_key(self.api_key.prefix)

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
