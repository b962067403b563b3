"""The person page's credentials section: mint a person-bound token, list the active ones,
revoke one. An htmx section of `people/<user_id>/` (its routes are in people.page_urls); the
minted token is shown once, in the answer to the mint."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from memoryhub.accounts.models import EndUser
from memoryhub.accounts.pages import TenantRequest, actor_for_request, tenant_page
from memoryhub.accounts.selectors import end_user_get_for_tenant
from memoryhub.core.errors import InvalidInput, ResourceNotFound
from memoryhub.credentials import selectors, services

TEMPLATE = "credentials/tokens_section.html"


class TokenMintForm(forms.Form):
    ttl_minutes = forms.IntegerField(min_value=1, initial=15, label="Lifetime (minutes)")
    scopes = forms.MultipleChoiceField(
        choices=[(scope, scope) for scope in services.TOKEN_SCOPES],
        initial=["read", "write"],
        widget=forms.CheckboxSelectMultiple,
        help_text=(
            "purge lets the token erase its own person; global-memory write tenant-wide memory."
        ),
    )

    def clean_ttl_minutes(self) -> int:
        minutes: int = self.cleaned_data["ttl_minutes"]
        longest = settings.MEMORYHUB_PERSON_TOKEN_MAX_TTL_SECONDS // 60
        if minutes > longest:
            raise forms.ValidationError(f"At most {longest} minutes.")
        return minutes


def _person(request: TenantRequest, user_id: str) -> EndUser:
    from django.http import Http404

    try:
        return end_user_get_for_tenant(tenant=request.tenant, external_id=user_id)
    except ResourceNotFound:
        raise Http404("No such person.") from None


def _section(
    request: TenantRequest, end_user: EndUser, *, form: TokenMintForm | None = None, **more: Any
) -> HttpResponse:
    context = {
        "end_user": end_user,
        "tokens": list(
            selectors.person_tokens_active(tenant=request.tenant, end_user=end_user)[:50]
        ),
        "mint_form": form or TokenMintForm(),
        **more,
    }
    return render(request, TEMPLATE, context)


@require_GET
@tenant_page()
def tokens_section(request: TenantRequest, user_id: str) -> HttpResponse:
    return _section(request, _person(request, user_id))


@require_POST
@tenant_page(editor=True)
def token_mint(request: TenantRequest, user_id: str) -> HttpResponse:
    end_user = _person(request, user_id)
    form = TokenMintForm(request.POST)
    if not form.is_valid():
        return _section(request, end_user, form=form)
    try:
        minted = services.person_token_mint(
            tenant=request.tenant,
            end_user=end_user,
            scopes=sorted(form.cleaned_data["scopes"]),
            ttl_seconds=form.cleaned_data["ttl_minutes"] * 60,
            actor=actor_for_request(request),
        )
    except InvalidInput as error:
        form.add_error(None, error.message)
        return _section(request, end_user, form=form)
    return _section(request, end_user, minted=minted)


@require_POST
@tenant_page(editor=True)
def token_revoke(request: TenantRequest, user_id: str, jti: str) -> HttpResponse:
    end_user = _person(request, user_id)
    try:
        token = selectors.person_token_get(tenant=request.tenant, jti=jti)
    except ResourceNotFound:
        token = None
    if token is None or token.end_user_id != end_user.pk:
        from django.http import Http404

        raise Http404("No such token.")
    services.person_token_revoke(token=token, actor=actor_for_request(request))
    return _section(request, end_user, revoked=jti)
