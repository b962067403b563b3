"""Pages to take a tenant's memory out (download the export) and to bring memory in (upload a
file, see the dry run's counts, confirm) — the same code as `export_memory`/`import_memory`.

An upload waits for its confirmation (a day at most) in the database, in chunks, under a random
token tied to the tenant it was uploaded for: the confirmation may reach another web replica, on
another machine, and names only that token, so nobody can point the import at another file. Each
request that reads the file copies it to a temporary file of its own, deleted at its end. Large
stores are better imported with the command: the page imports inside the request.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from django import forms
from django.contrib import messages
from django.core.files.uploadedfile import UploadedFile
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render

from memoryhub.accounts.models import AuditAction, User
from memoryhub.accounts.pages import TenantRequest, actor_for_request, tenant_page
from memoryhub.accounts.services import audit_event_record
from memoryhub.transfer.export import export_records
from memoryhub.transfer.formats import reader_for
from memoryhub.transfer.retention import (
    RetentionChoice,
    RetentionSurvey,
    retention_choice_apply,
    retention_survey,
)
from memoryhub.transfer.runner import import_items
from memoryhub.transfer.selectors import pending_upload_file, pending_upload_for_token
from memoryhub.transfer.services import (
    pending_upload_delete,
    pending_upload_store,
    tenant_export_audit,
)
from memoryhub.transfer.types import ImportReport

UPLOAD_MAX_BYTES = 512 * 1024 * 1024
# One database row per MiB of an upload: small enough for any row, few enough rows for 512 MB.
UPLOAD_CHUNK_BYTES = 1024 * 1024
# The formats a single file can hold (basic-session's store is a directory: use the command).
UPLOAD_FORMATS = (
    ("memoryhub", "MemoryHub export (.jsonl, .jsonl.gz, or a person's .json)"),
    ("picobot", "PicoBot sessions.json or its SQLite database"),
    ("bub", "bub tape .jsonl"),
    ("sclaw", "sclaw memory.db"),
)
_SUFFIX = re.compile(r"(\.[a-z0-9]{1,8}){1,2}$")


class ImportUploadForm(forms.Form):
    file = forms.FileField(help_text="Up to 512 MB; larger stores: manage.py import_memory.")
    format = forms.ChoiceField(choices=UPLOAD_FORMATS, initial="memoryhub")

    def clean_file(self) -> object:
        upload = self.cleaned_data["file"]
        if upload.size > UPLOAD_MAX_BYTES:
            raise forms.ValidationError("The file is over 512 MB: use manage.py import_memory.")
        return upload


def _suffix(name: str) -> str:
    """The file name's suffix (".jsonl.gz", ".db"): the readers tell compressed files by it."""
    match = _SUFFIX.search(name.lower())
    return match.group(0) if match else ""


def _pieces(upload: UploadedFile, *, copy: IO[bytes]) -> Iterator[bytes]:
    """The upload in pieces of UPLOAD_CHUNK_BYTES, each also written to `copy` (read, not
    `chunks()`: an upload held in memory gives its chunks as one piece, whatever the size)."""
    upload.seek(0)
    while piece := upload.read(UPLOAD_CHUNK_BYTES):
        copy.write(piece)
        yield piece


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
        upload = form.cleaned_data["file"]
        source = form.cleaned_data["format"]
        # Stored and copied in one pass: this request's dry run reads the copy, not the rows.
        with tempfile.NamedTemporaryFile(
            prefix="memoryhub-upload-", suffix=_suffix(upload.name)
        ) as copy:
            pending = pending_upload_store(
                tenant=request.tenant,
                source=source,
                name=upload.name,
                chunks=_pieces(upload, copy=copy),
                # Always a signed-in User here (tenant_page); the check is for the type.
                created_by=request.user if isinstance(request.user, User) else None,
            )
            copy.flush()
            return _confirm_page(
                request, path=Path(copy.name), token=pending.token, source=source, name=pending.name
            )
    return render(request, "web/import_upload.html", {"form": form})


@tenant_page(editor=True)
def import_confirm(request: TenantRequest) -> HttpResponse:
    if request.method != "POST":
        return redirect("web:import")
    # The format and the name are the upload's own: the page's hidden fields only echo them.
    pending = pending_upload_for_token(tenant=request.tenant, token=request.POST.get("token", ""))
    if pending is None or pending.source not in dict(UPLOAD_FORMATS):
        messages.error(request, "That upload is gone (kept for a day): upload the file again.")
        return redirect("web:import")
    source = pending.source
    with pending_upload_file(upload=pending, suffix=_suffix(pending.name)) as path:
        # Read again: the windows may have changed since the confirmation page was shown.
        survey = _survey(request, path=path, source=source)
        posted_choice = request.POST.get("retention", "")
        choice = RetentionChoice(posted_choice) if posted_choice in RetentionChoice.values else None
        if survey.outside and choice is None:
            return _confirm_page(
                request,
                path=path,
                token=pending.token,
                source=source,
                name=pending.name,
                error="Some of this file is older than the retention windows: choose what to do "
                "with it.",
            )
        # Claimed by deleting it, before anything is written: a second confirmation of the same
        # upload (a double click, a retry through another replica) finds it gone, and a failed
        # import leaves no upload behind either (upload the file again).
        if not pending_upload_delete(upload=pending):
            messages.error(request, "That upload is gone (kept for a day): upload the file again.")
            return redirect("web:import")
        retention_done: list[str] = []
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
