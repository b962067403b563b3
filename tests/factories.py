"""factory_boy factories: one per model of accounts, llm, transfer, sessions_app and facts_app.

Factories write rows directly and bypass the services: no audit events, no idempotency, no
counters. A SessionFactory session keeps `message_count`, `token_count` and `last_seq` at 0 however
many MessageFactory messages it gets, and a UserMemoryFactory memory has no versions. Use them for
rows a test only needs to exist; for realistic sessions, notes or facts call the services
(`session_create_or_get`, `message_append_batch`, `note_long_term_save`, `fact_create`, ...).

Tenancy: a row's tenant and its parents' tenants always agree. A row inside a container (a
message in a session, a sub-task in a task context) takes the container's tenant; a row that
belongs to a person (a session, a plan, a fact) makes its person in its own tenant. Pass either
`tenant=` or the parent, not two that disagree: the factory refuses (see TenantOwnedFactory).

Unique columns come from sequences, so any number of rows can share one parent; MemoryPolicyFactory
is the exception (its default `agent_id=""` is the tenant policy, one per tenant).
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

import factory
from django.utils import timezone

from facts_app.models import (
    Fact,
    FactVector,
    Note,
    NoteKind,
    NoteVector,
    UserMemory,
    UserMemoryVector,
    UserMemoryVersion,
)
from facts_app.services.facts import fact_content_hash, fact_search_text
from facts_app.services.notes import today_utc
from memoryhub.accounts.models import (
    API_KEY_DISPLAY_PREFIX,
    DEFAULT_API_KEY_SCOPES,
    ActorType,
    ApiKey,
    AuditAction,
    AuditEvent,
    EndUser,
    IdempotencyRecord,
    Membership,
    MembershipRole,
    MemoryPolicy,
    Tenant,
    User,
)
from memoryhub.llm.embeddings import MINILM_DIMENSIONS, MINILM_MODEL_NAME, vector_to_bytes
from memoryhub.llm.models import LlmUsage, LlmUsagePurpose
from memoryhub.transfer.models import ImportedRecord, PendingUpload, PendingUploadChunk
from sessions_app.models import (
    Message,
    MessageRole,
    MessageVector,
    Plan,
    Session,
    StateEntry,
    SubTask,
    Summary,
    TaskContext,
)

TEST_PASSWORD = "pw-for-tests-only"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _unit_vector(n: int) -> bytes:
    """A stored vector of the default model: unit length, one of its axes."""
    vector = [0.0] * MINILM_DIMENSIONS
    vector[n % MINILM_DIMENSIONS] = 1.0
    return vector_to_bytes(vector)


# --- accounts -----------------------------------------------------------------------------------


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User

    username = factory.Sequence(lambda n: f"user-{n}")
    password = factory.django.Password(TEST_PASSWORD)


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant

    slug = factory.Sequence(lambda n: f"tenant-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.title())


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    tenant = factory.SubFactory(TenantFactory)
    role = MembershipRole.MEMBER


class TenantOwnedFactory(factory.django.DjangoModelFactory):
    """Refuses a row whose parents live in another tenant than its own.

    The declarations keep them together when nothing is passed; this catches the call that passes
    a parent and a tenant that disagree (`PlanFactory(tenant=a, end_user=someone_of_b)`), which
    would otherwise build a row no service could ever write.
    """

    # The foreign keys whose rows carry a tenant of their own.
    _tenant_parents: ClassVar[tuple[str, ...]] = ()

    class Meta:
        abstract = True

    @classmethod
    def _adjust_kwargs(cls, **kwargs: Any) -> dict[str, Any]:
        tenant = kwargs["tenant"]
        for name in cls._tenant_parents:
            parent = kwargs.get(name)
            if parent is None:
                continue
            # Built (unsaved) rows have no ids yet: compare the objects themselves.
            same = parent.tenant is tenant if tenant.pk is None else parent.tenant_id == tenant.pk
            if not same:
                raise ValueError(
                    f"{cls.__name__}: {name} belongs to tenant {parent.tenant}, the row to "
                    f"{tenant}; pass the parent alone or one from the same tenant"
                )
        return kwargs


class EndUserFactory(TenantOwnedFactory):
    class Meta:
        model = EndUser

    tenant = factory.SubFactory(TenantFactory)
    external_id = factory.Sequence(lambda n: f"test:user-{n}")


class ApiKeyFactory(factory.django.DjangoModelFactory):
    """A key with read and write scopes; its secret, as a bot sends it, is on `.secret`.

    Unlike `api_key_create`, writes no audit event."""

    class Meta:
        model = ApiKey

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda n: f"test key {n}")
    scopes = factory.LazyFunction(lambda: [str(scope) for scope in DEFAULT_API_KEY_SCOPES])

    @classmethod
    def _create(cls, model_class: type[ApiKey], *args: Any, **kwargs: Any) -> ApiKey:
        # The manager generates the prefix and stores only the hash of the secret.
        api_key, secret = model_class.objects.create_key(*args, **kwargs)
        api_key.secret = f"{API_KEY_DISPLAY_PREFIX}{secret}"  # type: ignore[attr-defined]
        return api_key


class AuditEventFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = AuditEvent

    tenant = factory.SubFactory(TenantFactory)
    actor_type = ActorType.SYSTEM
    actor = "tests"
    action = AuditAction.CREATE
    object_type = "session"
    object_id = factory.Sequence(str)


class IdempotencyRecordFactory(TenantOwnedFactory):
    """A stored first response; about no one unless given an `end_user`."""

    _tenant_parents = ("end_user",)

    class Meta:
        model = IdempotencyRecord

    tenant = factory.SubFactory(TenantFactory)
    key = factory.Sequence(lambda n: f"key-{n}")
    end_user = None
    scope = "POST /api/v1/sessions/"
    request_hash = factory.LazyAttribute(lambda o: _sha256(o.key))
    response_status = 201
    response_body = factory.LazyFunction(dict)


class MemoryPolicyFactory(factory.django.DjangoModelFactory):
    """The tenant's policy (one per tenant); pass `agent_id=` for an agent's override."""

    class Meta:
        model = MemoryPolicy

    tenant = factory.SubFactory(TenantFactory)
    agent_id = ""


# --- llm, transfer ------------------------------------------------------------------------------


class LlmUsageFactory(TenantOwnedFactory):
    class Meta:
        model = LlmUsage

    tenant = factory.SubFactory(TenantFactory)
    day = factory.LazyFunction(today_utc)
    model = factory.Sequence(lambda n: f"test-model-{n}")
    purpose = LlmUsagePurpose.SUMMARY
    calls = 1
    prompt_tokens = 100
    completion_tokens = 20


class ImportedRecordFactory(TenantOwnedFactory):
    class Meta:
        model = ImportedRecord

    tenant = factory.SubFactory(TenantFactory)
    source = "memoryhub"
    kind = "sessions"
    source_key = factory.Sequence(lambda n: _sha256(f"record-{n}"))
    object_id = factory.Sequence(str)


class PendingUploadFactory(TenantOwnedFactory):
    """An upload's row alone; its bytes are PendingUploadChunkFactory's (pending_upload_store
    writes both and the size)."""

    class Meta:
        model = PendingUpload

    tenant = factory.SubFactory(TenantFactory)
    token = factory.Sequence(lambda n: f"{n:032x}")
    source = "memoryhub"
    name = "export.jsonl"
    size = 0


class PendingUploadChunkFactory(TenantOwnedFactory):
    _tenant_parents = ("upload",)

    class Meta:
        model = PendingUploadChunk

    upload = factory.SubFactory(PendingUploadFactory)
    tenant = factory.SelfAttribute("upload.tenant")
    index = factory.Sequence(int)
    data = b"{}\n"


# --- sessions_app -------------------------------------------------------------------------------


class SessionFactory(TenantOwnedFactory):
    """A session row; its counters stay 0 (message_append keeps them, factories do not)."""

    _tenant_parents = ("end_user",)

    class Meta:
        model = Session

    tenant = factory.SubFactory(TenantFactory)
    end_user = factory.SubFactory(EndUserFactory, tenant=factory.SelfAttribute("..tenant"))
    agent_id = "chat"
    last_active_at = factory.LazyFunction(timezone.now)


class MessageFactory(TenantOwnedFactory):
    """A message row; `seq` comes from a sequence (unique, not gapless), and the session's
    `message_count`, `token_count` and `last_seq` are left as they were: keep them in step
    yourself, or append through `message_append_batch` for a realistic session."""

    _tenant_parents = ("session",)

    class Meta:
        model = Message

    session = factory.SubFactory(SessionFactory)
    tenant = factory.SelfAttribute("session.tenant")
    seq = factory.Sequence(lambda n: n + 1)
    role = MessageRole.USER
    content = factory.Faker("sentence")
    created_at = factory.LazyFunction(timezone.now)


class StateEntryFactory(TenantOwnedFactory):
    """A state key; the session's `state_clock` is not bumped (state_set does that)."""

    _tenant_parents = ("session",)

    class Meta:
        model = StateEntry

    session = factory.SubFactory(SessionFactory)
    tenant = factory.SelfAttribute("session.tenant")
    key = factory.Sequence(lambda n: f"key-{n}")
    value = factory.Sequence(lambda n: {"n": n})
    position = factory.Sequence(lambda n: n + 1)


class SummaryFactory(TenantOwnedFactory):
    """A summary row; the session's `summarized_seq`/`summarized_tokens` are not moved."""

    _tenant_parents = ("session",)

    class Meta:
        model = Summary

    session = factory.SubFactory(SessionFactory)
    tenant = factory.SelfAttribute("session.tenant")
    text = factory.Faker("paragraph")
    through_seq = factory.Sequence(lambda n: n + 1)
    model = Summary.OFFLINE_MODEL


class PlanFactory(TenantOwnedFactory):
    """A running plan of a person, in no session unless given one."""

    _tenant_parents = ("end_user", "session")

    class Meta:
        model = Plan

    tenant = factory.SubFactory(TenantFactory)
    plan_id = factory.Sequence(lambda n: f"plan-{n}")
    end_user = factory.SubFactory(EndUserFactory, tenant=factory.SelfAttribute("..tenant"))
    session = None
    goal_event = "trip.requested"
    goal_data = factory.LazyFunction(dict)


class TaskContextFactory(TenantOwnedFactory):
    """A task context with no sub-tasks, in no plan or session unless given them."""

    _tenant_parents = ("plan", "session")

    class Meta:
        model = TaskContext

    tenant = factory.SubFactory(TenantFactory)
    task_id = factory.Sequence(lambda n: f"task-{n}")
    plan = None
    session = None
    event_type = "task.requested"


class SubTaskFactory(TenantOwnedFactory):
    _tenant_parents = ("task",)

    class Meta:
        model = SubTask

    task = factory.SubFactory(TaskContextFactory)
    tenant = factory.SelfAttribute("task.tenant")
    subtask_id = factory.Sequence(lambda n: f"subtask-{n}")


# --- facts_app ----------------------------------------------------------------------------------


class UserMemoryFactory(TenantOwnedFactory):
    """A person's memory at version 1; pass `end_user=None` for a tenant-wide one."""

    _tenant_parents = ("end_user",)

    class Meta:
        model = UserMemory

    tenant = factory.SubFactory(TenantFactory)
    end_user = factory.SubFactory(EndUserFactory, tenant=factory.SelfAttribute("..tenant"))
    key = factory.Sequence(lambda n: f"key_{n}")
    content = factory.Faker("sentence")


class UserMemoryVersionFactory(TenantOwnedFactory):
    """An earlier text of a memory; the memory's own `version` is not bumped."""

    _tenant_parents = ("memory",)

    class Meta:
        model = UserMemoryVersion

    memory = factory.SubFactory(UserMemoryFactory)
    tenant = factory.SelfAttribute("memory.tenant")
    version = factory.Sequence(lambda n: n + 1)
    content = factory.Faker("sentence")
    created_at = factory.LazyFunction(timezone.now)


class FactFactory(TenantOwnedFactory):
    """A person's fact, with the hash and search text fact_create would give it (so it is found
    by search and deduplicated like a posted one); `end_user=None` for a tenant-wide fact."""

    _tenant_parents = ("end_user", "superseded_by")

    class Meta:
        model = Fact

    tenant = factory.SubFactory(TenantFactory)
    end_user = factory.SubFactory(EndUserFactory, tenant=factory.SelfAttribute("..tenant"))
    # A sequence, not Faker: two facts with the same normalised text would break the unique hash.
    content = factory.Sequence(lambda n: f"The user likes tea number {n}.")
    tags = factory.LazyFunction(list)
    content_hash = factory.LazyAttribute(lambda o: fact_content_hash(o.content))
    search_text = factory.LazyAttribute(
        lambda o: fact_search_text(content=o.content, tags=o.tags, end_user=o.end_user)
    )


class NoteFactory(TenantOwnedFactory):
    """One version of a person's long-term note; `NoteFactory(daily=True)` for today's daily
    note. Versions come from a sequence, not "the next one" as the note services number them."""

    _tenant_parents = ("end_user",)

    class Meta:
        model = Note

    class Params:
        daily = factory.Trait(kind=NoteKind.DAILY, day=factory.LazyFunction(today_utc))

    tenant = factory.SubFactory(TenantFactory)
    end_user = factory.SubFactory(EndUserFactory, tenant=factory.SelfAttribute("..tenant"))
    kind = NoteKind.LONG_TERM
    day = None
    version = factory.Sequence(lambda n: n + 1)
    content = factory.Faker("paragraph")


# --- vectors (derived rows: normally the embedding worker's) --------------------------------------


class VectorFactory(TenantOwnedFactory):
    class Meta:
        abstract = True

    model = MINILM_MODEL_NAME
    vector = factory.Sequence(_unit_vector)


class MessageVectorFactory(VectorFactory):
    _tenant_parents = ("message",)

    class Meta:
        model = MessageVector

    tenant = factory.SubFactory(TenantFactory)
    message = factory.SubFactory(MessageFactory, session__tenant=factory.SelfAttribute("...tenant"))
    end_user = factory.SelfAttribute("message.session.end_user")


class FactVectorFactory(VectorFactory):
    _tenant_parents = ("fact",)

    class Meta:
        model = FactVector

    tenant = factory.SubFactory(TenantFactory)
    fact = factory.SubFactory(FactFactory, tenant=factory.SelfAttribute("..tenant"))


class UserMemoryVectorFactory(VectorFactory):
    _tenant_parents = ("memory",)

    class Meta:
        model = UserMemoryVector

    tenant = factory.SubFactory(TenantFactory)
    memory = factory.SubFactory(UserMemoryFactory, tenant=factory.SelfAttribute("..tenant"))


class NoteVectorFactory(VectorFactory):
    _tenant_parents = ("note",)

    class Meta:
        model = NoteVector

    tenant = factory.SubFactory(TenantFactory)
    note = factory.SubFactory(NoteFactory, tenant=factory.SelfAttribute("..tenant"))
