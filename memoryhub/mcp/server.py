"""The MCP server object: who is calling, how a tool is registered, how a refusal comes back.

The official SDK's `MCPServer`, served over streamable HTTP by django-stateless-mcp (views.py).
A tool learns its caller from the request the view authenticated (the API key, so the tenant),
never from its arguments. Its refusals are the REST API's: the domain errors and DRF errors go
through the API's own exception handler, and come back as a tool error (`isError`) whose text and
structured content are the API's error body, `{"error": {"code", "message", "fields"?}}`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django_stateless_mcp import PermittedToolsFilter, django_request
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations
from pydantic import ValidationError as ArgumentsInvalid
from rest_framework import exceptions

from memoryhub.accounts.binding import PersonCredential, credential_actor
from memoryhub.accounts.models import Actor, ApiKey, EndUser, Tenant
from memoryhub.accounts.permissions import InsufficientScope
from memoryhub.core.errors import api_exception_handler

P = ParamSpec("P")
R = TypeVar("R")

# Hidden from tools/list, and refused when called, unless the operator turns them on.
DESTRUCTIVE_TOOLS = frozenset({"delete_memory", "delete_all_memories"})

INSTRUCTIONS = (
    "MemoryHub remembers the people you talk with. Name a person by the same user_id in every "
    "call (your own id for them, e.g. `telegram:12345`) and a conversation by the same "
    "session_key (e.g. `telegram:chat:42`). Before you answer, call get_context for the "
    "conversation (or search_memories); after each turn, add_messages; keep what should last "
    "with add_memory. Memories have a key you choose; facts have a numeric id: reuse the ids "
    "these tools return, never invent one. Errors carry a `code` (not_found, validation_error "
    "with `fields`, insufficient_scope, conflict, ...)."
)


@dataclass(frozen=True)
class Caller:
    """The credential behind a tool call: its tenant, and the actor its writes are audited as.

    A person-bound token's tenant carries its person (accounts.binding): every lookup narrows
    to them, and a tool naming anyone else gets not_found."""

    api_key: ApiKey | PersonCredential

    @property
    def tenant(self) -> Tenant:
        return self.api_key.tenant

    @property
    def person(self) -> EndUser | None:
        """The person a person-bound token acts for; None for a tenant's key."""
        credential = self.api_key
        return credential.end_user if isinstance(credential, PersonCredential) else None

    @property
    def actor(self) -> Actor:
        return credential_actor(self.api_key)


def caller(ctx: Context[Any, Any], *scopes: str) -> Caller:
    """The authenticated key (or person-bound token) of this call, once it is known to hold
    every scope in `scopes`."""
    # DRF's authentication (views.McpView) left the credential on the Django request as `auth`.
    api_key = getattr(django_request(ctx), "auth", None)
    if not isinstance(api_key, ApiKey | PersonCredential):
        raise exceptions.NotAuthenticated("An API key is required.")
    missing = [scope for scope in scopes if not api_key.has_scope(scope)]
    if missing:
        raise InsufficientScope(f"This API key lacks the scope(s): {', '.join(missing)}.")
    return Caller(api_key)


def _arguments_invalid(error: ArgumentsInvalid) -> exceptions.ValidationError:
    """Arguments that do not fit a tool's schema, named per field as the API names them."""
    fields: dict[str, list[exceptions.ErrorDetail]] = {}
    for item in error.errors():
        name = ".".join(str(part) for part in item["loc"]) or "non_field_errors"
        fields.setdefault(name, []).append(exceptions.ErrorDetail(item["msg"], item["type"]))
    return exceptions.ValidationError(fields)


def error_result(error: Exception) -> CallToolResult:
    """A refusal as a tool error carrying the API's error body (and its code)."""
    if isinstance(error, ArgumentsInvalid):
        error = _arguments_invalid(error)
    # The API's own translation: the same codes, messages and field errors as over REST (an
    # unexpected exception is logged there and answered as `server_error`).
    response = api_exception_handler(error, {})
    body: dict[str, Any] = response.data if response is not None else {}
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(body))],
        structured_content=body,
        is_error=True,
    )


def _destructive_tools_enabled() -> bool:
    enabled: bool = settings.MCP_DESTRUCTIVE_TOOLS
    return enabled


class MemoryHubMCP(MCPServer[Any]):
    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        # Hiding a tool from tools/list does not stop a client calling it by name.
        if name in DESTRUCTIVE_TOOLS and not _destructive_tools_enabled():
            return error_result(
                exceptions.PermissionDenied(
                    "This server does not offer destructive tools (MCP_DESTRUCTIVE_TOOLS).",
                    code="tool_disabled",
                )
            )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            # The SDK wraps what a tool raised (and a schema mismatch of its arguments); an
            # unknown tool has no cause and keeps the SDK's own message.
            if not isinstance(error.__cause__, Exception):
                raise
            return error_result(error.__cause__)


server = MemoryHubMCP(
    name="memoryhub",
    instructions=INSTRUCTIONS,
    middleware=[
        PermittedToolsFilter(
            lambda _user, name: name not in DESTRUCTIVE_TOOLS or _destructive_tools_enabled()
        )
    ],
)


def tool(
    *, title: str, read_only: bool, destructive: bool = False, idempotent: bool = False
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Register a synchronous tool on `server`, named after the function, its docstring the
    description the model reads, with the hints an MCP client shows its user.

    The SDK would run a synchronous tool on a worker thread of its own; run it on the request's
    thread instead (`sync_to_async`, thread-sensitive), like any Django view's code, so that it
    uses the request's database connection, which Django closes or keeps as it does for a view.
    """
    annotations = ToolAnnotations(
        title=title,
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        # Everything a tool touches is MemoryHub's own database.
        open_world_hint=False,
    )

    def register(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        async def on_request_thread(*args: P.args, **kwargs: P.kwargs) -> R:
            return await sync_to_async(function)(*args, **kwargs)

        server.add_tool(on_request_thread, name=function.__name__, annotations=annotations)
        return function

    return register
