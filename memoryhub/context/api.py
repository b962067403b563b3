"""`GET /sessions/{id}/context/`: what a bot should put in front of its model, within a budget."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from memoryhub.accounts.api import TenantScopedAPIView
from memoryhub.context import (
    render_markdown,
    render_messages,
)
from memoryhub.context.session_context import session_context_for_tenant
from memoryhub.core.fields import StrictCharField, plain_integer, plain_text
from memoryhub.core.search import MAX_QUERY_CHARS
from sessions_app.api.views import NOT_FOUND, SESSION_ID_PARAMETER

MAX_TOKENS_RANGE = (200, 200_000)
MAX_MESSAGES_RANGE = (0, 500)
MAX_FACTS_RANGE = (0, 100)
FACTS_MAX_TOKENS_RANGE = (0, MAX_TOKENS_RANGE[1])


class ContextQuerySerializer(serializers.Serializer[Any]):
    max_tokens = serializers.IntegerField(
        required=False, min_value=MAX_TOKENS_RANGE[0], max_value=MAX_TOKENS_RANGE[1]
    )
    max_messages = serializers.IntegerField(
        required=False, min_value=MAX_MESSAGES_RANGE[0], max_value=MAX_MESSAGES_RANGE[1]
    )
    max_memories = serializers.IntegerField(required=False, min_value=0, max_value=500)
    max_facts = serializers.IntegerField(
        required=False,
        min_value=MAX_FACTS_RANGE[0],
        max_value=MAX_FACTS_RANGE[1],
        help_text=(
            "How many of the best matching facts are considered (seed 004's MaxFacts): the "
            "person's first, then the tenant-wide ones. Default 10; 0: no facts."
        ),
    )
    facts_max_tokens = serializers.IntegerField(
        required=False,
        min_value=FACTS_MAX_TOKENS_RANGE[0],
        max_value=FACTS_MAX_TOKENS_RANGE[1],
        help_text=(
            "The facts section's own share of max_tokens, its title included (seed 004's "
            "MaxTokens): facts are added in rank order while they fit. Default: no share of "
            "its own, only max_tokens."
        ),
    )
    query = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=MAX_QUERY_CHARS,
        help_text=(
            "Picks the relevant facts and earlier turns; without it the latest user message does."
        ),
    )
    format = serializers.ChoiceField(choices=["markdown", "messages"], default="markdown")


# The query string the way nearly every call sends it, read without the serializer (which cost
# ~0.5 ms a call): each value one the serializer takes as it is. Anything else (a value out of
# range or of another shape, a query with characters it refuses) goes to the serializer, so
# what it accepts, and every 400 it answers, stays its own.
_INTEGER_PARAMETERS = {
    "max_tokens": MAX_TOKENS_RANGE,
    "max_messages": MAX_MESSAGES_RANGE,
    "max_memories": (0, 500),
    "max_facts": MAX_FACTS_RANGE,
    "facts_max_tokens": FACTS_MAX_TOKENS_RANGE,
}
_FORMATS = frozenset({"markdown", "messages"})


def _plain_query(params: Mapping[str, str]) -> dict[str, Any] | None:
    """ContextQuerySerializer's validated_data for a query string it would take as it is, else
    None. A repeated parameter counts by its last value, as for the serializer."""
    validated: dict[str, Any] = {}
    for name, (low, high) in _INTEGER_PARAMETERS.items():
        raw = params.get(name)
        if raw is None:
            continue
        number = plain_integer(raw, low=low, high=high)
        if number is None:
            return None
        validated[name] = number
    query = params.get("query")
    if query is not None:
        text = plain_text(query, max_length=MAX_QUERY_CHARS, allow_blank=True)
        if text is None:
            return None
        validated["query"] = text
    format_ = params.get("format", "markdown")
    if format_ not in _FORMATS:
        return None
    validated["format"] = format_
    return validated


def context_query_validated(params: Mapping[str, str]) -> dict[str, Any]:
    """The context call's query string, validated as ContextQuerySerializer validates it (its
    ValidationError, hence the same 400, for what it refuses)."""
    plain = _plain_query(params)
    if plain is not None:
        return plain
    serializer = ContextQuerySerializer(data=params)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class ContextSectionSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    tokens = serializers.IntegerField()
    included = serializers.ListField(child=serializers.CharField())
    dropped = serializers.ListField(
        child=serializers.DictField(child=serializers.CharField()),
        help_text='[{"item": "message:12", "reason": "budget"}, ...]',
    )


class ContextOutputSerializer(serializers.Serializer[Any]):
    format = serializers.CharField()
    content = serializers.CharField(
        allow_null=True, help_text="format=markdown: a <memory> block for the system prompt."
    )
    messages = serializers.ListField(
        child=serializers.DictField(),
        allow_null=True,
        help_text="format=messages: an OpenAI-style messages array, ready to send.",
    )
    tokens = serializers.IntegerField(
        help_text="Tokens of what is returned; never above max_tokens."
    )
    max_tokens = serializers.IntegerField()
    memory_enabled = serializers.BooleanField(
        help_text="False when the agent's memory policy turns memory off: the context is empty."
    )
    sections = ContextSectionSerializer(many=True)


class SessionContextView(TenantScopedAPIView):
    @extend_schema(
        operation_id="sessions_context",
        summary="The context for the session's next model call, within a token budget",
        description=(
            "Tenant-wide and personal memories, the facts relevant to `query` (or to the latest "
            "user message; the person's first, then the tenant-wide ones, under `## Relevant "
            "Memory` as seed 004 injects them), notes (long-term, today, the last 7 days), "
            "relevant history (the person's earlier turns that match, from other sessions and "
            "this one's older part, dated, the best with their neighbours, within the policy's "
            "share), the summary when older history is left out, and the most recent messages "
            "verbatim, cut only between whole exchanges (a tool call is never without its "
            "results, nor a result without its call, in either format). Each section reports "
            "what it included, what it dropped and why, and its tokens (the `history` section "
            "only when there were candidates). Defaults come from the tenant's memory policy "
            "(4000 tokens, 20 messages, 50 memories, 1500 history tokens); 10 facts."
        ),
        parameters=[SESSION_ID_PARAMETER, ContextQuerySerializer],
        responses={200: ContextOutputSerializer, 404: NOT_FOUND},
    )
    def get(self, request: Request, session_id: str) -> Response:
        params = context_query_validated(request.query_params)
        built = session_context_for_tenant(
            tenant=self.tenant,
            session_id=session_id,
            max_tokens=params.get("max_tokens"),
            max_messages=params.get("max_messages"),
            max_memories=params.get("max_memories"),
            max_facts=params.get("max_facts"),
            facts_max_tokens=params.get("facts_max_tokens"),
            query=params.get("query", ""),
        )
        context = built.context
        as_markdown = params["format"] == "markdown"
        return Response(
            {
                "format": params["format"],
                "content": render_markdown(context) if as_markdown else None,
                "messages": None if as_markdown else render_messages(context),
                "tokens": context.markdown_tokens if as_markdown else context.messages_tokens,
                "max_tokens": context.max_tokens,
                "memory_enabled": built.memory_enabled,
                "sections": [
                    {
                        "name": section.name,
                        "tokens": section.tokens,
                        "included": section.included,
                        "dropped": [
                            {"item": item, "reason": reason} for item, reason in section.dropped
                        ],
                    }
                    for section in context.sections
                ],
            }
        )
