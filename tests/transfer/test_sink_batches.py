"""What keeps an import fast (issue 18) without changing what it stores: a session's messages go
in one statement per chunk, not one per message, the redaction policy is asked once per import (and
again after the import brings a policy), and embedding is requested per batch of committed
sessions, never for a rejected one nor in a dry run."""

from __future__ import annotations

import dataclasses
from unittest import mock

from django.db import connection
from django.test.utils import CaptureQueriesContext

from memoryhub.accounts.models import RedactionMode
from memoryhub.transfer import sink as sink_module
from memoryhub.transfer.runner import import_items
from memoryhub.transfer.types import ImportedMessage, ImportedPolicy, Origin
from sessions_app.models import Message, Session
from tests.transfer.test_sink import T0, a_session


def _queries(tenant, item) -> int:
    with CaptureQueriesContext(connection) as queries:
        report = import_items(tenant=tenant, source="test", items=[item])
    assert dict(report.imported) == {"sessions": 1}, report.skipped
    return len(queries)


def test_a_session_costs_the_same_queries_for_5_messages_as_for_90(tenant):
    import_items(tenant=tenant, source="test", items=[a_session("warm-up")])  # the person exists

    # 90 rows of 11 values fit one statement even under SQLite's 999 parameters.
    few = _queries(tenant, a_session("few", messages=5))
    many = _queries(tenant, a_session("many", messages=90))

    assert few == many
    assert Message.objects.filter(session__external_key="tg:many").count() == 90


def test_the_redaction_policy_is_asked_once_per_import_not_per_message(tenant):
    asked = mock.Mock(wraps=sink_module.redaction_for)
    sessions = [a_session(f"s{n}", messages=20) for n in range(3)]

    with mock.patch.object(sink_module, "redaction_for", asked):
        report = import_items(tenant=tenant, source="test", items=sessions)

    assert dict(report.imported) == {"sessions": 3}
    assert asked.call_count == 1  # the sessions' agent, "chat"


def test_a_policy_the_import_brings_masks_the_sessions_after_it(tenant):
    secret = "write to jane@example.org"

    def with_secret(source_id: str):
        return dataclasses.replace(
            a_session(source_id, messages=0, summaries=[]),
            messages=[ImportedMessage(role="user", content=secret, created_at=T0)],
        )

    policy = ImportedPolicy(
        source_id="policy:chat",
        origin=Origin("export.jsonl", 2),
        agent_id="chat",
        values={"redaction_mode": RedactionMode.MASK, "redact_email": True},
    )

    report = import_items(
        tenant=tenant, source="test", items=[with_secret("before"), policy, with_secret("after")]
    )

    assert dict(report.imported) == {"sessions": 2, "memory_policies": 1}
    contents = dict(Message.objects.values_list("session__external_key", "content"))
    assert contents == {"tg:before": secret, "tg:after": "write to [redacted:email]"}


def test_embedding_is_requested_per_batch_of_committed_sessions(tenant, settings):
    settings.EMBEDDINGS_BACKEND = "onnx"
    requested = mock.Mock(return_value=0)
    items = [
        a_session("s1"),
        a_session("bad", user_id="x" * 1000),  # rejected: no request names it
        a_session("s2"),
        a_session("s3"),
        a_session("empty", messages=0, summaries=[]),  # nothing to embed
    ]

    with (
        mock.patch.object(sink_module, "embedding_request_sessions", requested),
        mock.patch.object(sink_module, "EMBEDDING_REQUEST_BATCH", 2),
    ):
        report = import_items(tenant=tenant, source="test", items=items)

    assert dict(report.imported) == {"sessions": 4}
    ids = dict(Session.objects.values_list("external_key", "pk"))
    assert [c.kwargs["session_ids"] for c in requested.call_args_list] == [
        [ids["tg:s1"], ids["tg:s2"]],
        [ids["tg:s3"]],
    ]


def test_a_dry_run_requests_no_embedding(tenant, settings):
    settings.EMBEDDINGS_BACKEND = "onnx"
    requested = mock.Mock(return_value=0)

    with mock.patch.object(sink_module, "embedding_request_sessions", requested):
        report = import_items(tenant=tenant, source="test", items=[a_session()], dry_run=True)

    assert dict(report.imported) == {"sessions": 1}
    requested.assert_not_called()


def test_a_first_import_asks_no_imported_record_per_session_and_still_dedups(tenant):
    items = [a_session("s1"), a_session("s2"), a_session("s1")]  # s1 twice in one input

    with CaptureQueriesContext(connection) as queries:
        report = import_items(tenant=tenant, source="test", items=items)

    assert (dict(report.imported), dict(report.already_there)) == (
        {"sessions": 2},
        {"sessions": 1},
    )
    lookups = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith("SELECT") and "transfer_importedrecord" in q["sql"]
    ]
    assert len(lookups) == 1  # "did an earlier run of this source leave anything?"
    again = import_items(tenant=tenant, source="test", items=[a_session("s1"), a_session("s3")])
    assert (dict(again.imported), dict(again.already_there)) == (
        {"sessions": 1},
        {"sessions": 1},
    )
    assert Session.objects.count() == 3


def test_the_message_insert_names_every_column_of_the_model():
    # The import writes messages with its own INSERT: a field added to Message must be added to
    # sink._MESSAGE_FIELDS too, or the import would leave it to the database (and fail or
    # store NULL).
    stored = {field.name for field in Message._meta.concrete_fields} - {"id"}
    assert stored == set(sink_module._MESSAGE_FIELDS)
