"""Issue 14 item 16: a Content-Security-Policy on pages (and pages that keep to it), HSTS for a
year in production, and the headers `check --deploy` does not ask for."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from memoryhub.accounts.models import MembershipRole

ROOT = Path(__file__).resolve().parents[1]
PRODUCTION = {
    "PATH": "/usr/bin:/bin",
    "DJANGO_SETTINGS_MODULE": "memoryhub.settings",
    "DJANGO_DEBUG": "false",
    "DJANGO_SECRET_KEY": "tests-only-0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefgh",
}

INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>", re.I)
INLINE_HANDLER = re.compile(r"<[^>]*\son[a-z]+\s*=", re.I)
INLINE_STYLE = re.compile(r"<style\b|<[^>]*\sstyle\s*=", re.I)


def _directives(header: str) -> dict[str, list[str]]:
    parts = (part.strip().split() for part in header.split(";") if part.strip())
    return {name: values for name, *values in parts}


@pytest.fixture
def owner(tenant, member_client):
    return member_client(tenant, MembershipRole.OWNER)


def test_pages_carry_a_strict_content_security_policy(owner):
    policy = _directives(owner.get("/")["Content-Security-Policy"])

    assert policy["default-src"] == ["'self'"]
    assert policy["script-src"] == ["'self'"]
    assert policy["style-src"] == ["'self'"]
    assert policy["img-src"] == ["'self'", "data:"]
    assert policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["form-action"] == ["'self'"]
    assert policy["base-uri"] == ["'self'"]


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/sessions/",
        "/sessions/{session}/",
        "/people/",
        "/search/?q=hello",
        "/tenant/audit/",
        "/tenant/policy/",
        "/tenant/keys/",
        "/import/",
        "/sessions/{session}/context/",
    ],
)
def test_rendered_pages_hold_no_inline_script_handler_or_style(owner, session, path):
    response = owner.get(path.format(session=session.pk))
    html = response.content.decode()

    assert response.status_code == 200
    assert INLINE_SCRIPT.findall(html) == []
    assert INLINE_HANDLER.findall(html) == []
    assert INLINE_STYLE.findall(html) == []


def test_no_template_holds_inline_script_handler_or_style():
    found = {}
    for template in (ROOT / "templates").rglob("*.html"):
        text = template.read_text()
        hits = INLINE_SCRIPT.findall(text) + INLINE_HANDLER.findall(text)
        hits += INLINE_STYLE.findall(text)
        if hits:
            found[str(template.relative_to(ROOT))] = hits

    assert found == {}


def test_the_login_page_and_the_lockout_page_carry_it_too(client, db):
    assert "script-src 'self'" in client.get("/login/")["Content-Security-Policy"]


def test_the_api_still_answers_plain_json(api):
    response = api.get("/api/v1/sessions/")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json()["results"] == []
    # Harmless on JSON, and it forbids framing a response anywhere.
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]


def test_the_api_docs_load_their_script_from_a_file_and_only_loosen_styles(client):
    page = client.get("/api/docs/")
    script = client.get("/api/docs/?script=")
    policy = _directives(page["Content-Security-Policy"])

    assert page.status_code == 200
    assert INLINE_SCRIPT.findall(page.content.decode()) == []
    assert policy["script-src"] == ["'self'"]
    assert policy["style-src"] == ["'self'", "'unsafe-inline'"]
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert b"SwaggerUIBundle" in script.content


def test_every_response_carries_the_other_security_headers(client, db):
    response = client.get("/login/")

    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"
    assert "camera=()" in response["Permissions-Policy"]
    assert "microphone=()" in response["Permissions-Policy"]


def test_https_responses_carry_hsts_for_a_year(client, db):
    assert client.get("/healthz", secure=True)["Strict-Transport-Security"] == (
        "max-age=31536000; includeSubDomains"
    )
    assert "Strict-Transport-Security" not in client.get("/healthz")


def _setting(names: str, **env: str) -> str:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            f"print(*[getattr(settings, n) for n in {names.split()!r}])",
        ],
        cwd=ROOT,
        env={**PRODUCTION, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


@pytest.mark.slow
def test_production_defaults_hsts_to_a_year_and_it_is_configurable():
    names = "SECURE_HSTS_SECONDS SECURE_HSTS_INCLUDE_SUBDOMAINS SECURE_HSTS_PRELOAD"

    assert _setting(names) == "31536000 True False"
    assert _setting(names, DJANGO_SECURE_HSTS_SECONDS="600") == "600 True False"
    assert _setting(names, DJANGO_DEBUG="true") == "0 False False"


@pytest.mark.slow
def test_check_deploy_passes_with_production_settings():
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=PRODUCTION,
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
