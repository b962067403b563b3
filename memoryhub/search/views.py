"""The search page (/search/, `search_pages:search`): one box across a tenant's facts and messages.

It reads both apps (facts_app's fact_search, sessions_app's message_search), so it lives here
rather than in facts_app (which must not import sessions_app); facts_app/urls.py routes to it.
The filters are the API's (GET /facts/search/ and GET /messages/search/): the person applies to
both kinds, tags/metadata/dates/superseded to facts, session and role to messages. Ranked hits
come best first, `top_k` of each kind (at most 100, as in the API); a "more" link asks for more.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from django import forms
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone

from facts_app.forms import TOP_K_MAX, FactFilterForm
from facts_app.models import Fact
from facts_app.selectors.facts import fact_search
from memoryhub.accounts.models import Tenant
from memoryhub.accounts.pages import TenantRequest, tenant_page
from memoryhub.accounts.selectors import end_user_get_for_tenant
from memoryhub.core.errors import InvalidInput, ResourceNotFound
from memoryhub.core.pages import htmx_partial
from memoryhub.core.search import EmptySearchQuery
from sessions_app.models import Message, MessageRole, Session
from sessions_app.recall import Mode, RecalledMessage, messages_search
from sessions_app.selectors import session_get_for_tenant

TOP_K_STEPS = (10, 25, 50, TOP_K_MAX)


class Scope:
    ALL = "all"
    FACTS = "facts"
    MESSAGES = "messages"
    CHOICES = ((ALL, "Facts and messages"), (FACTS, "Facts only"), (MESSAGES, "Messages only"))


class SearchForm(FactFilterForm):
    scope = forms.ChoiceField(label="In", choices=Scope.CHOICES, required=False)
    session_id = forms.UUIDField(
        label="Session id", required=False, help_text="Messages of this session only."
    )
    role = forms.ChoiceField(
        label="Role", choices=[("", "Any"), *MessageRole.choices], required=False
    )
    mode = forms.ChoiceField(
        label="Messages by",
        choices=[
            ("hybrid", "Words and meaning"),
            ("lexical", "Words only"),
            ("semantic", "Meaning only"),
        ],
        required=False,
        help_text="Meaning needs a person (or a session that has one).",
    )

    def __init__(self, *args: Any, tenant: Tenant, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tenant = tenant

    def clean_user_id(self) -> str:
        # As in the API, an unknown person is not an empty result: here it is a field error.
        value = super().clean_user_id()
        if value:
            try:
                end_user_get_for_tenant(tenant=self.tenant, external_id=value)
            except ResourceNotFound:
                raise forms.ValidationError("No one with this id in this tenant.") from None
        return value

    def clean_session_id(self) -> uuid.UUID | None:
        value: uuid.UUID | None = self.cleaned_data.get("session_id")
        if value is not None:
            try:
                session_get_for_tenant(tenant=self.tenant, session_id=value)
            except ResourceNotFound:
                raise forms.ValidationError("No such session in this tenant.") from None
        return value

    def scope_value(self) -> str:
        return self.cleaned_data.get("scope") or Scope.ALL

    def filters_used(self) -> bool:
        data: dict[str, Any] = getattr(self, "cleaned_data", {})
        if self.errors:
            return True
        return self.fact_filters_used() or any(
            data.get(name) for name in ("user_id", "session_id", "role")
        )


def person_url(external_id: str) -> str:
    return f"/people/{quote(external_id, safe='')}/"


@dataclass(frozen=True)
class FactResult:
    fact: Fact
    score: float
    person_url: str | None
    superseded: bool
    source_url: str | None


@dataclass(frozen=True)
class MessageResult:
    message: Message | RecalledMessage  # the template reads the same attributes of either
    score: float
    url: str
    session_url: str
    person: str | None
    person_url: str | None


def _mode(form: SearchForm) -> Mode:
    data = form.cleaned_data
    mode: Mode = data.get("mode") or "hybrid"
    if mode == "semantic" and not (data.get("user_id") or data.get("session_id")):
        return "hybrid"  # meaning needs one person's history; the words still search all
    return mode


def _fact_results(form: SearchForm, tenant: Tenant, top_k: int) -> list[FactResult]:
    mode = _mode(form)
    if mode == "semantic" and not form.cleaned_data.get("user_id"):
        mode = "hybrid"  # facts are a person's by user_id only
    hits = fact_search(
        tenant=tenant,
        query=form.cleaned_data["q"],
        filters=form.fact_filters(),
        top_k=top_k,
        mode=mode,
    )
    now = timezone.now()
    results = []
    for hit in hits:
        fact = hit.fact
        results.append(
            FactResult(
                fact=fact,
                score=hit.score,
                person_url=person_url(fact.end_user.external_id) if fact.end_user else None,
                superseded=fact.superseded_by_id is not None
                or (fact.valid_until is not None and fact.valid_until <= now),
                source_url=f"/sessions/{fact.source_session_id}/"
                if fact.source_session_id
                else None,
            )
        )
    return results


def _message_results(form: SearchForm, tenant: Tenant, top_k: int) -> list[MessageResult]:
    data = form.cleaned_data
    found = messages_search(
        tenant=tenant,
        query=data["q"],
        mode=_mode(form),
        user_id=data.get("user_id") or None,
        session_id=data.get("session_id"),
        role=data.get("role") or None,
        top_k=top_k,
    )
    # Who each hit's session belongs to, in one query for all of them.
    owners = dict(
        Session.objects.for_tenant(tenant)
        .filter(pk__in={item.message.session_id for item in found.hits})
        .values_list("pk", "end_user__external_id")
    )
    results = []
    for item in found.hits:
        message = item.message
        person = owners.get(message.session_id)
        session_url = f"/sessions/{message.session_id}/"
        results.append(
            MessageResult(
                message=message,
                score=item.hit.score,
                url=f"{session_url}#seq-{message.seq}",
                session_url=session_url,
                person=person,
                person_url=person_url(person) if person else None,
            )
        )
    return results


def _more_top_k(top_k: int) -> int | None:
    bigger = [step for step in TOP_K_STEPS if step > top_k]
    return bigger[0] if bigger else None


@tenant_page()
def search_page(request: TenantRequest) -> HttpResponse:
    tenant = request.tenant
    form = SearchForm(request.GET or None, tenant=tenant)
    context: dict[str, Any] = {"form": form, "searched": False}
    if form.is_bound and form.is_valid() and form.cleaned_data["q"]:
        scope, top_k = form.scope_value(), form.top_k_value()
        try:
            facts = _fact_results(form, tenant, top_k) if scope != Scope.MESSAGES else None
            messages = _message_results(form, tenant, top_k) if scope != Scope.FACTS else None
        except EmptySearchQuery as error:
            form.add_error("q", str(error))
        except InvalidInput as error:
            # A person whose history is too large for the in-process index (history_too_large).
            form.add_error(None, error.message)
        else:
            full = any(found is not None and len(found) >= top_k for found in (facts, messages))
            more = _more_top_k(top_k) if full else None
            context.update(
                searched=True,
                fact_hits=facts,
                message_hits=messages,
                top_k=top_k,
                more_top_k=more,
            )
    context["filters_open"] = form.is_bound and form.filters_used()
    template = "search/partials/panel.html" if htmx_partial(request) else "search/page.html"
    return render(request, template, context)
