"""Pages to take a tenant's memory out (download the export) and to bring memory in (upload a
file, see the dry run's counts, confirm) — the same code as `export_memory`/`import_memory`.

An upload is kept in a private folder until it is confirmed (or for a day at most), under a
random name tied to the tenant it was uploaded for; the confirmation names only that token, so
nobody can point the import at another file. Large stores are better imported with the command:
the page imports inside the request.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render

from memoryhub.accounts.models import AuditAction
from memoryhub.accounts.pages import TenantRequest, actor_for_request, tenant_page
from memoryhub.accounts.services import audit_event_record
from memoryhub.transfer.export import export_records
from memoryhub.transfer.formats import ALIASES, reader_for
from memoryhub.transfer.retention import (
    RetentionChoice,
    RetentionSurvey,
    retention_choice_apply,
    retention_survey,
)
from memoryhub.transfer.runner import import_items
from memoryhub.transfer.services import tenant_export_audit
from memoryhub.transfer.types import ImportReport

UPLOAD_MAX_BYTES = 512 * 1024 * 1024
UPLOAD_KEEP = dt.timedelta(days=1)
# The formats a single file can hold (basic-session's store is a directory: use the command).
UPLOAD_FORMATS = (
    ("memoryhub", "MemoryHub export (.jsonl, .jsonl.gz, or a person's .json)"),
    ("picobot", "PicoBot sessions.json or its SQLite database"),
    ("bub", "bub tape .jsonl"),
    ("sclaw", "sclaw memory.db"),
)
_SUFFIX = re.compile(r"(\.[a-z0-9]{1,8}){1,2}$")
_TOKEN = re.compile(r"^[0-9a-f]{32}$")


class ImportUploadForm(forms.Form):
    file = forms.FileField(help_text="Up to 512 MB; larger stores: manage.py import_memory.")
    format = forms.ChoiceField(choices=UPLOAD_FORMATS, initial="memoryhub")

    def clean_file(self) -> object:
        upload = self.cleaned_data["file"]
        if upload.size > UPLOAD_MAX_BYTES:
            raise forms.ValidationError("The file is over 512 MB: use manage.py import_memory.")
        return upload


def _upload_folder() -> Path:
    folder = Path(settings.CELERY_DATA_DIR).parent / ".uploads"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _forget_old_uploads(folder: Path) -> None:
    cutoff = time.time() - UPLOAD_KEEP.total_seconds()
    for path in folder.iterdir():
        if path.is_file() and path.stat().st_mtime < cutoff:
            path.unlink(missing_ok=True)


def _upload_path(*, tenant_id: int, token: str, suffix: str) -> Path:
    return _upload_folder() / f"{tenant_id}-{token}{suffix}"


def _find_upload(*, tenant_id: int, token: str) -> Path | None:
    if not _TOKEN.match(token):
        return None
    return next(iter(sorted(_upload_folder().glob(f"{tenant_id}-{token}*"))), None)


def _run(
    request: TenantRequest, *, path: Path, source: str, dry_run: bool, pin: bool = False
) -> ImportReport:
    return import_items(
        tenant=request.tenant,
        source=source,
        items=reader_for(source)(path),
        dry_run=dry_run,
        pin=pin,
    )


def _survey(request: TenantRequest, *, path: Path, source: str) -> RetentionSurvey:
    """What of the file falls outside the tenant's retention windows (read before writing)."""
    return retention_survey(tenant=request.tenant, source=source, items=reader_for(source)(path))


def _confirm_page(
    request: TenantRequest, *, path: Path, token: str, source: str, name: str, error: str = ""
) -> HttpResponse:
    """The dry run's counts and the retention survey, with the choice it calls for."""
    report = _run(request, path=path, source=source, dry_run=True)
    survey = _survey(request, path=path, source=source)
    return render(
        request,
        "web/import_confirm.html",
        {
            "report": report,
            "survey": survey,
            "retention_choices": RetentionChoice.choices,
            "retention_error": error,
            "token": token,
            "source": source,
            "name": name,
        },
        status=400 if error else 200,
    )


@tenant_page(editor=True)
def import_upload(request: TenantRequest) -> HttpResponse:
    """Upload and dry-run (nothing is kept but the file), then show the counts to confirm."""
    form = ImportUploadForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        folder = _upload_folder()
        _forget_old_uploads(folder)
        upload = form.cleaned_data["file"]
        match = _SUFFIX.search(upload.name.lower())
        token = uuid.uuid4().hex
        path = _upload_path(
            tenant_id=request.tenant.pk, token=token, suffix=match.group(0) if match else ""
        )
        with path.open("wb") as handle:
            for chunk in upload.chunks():
                handle.write(chunk)
        source = form.cleaned_data["format"]
        return _confirm_page(request, path=path, token=token, source=source, name=upload.name)
    return render(request, "web/import_upload.html", {"form": form})


@tenant_page(editor=True)
def import_confirm(request: TenantRequest) -> HttpResponse:
    if request.method != "POST":
        return redirect("web:import")
    token = request.POST.get("token", "")
    # A page rendered before the formats were renamed may still post an old alias.
    posted = request.POST.get("source", "")
    source = ALIASES.get(posted, posted)
    path = _find_upload(tenant_id=request.tenant.pk, token=token)
    if path is None or source not in dict(UPLOAD_FORMATS):
        messages.error(request, "That upload is gone (kept for a day): upload the file again.")
        return redirect("web:import")
    # Read again: the windows may have changed since the confirmation page was shown.
    survey = _survey(request, path=path, source=source)
    posted_choice = request.POST.get("retention", "")
    choice = RetentionChoice(posted_choice) if posted_choice in RetentionChoice.values else None
    if survey.outside and choice is None:
        return _confirm_page(
            request,
            path=path,
            token=token,
            source=source,
            name=request.POST.get("name", ""),
            error="Some of this file is older than the retention windows: choose what to do "
            "with it.",
        )
    retention_done: list[str] = []
    try:
        if survey.outside and choice is not None:
            retention_done = retention_choice_apply(
                tenant=request.tenant,
                survey=survey,
                choice=choice,
                actor=actor_for_request(request),
            )
        report = _run(
            request,
            path=path,
            source=source,
            dry_run=False,
            pin=survey.outside and choice == RetentionChoice.PIN,
        )
    finally:
        path.unlink(missing_ok=True)
    audit_event_record(
        tenant=request.tenant,
        actor=actor_for_request(request),
        action=AuditAction.CREATE,
        object_type="import",
        object_id=source,
        counts=dict(report.imported),
        detail={
            "skipped": len(report.skipped),
            "changed": len(report.changed),
            "already_there": dict(report.already_there),
            "retention": {
                "outside": survey.outside,
                "choice": choice.value if survey.outside and choice is not None else None,
            },
        },
    )
    return render(
        request,
        "web/import_done.html",
        {"report": report, "source": source, "retention_done": retention_done},
    )


@tenant_page()
def export_download(request: TenantRequest) -> StreamingHttpResponse:
    """The tenant's whole memory as MemoryHub's JSON Lines, streamed as it is read."""
    tenant = request.tenant
    actor = actor_for_request(request)

    def lines() -> Iterator[str]:
        count = 0
        for record in export_records(tenant=tenant):
            count += 1
            yield json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        tenant_export_audit(tenant=tenant, end_user=None, actor=actor, records=count)

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    response = StreamingHttpResponse(lines(), content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{tenant.slug}-{stamp}.jsonl"'
    return response
