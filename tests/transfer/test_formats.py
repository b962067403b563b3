"""The import formats are named after the product whose store they read; the names they had
before (seed000, seed001, seed003, seed004) still work, for the command and the import page, and
an import remembers the format's own name, so a re-run under either name adds nothing."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command

from memoryhub.transfer.formats import ALIASES, FORMATS, format_name, reader_for
from memoryhub.transfer.formats.base import Unreadable, parse_time, required_time
from memoryhub.transfer.models import ImportedRecord
from memoryhub.web.transfer import ImportUploadForm
from sessions_app.models import Session

FIXTURES = Path(__file__).parent / "fixtures"


def run_import(path: Path, *, tenant, fmt: str) -> list[str]:
    out = io.StringIO()
    options = ["--tenant", tenant.slug, "--format", fmt, "--no-progress"]
    call_command("import_memory", str(path), *options, stdout=out)
    return out.getvalue().splitlines()


@pytest.mark.parametrize(("alias", "name"), sorted(ALIASES.items()))
def test_an_old_name_reads_with_its_formats_reader(alias, name):
    assert name in FORMATS
    assert format_name(alias) == format_name(name) == name
    assert reader_for(alias) is reader_for(name)


def test_a_name_that_is_neither_is_refused():
    with pytest.raises(KeyError):
        format_name("seed002")


def test_an_import_under_an_old_name_is_the_same_import_as_under_the_new(tenant):
    first = run_import(FIXTURES / "basic_session" / "good", tenant=tenant, fmt="seed000")

    again = run_import(FIXTURES / "basic_session" / "good", tenant=tenant, fmt="basic-session")

    assert first[0] == "sessions: imported 3, already there 0, skipped 0"
    assert again[0] == "sessions: imported 0, already there 3, skipped 0"
    assert set(ImportedRecord.objects.values_list("source", flat=True)) == {"basic-session"}


def test_the_import_page_offers_the_new_names():
    choices = [name for name, _ in ImportUploadForm().fields["format"].choices]

    # basic-session's store is a directory: it is imported with the command.
    assert choices == ["memoryhub", "picobot", "bub", "sclaw"]


def test_a_confirmation_posted_with_an_old_name_imports(member_client, tenant):
    client = member_client(tenant)
    snapshot = (FIXTURES / "picobot" / "good" / "sessions.json").read_bytes()
    checked = client.post(
        "/import/",
        {"file": SimpleUploadedFile("sessions.json", snapshot), "format": "picobot"},
    )

    done = client.post("/import/confirm/", {"token": checked.context["token"], "source": "seed001"})

    assert done.status_code == 200
    assert Session.objects.filter(tenant=tenant).exists()
    assert set(ImportedRecord.objects.values_list("source", flat=True)) == {"picobot"}


# --- the one time parser every format reads with -------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-03-01T09:30:00Z", dt.datetime(2025, 3, 1, 9, 30, tzinfo=dt.UTC)),
        (  # Go's RFC 3339 with nanoseconds: cut to microseconds
            "2025-03-01T09:30:00.123456789Z",
            dt.datetime(2025, 3, 1, 9, 30, 0, 123456, tzinfo=dt.UTC),
        ),
        (
            "2025-03-01T10:30:00+01:00",
            dt.datetime(2025, 3, 1, 10, 30, tzinfo=dt.timezone(dt.timedelta(hours=1))),
        ),
        ("2025-03-01 09:30:00", dt.datetime(2025, 3, 1, 9, 30, tzinfo=dt.UTC)),  # SQLite's
        (" 2025-03-01T09:30:00 \n", dt.datetime(2025, 3, 1, 9, 30, tzinfo=dt.UTC)),
        ("yesterday", None),
        ("", None),
    ],
)
def test_parse_time_reads_what_the_stores_write_as_aware_times(text, expected):
    parsed = parse_time(text=text)

    assert parsed == expected
    assert parsed is None or parsed.tzinfo is not None


def test_a_required_time_that_is_not_one_is_unreadable_with_the_reason():
    with pytest.raises(Unreadable, match=r"^created_at 'soon' is not an ISO 8601 time\.$"):
        required_time(text="soon", what="created_at")
