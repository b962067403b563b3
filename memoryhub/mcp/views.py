"""`POST /mcp/`: the MCP endpoint, behind the REST API's own authentication.

DRF authenticates the request as it does for every API view (`Authorization: Bearer mh_…`, the
failed-key limit, the per-key rate), so a missing or wrong key is the API's 401 before any MCP
message is read. django-stateless-mcp then serves the MCP server as an ordinary Django view:
stateless streamable HTTP, one JSON response per POST, under the same gunicorn sync workers.
"""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.http import HttpResponseBase
from django_stateless_mcp import mcp_view
from drf_spectacular.utils import extend_schema
from rest_framework import permissions
from rest_framework.request import Request
from rest_framework.views import APIView

import memoryhub.mcp.tools  # noqa: F401 (registers the tools on the server)
from memoryhub.mcp.server import server

_served = mcp_view(server)


class McpView(APIView):
    # Any valid key may talk MCP; each tool asks for its own scopes (a read-only key can
    # search, not write).
    permission_classes = [permissions.IsAuthenticated]

    # Not part of the REST API's schema: MCP clients read the tools from the server itself.
    @extend_schema(exclude=True)
    def post(self, request: Request) -> HttpResponseBase:
        # The Django request carries the key DRF found (`auth`) to the tools; its body is
        # still unread (DRF parses only on access to request.data).
        return async_to_sync(_served)(request._request)
