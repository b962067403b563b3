"""What keeps an import fast (issue 18) without changing what it stores: a session's messages go
in one statement per chunk, not one per message, the redaction policy is asked once per import (and
again after the import brings a policy), and embedding is requested per batch of committed
sessions, never for a rejected one nor in a dry run."""

from __future__ import annotations

import dataclasses
import datetime as dt
from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from facts_app.models import Fact
from facts_app.services.facts import fact_content_hash
from memoryhub.accounts.models import EndUser, RedactionMode
from memoryhub.transfer import sink as sink_module
from memoryhub.transfer.models import ImportedRecord
from memoryhub.transfer.runner import import_items
from memoryhub.transfer.types import ImportedFact, ImportedMessage, ImportedPolicy, Origin
from sessions_app.models import Message, Session
from tests.helpers import sessions_with_messages
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
    # The import (and the append) write messages with their own INSERT: a field added to
    # Message must be added to MESSAGE_INSERT_FIELDS too, or they would leave it to the database
    # (and fail or store NULL).
    stored = {field.name for field in Message._meta.concrete_fields} - {"id"}
    assert stored == set(sink_module.MESSAGE_INSERT_FIELDS)


def test_the_message_insert_stores_each_value_as_the_model_would(tenant):
    # On PostgreSQL a chunk goes in as one JSON parameter: every kind of value must come out
    # as the ORM stores it (texts whole, quotes and non-ASCII, JSON columns, times with offsets).
    offset = dt.timezone(dt.timedelta(hours=-5, minutes=-30))
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]
    messages = [
        ImportedMessage(
            role="user",
            content='say "hi" \\ to Zoë 👋\nand 100%s',
            created_at=dt.datetime(2025, 3, 1, 9, 30, 15, 123456, tzinfo=offset),
            name="n" * 200,
            metadata={"lang": "fr", "nested": {"list": [1, 2.5, None, True]}},
            token_count=7,
        ),
        ImportedMessage(
            role="assistant",
            content="",
            tool_calls=calls,
            tool_call_id="t" * 300,
            created_at=None,
        ),
        ImportedMessage(role="tool", content="x" * 3000, tool_call_id="c1", created_at=T0),
    ]
    item = dataclasses.replace(a_session("values", summaries=[]), messages=messages)

    report = import_items(tenant=tenant, source="test", items=[item])

    assert dict(report.imported) == {"sessions": 1}, report.skipped
    rows = list(
        Message.objects.filter(session__external_key="tg:values")
        .order_by("seq")
        .values_list(
            "seq", "role", "content", "name", "tool_call_id", "tool_calls", "metadata", "created_at"
        )
    )
    assert rows == [
        (
            1,
            "user",
            'say "hi" \\ to Zoë 👋\nand 100%s',
            "n" * 128,
            "",
            None,
            {"lang": "fr", "nested": {"list": [1, 2.5, None, True]}},
            dt.datetime(2025, 3, 1, 15, 0, 15, 123456, tzinfo=dt.UTC),
        ),
        (2, "assistant", "", "", "t" * 128, calls, {}, T0),  # the session's time
        (3, "tool", "x" * 3000, "", "c1", None, {}, T0),
    ]
    assert Message.objects.get(seq=1, session__external_key="tg:values").token_count == 7


def test_a_message_the_database_refuses_rejects_its_session_only(tenant):
    item = dataclasses.replace(
        a_session("bad", summaries=[]),
        messages=[ImportedMessage(role="user", content="hi", token_count=-1)],  # a CHECK fails
    )

    report = import_items(tenant=tenant, source="test", items=[item, a_session("good")])

    assert dict(report.imported) == {"sessions": 1}
    assert [(s.kind, s.origin) for s in report.skipped] == [("sessions", item.origin)]
    assert list(Session.objects.values_list("external_key", flat=True)) == ["tg:good"]


def test_a_chunk_over_the_statement_size_goes_in_several_statements_whole(tenant):
    # On PostgreSQL one statement takes contents up to MESSAGE_JSON_CHARS: a chunk of larger
    # texts is split, every message still stored once, in order.
    with mock.patch.object(sink_module, "MESSAGE_JSON_CHARS", 20):
        report = import_items(tenant=tenant, source="test", items=[a_session("big", messages=7)])

    assert dict(report.imported) == {"sessions": 1}
    stored = Message.objects.filter(session__external_key="tg:big").order_by("seq")
    assert list(stored.values_list("seq", "content")) == [(i + 1, f"hello {i}") for i in range(7)]


def test_people_are_found_or_created_once_as_end_user_get_or_create_would(tenant, other_tenant):
    known = EndUser.objects.create(tenant=tenant, external_id="known", display_name="Ana")
    old_style = EndUser.objects.create(tenant=tenant, external_id="tab\tid")  # stored before
    EndUser.objects.create(tenant=other_tenant, external_id="new")  # another tenant's
    items = [
        a_session("s1", user_id="known"),
        a_session("s2", user_id="new"),
        a_session("s3", user_id="tab\tid"),
        a_session("s4", user_id="line\nbreak"),  # a new id with a control character
    ]

    with CaptureQueriesContext(connection) as queries:
        report = import_items(tenant=tenant, source="test", items=items)

    assert dict(report.imported) == {"sessions": 3}
    assert [s.reason for s in report.skipped] == [
        "Must not contain control characters (newlines, tabs…)."
    ]
    owners = dict(Session.objects.values_list("external_key", "end_user_id"))
    created = EndUser.objects.get(tenant=tenant, external_id="new")
    assert owners == {"tg:s1": known.pk, "tg:s2": created.pk, "tg:s3": old_style.pk}
    assert (created.display_name, created.metadata, created.created_at is not None) == (
        "",
        {},
        True,
    )
    assert EndUser.objects.filter(tenant=tenant).count() == 3
    # The new person in one statement: no lookup before it.
    new_person = [q["sql"] for q in queries.captured_queries if "'new'" in q["sql"]]
    assert [sql.split(" ", 1)[0] for sql in new_person] == ["INSERT"], new_person


def test_on_postgresql_a_sessions_inserts_go_in_one_round_trip(tenant):
    item = a_session("one", summaries=[], state=[])

    with CaptureQueriesContext(connection) as queries:
        report = import_items(tenant=tenant, source="test", items=[item])

    assert dict(report.imported) == {"sessions": 1}
    inserts = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith("INSERT") and "accounts_enduser" not in q["sql"]
    ]
    tables = ["sessions_app_message", "sessions_app_session", "transfer_importedrecord"]
    if connection.vendor == "postgresql":  # several statements in one (the simple protocol)
        assert len(inserts) == 1
        assert [table in inserts[0] for table in tables] == [True, True, True]
    else:
        assert [next(t for t in tables if f'"{t}"' in sql) for sql in inserts] == tables
    assert Message.objects.filter(session__external_key="tg:one").count() == 3


def _a_fact(source_id: str, content: str, **overrides) -> ImportedFact:
    fields = {
        "source_id": source_id,
        "origin": Origin("facts.json", 1),
        "content": content,
        "user_id": "telegram:42",
        "metadata": {"imported": True},  # tells them from the facts a test makes itself
    }
    return ImportedFact(**{**fields, **overrides})


def test_a_fact_goes_in_as_one_statement_with_its_record_on_postgresql(tenant):
    # The lookup for the same fact, the source messages' ids, the INSERT and its ImportedRecord
    # were four round trips of an imported fact's six (with BEGIN and COMMIT).
    import_items(tenant=tenant, source="test", items=[a_session("s1", summaries=[])])
    fact = _a_fact("f1", "Drinks green tea", source_session_id="s1", source_message_seqs=[1, 3])

    with CaptureQueriesContext(connection) as queries:
        report = import_items(tenant=tenant, source="test", items=[fact])

    assert dict(report.imported) == {"facts": 1}, report.skipped
    statements = [
        q["sql"]
        for q in queries.captured_queries
        if "facts_app_fact" in q["sql"] or "sessions_app_message" in q["sql"]
    ]
    if connection.vendor == "postgresql":
        assert len(statements) == 1, statements
        assert "transfer_importedrecord" in statements[0]
    else:
        assert len(statements) == 3  # the same fact?, the messages' ids, the INSERT
    stored = Fact.objects.get(content="Drinks green tea")
    assert stored.source_message_ids == list(
        Message.objects.filter(session=stored.source_session_id, seq__in=[1, 3])
        .order_by("seq")
        .values_list("pk", flat=True)
    )
    assert ImportedRecord.objects.get(kind="facts").object_id == str(stored.pk)
    again = import_items(tenant=tenant, source="test", items=[fact])
    assert dict(again.already_there) == {"facts": 1}
    assert Fact.objects.count() == 1


def test_a_fact_its_person_has_already_is_skipped_and_nothing_of_it_is_written(tenant):
    person = EndUser.objects.create(tenant=tenant, external_id="telegram:42")
    for owner, content in ((person, "Lives in Porto"), (None, "The office opens at 9")):
        Fact.objects.create(
            tenant=tenant, end_user=owner, content=content, content_hash=fact_content_hash(content)
        )
    items = [
        _a_fact("f1", "Lives in Porto"),  # the person's fact already
        _a_fact("f2", "The office opens at 9", user_id=None),  # the tenant's, of no one
        _a_fact("f3", "The office opens at 9"),  # the same text, the person's: a new fact
        _a_fact("f4", "Lives in Porto", user_id="telegram:7"),  # another person's: new
        # Source seqs of a session this import does not have: no ids, still imported.
        _a_fact("f5", "Plays chess", source_session_id="gone", source_message_seqs=[1]),
    ]

    report = import_items(tenant=tenant, source="test", items=items)

    assert dict(report.imported) == {"facts": 3}
    assert [(str(s.origin), s.reason) for s in report.skipped] == [
        ("facts.json:1", "the same fact already exists for this person."),
        ("facts.json:1", "the same fact already exists for this person."),
    ]
    imported = Fact.objects.exclude(metadata={}).values_list("pk", flat=True)
    assert sorted(ImportedRecord.objects.values_list("object_id", flat=True)) == sorted(
        str(pk) for pk in imported
    )
    assert Fact.objects.count() == 5
    assert Fact.objects.get(content="Plays chess").source_message_ids == []


def test_a_fact_in_a_dry_run_is_counted_and_not_kept(tenant):
    report = import_items(tenant=tenant, source="test", items=[_a_fact("f1", "x")], dry_run=True)

    assert dict(report.imported) == {"facts": 1}
    assert (Fact.objects.count(), ImportedRecord.objects.count()) == (0, 0)


@pytest.mark.django_db(transaction=True)
def test_a_fact_of_a_known_person_is_its_own_statement_outside_a_transaction(tenant):
    # As a command imports (no outer transaction): a fact whose person and source session
    # this run knows already writes one statement, which is its transaction by itself; a fact
    # that would create its person keeps BEGIN and COMMIT (the person and the fact, or nothing).
    in_transaction: list[bool] = []

    def watch(execute, sql, params, many, context):
        if 'INSERT INTO "facts_app_fact"' in sql:
            in_transaction.append(connection.in_atomic_block)
        return execute(sql, params, many, context)

    items = [
        a_session("s1", summaries=[]),
        _a_fact("f1", "Drinks green tea", source_session_id="s1", source_message_seqs=[1]),
        _a_fact("f2", "Drinks green tea"),  # the same again: skipped, nothing written
        _a_fact("f3", "Plays chess", user_id="telegram:7"),  # a new person: a transaction
    ]

    with connection.execute_wrapper(watch):
        report = import_items(tenant=tenant, source="test", items=items)

    assert dict(report.imported) == {"sessions": 1, "facts": 2}
    assert [s.reason for s in report.skipped] == ["the same fact already exists for this person."]
    if connection.vendor == "postgresql":
        assert in_transaction == [False, False, True]
    stored = Fact.objects.get(content="Drinks green tea")
    assert stored.source_message_ids == [Message.objects.get(seq=1).pk]
    facts = ImportedRecord.objects.filter(kind="facts").values_list("object_id", flat=True)
    assert sorted(facts) == sorted(str(pk) for pk in Fact.objects.values_list("pk", flat=True))


def test_a_facts_source_messages_are_read_by_their_session_however_stale_the_statistics(
    tenant, other_tenant
):
    # An import's tenant is new to the table's statistics while it grows (autovacuum has not
    # analysed it yet): the planner then takes it for a few rows, and the fact's lookup of its
    # source messages walked the tenant's whole (tenant_id, created_at) index, one fact after
    # another, instead of the two rows that (session_id, seq) names.
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's planner")
    _other_tenants_messages_analysed(other_tenant)
    import_items(tenant=tenant, source="test", items=[a_session("s1", messages=3000, summaries=[])])
    fact = _a_fact("f1", "Drinks green tea", source_session_id="s1", source_message_seqs=[1, 3])

    with CaptureQueriesContext(connection) as queries:
        report = import_items(tenant=tenant, source="test", items=[fact])

    assert dict(report.imported) == {"facts": 1}, report.skipped
    (statement,) = [q["sql"] for q in queries.captured_queries if "facts_app_fact" in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (COSTS OFF) " + statement)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "message_unique_session_seq" in plan, plan
    assert "message_tenant_created" not in plan, plan
    stored = Fact.objects.get(content="Drinks green tea")
    assert stored.source_message_ids == list(
        Message.objects.filter(session=stored.source_session_id, seq__in=[1, 3])
        .order_by("seq")
        .values_list("pk", flat=True)
    )


def _other_tenants_messages_analysed(other_tenant) -> None:
    """What the statistics know: another tenant's 200 sessions of 100 messages."""
    sessions_with_messages(other_tenant, sessions=200, messages=100)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE sessions_app_message")


@pytest.mark.parametrize("analysed", [True, False])
def test_a_big_import_ends_with_the_statistics_knowing_its_tenant(
    tenant, other_tenant, monkeypatch, analysed
):
    # Until ANALYZE, a tenant new to the statistics looks like a few rows: its last-20 read
    # walked the tenant's whole (tenant_id, created_at) index (109 ms at 87,000 messages,
    # against 0.06 ms through (session_id, seq)). An import of at least ANALYZE_AFTER_MESSAGES
    # messages analyses what it filled; a smaller one leaves it to autovacuum.
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's planner")
    _other_tenants_messages_analysed(other_tenant)
    monkeypatch.setattr(sink_module, "ANALYZE_AFTER_MESSAGES", 3000 if analysed else 3001)

    sessions = [
        a_session(f"s{n}", external_key=f"tg:{n}", messages=100, summaries=[]) for n in range(30)
    ]
    import_items(tenant=tenant, source="test", items=sessions)

    session = Session.objects.filter(tenant=tenant).first()
    plan = (
        Message.objects.for_tenant(tenant).filter(session=session).order_by("-seq")[:20].explain()
    )
    assert ("message_unique_session_seq" in plan) is analysed, plan
