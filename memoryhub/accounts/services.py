"""Every write to tenancy rows: tenants, end users, API keys and audit events."""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from django.apps import apps
from django.core.cache import cache
from django.db import IntegrityError, connections, models, router, transaction
from django.db.models.deletion import Collector
from django.utils import timezone

from memoryhub.accounts.models import (
    API_KEY_DISPLAY_PREFIX,
    DEFAULT_API_KEY_SCOPES,
    END_USER_ID_MAX_LENGTH,
    Actor,
    ApiKey,
    ApiKeyScope,
    AuditAction,
    AuditEvent,
    EndUser,
    MemoryPolicy,
    Tenant,
    User,
    end_user_id_is_storable,
    end_user_id_is_writable,
)
from memoryhub.accounts.selectors import api_key_cache_key
from memoryhub.core.errors import InvalidInput, ResourceNotFound
from memoryhub.core.locks import DELETE_RERUN_SQLSTATES, rows_hold, rows_lock, run_rerunning
from memoryhub.core.rls import rls_system_scope

logger = logging.getLogger(__name__)


def audit_event_record(
    *,
    tenant: Tenant,
    actor: Actor,
    action: str,
    object_type: str,
    object_id: str = "",
    counts: dict[str, int] | None = None,
    detail: dict[str, Any] | None = None,
) -> AuditEvent:
    return AuditEvent.objects.create(
        tenant=tenant,
        actor_type=actor.type,
        actor=actor.name,
        action=action,
        object_type=object_type,
        object_id=object_id,
        counts=counts or {},
        detail=detail or {},
    )


def tenant_create(*, slug: str, name: str = "") -> Tenant:
    return Tenant.objects.create(slug=slug, name=name or slug)


def end_user_get_or_create(
    *, tenant: Tenant, external_id: str, probably_new: bool = False
) -> EndUser:
    """Safe under concurrency: two requests naming a new user at once both get the same row.

    A tenant bound to one person (a person-bound token) gets that person or ResourceNotFound:
    it never creates, nor finds, anyone else. `probably_new` (an import, meeting a bot's
    thousands of people once each) tries the INSERT first: one statement for a new person,
    where the lookup, a savepoint, the INSERT and its release are four round trips."""
    if tenant.person is not None:
        if external_id != tenant.person.end_user.external_id:
            raise ResourceNotFound("No such user.")
        return tenant.person.end_user
    if not end_user_id_is_storable(external_id):
        raise InvalidInput(
            field="user_id",
            message=f"Must be 1-{END_USER_ID_MAX_LENGTH} characters without NUL.",
        )
    if probably_new and end_user_id_is_writable(external_id):
        created = _end_user_insert_unless_there(tenant=tenant, external_id=external_id)
        if created is not None:
            return created
        # There already, or a concurrent request created the same person first: theirs is ours.
        return EndUser.objects.get(tenant=tenant, external_id=external_id)
    existing = EndUser.objects.filter(tenant=tenant, external_id=external_id).first()
    if existing is not None:
        return existing
    if not end_user_id_is_writable(external_id):
        raise InvalidInput(
            field="user_id",
            message="Must not contain control characters (newlines, tabs…).",
            code="control_characters",
        )
    try:
        with transaction.atomic():
            return EndUser.objects.create(tenant=tenant, external_id=external_id)
    except IntegrityError:
        # A concurrent request created the same person first: theirs is ours.
        return EndUser.objects.get(tenant=tenant, external_id=external_id)


def _end_user_insert_unless_there(*, tenant: Tenant, external_id: str) -> EndUser | None:
    """INSERT the person as create() would, unless the (tenant, external_id) constraint says
    they are there already (ON CONFLICT DO NOTHING: no error, so no savepoint to survive one);
    the new row, or None when they were there."""
    row = EndUser(tenant=tenant, external_id=external_id)
    db = connections[router.db_for_write(EndUser)]
    meta = EndUser._meta
    fields = [
        field
        for field in meta.concrete_fields
        if not getattr(field, "generated", False) and not field.primary_key
    ]
    values = [
        field.get_db_prep_save(field.pre_save(row, add=True), connection=db) for field in fields
    ]
    quote = db.ops.quote_name
    sql = (
        f"INSERT INTO {quote(meta.db_table)} "  # noqa: S608 - names from the model's metadata
        f"({', '.join(quote(field.column) for field in fields)}) "
        f"VALUES ({', '.join(['%s'] * len(fields))}) "
        f"ON CONFLICT DO NOTHING RETURNING {quote(meta.pk.column)}"
    )
    with db.cursor() as cursor:
        cursor.execute(sql, values)
        found = cursor.fetchone()
    if found is None:
        return None
    row.pk = found[0]
    row._state.adding = False
    row._state.db = db.alias
    return row


def end_user_hold(*, end_user_id: int) -> None:
    """Hold the person until this transaction ends: call it before writing anything of theirs
    (a row, or their id on a stored response), and before locking any of their sessions.

    An erasure that comes later waits for this write, and finds and erases what it wrote; one
    that came first has taken the person, and this raises ResourceNotFound (the API's 404)
    instead of a foreign-key error at commit. Writers of different rows of one person do not
    wait for each other (memoryhub.core.locks.rows_hold).
    """
    if not rows_hold(EndUser.objects.filter(pk=end_user_id)):
        raise ResourceNotFound("No such user.")


def api_key_create(
    *,
    tenant: Tenant,
    name: str,
    scopes: Iterable[str] = DEFAULT_API_KEY_SCOPES,
    expires_at: dt.datetime | None = None,
    created_by: User | None = None,
) -> tuple[ApiKey, str]:
    """Create a key and return it with its secret, which is never stored and never shown again."""
    api_key = ApiKey(tenant=tenant, name=name[:50], scopes=list(scopes), expiry_date=expires_at)
    return api_key, api_key_issue(api_key=api_key, created_by=created_by)


def api_key_issue(*, api_key: ApiKey, created_by: User | None = None) -> str:
    """Give an unsaved key (built here or by the admin's form) its secret, save and audit it.

    Returns the secret as the bot must send it (`mh_…`).
    """
    scope_list = sorted(set(api_key.scopes))
    unknown = set(scope_list) - set(ApiKeyScope.values)
    if unknown:
        raise ValueError(f"Unknown API key scopes: {', '.join(sorted(unknown))}")
    api_key.scopes = scope_list
    api_key.created_by = created_by
    actor = Actor.staff(created_by.get_username()) if created_by else Actor.system("manage.py")
    with transaction.atomic():
        secret = ApiKey.objects.assign_key(api_key)
        api_key.save()
        audit_event_record(
            tenant=api_key.tenant,
            actor=actor,
            action=AuditAction.KEY_CREATE,
            object_type="api_key",
            object_id=api_key.prefix,
            detail={"name": api_key.name, "scopes": scope_list},
        )
    return f"{API_KEY_DISPLAY_PREFIX}{secret}"


def api_key_revoke(*, api_key: ApiKey, actor: Actor) -> ApiKey:
    with transaction.atomic():
        api_key.revoked = True
        api_key.save(update_fields=["revoked"])
        audit_event_record(
            tenant=api_key.tenant,
            actor=actor,
            action=AuditAction.KEY_REVOKE,
            object_type="api_key",
            object_id=api_key.prefix,
        )
    return api_key


def api_key_cache_forget(*, prefixes: Iterable[str]) -> None:
    """Drop these keys from the verified-key cache (accounts.selectors), for every process that
    shares it: their next request is verified in the database again. Called by the signals of
    every save or delete of a key or its tenant, whoever makes it (services, the admin)."""
    cache_keys = [api_key_cache_key(prefix=prefix) for prefix in prefixes]
    if not cache_keys:
        return

    def forget() -> None:
        try:
            cache.delete_many(cache_keys)
        except Exception:
            # The change itself stands; the cached copy lives out its TTL (at most
            # MEMORYHUB_AUTH_CACHE_SECONDS) unless the cache comes back first.
            logger.error("Auth cache unavailable: %d key(s) not forgotten", len(cache_keys))

    forget()
    if transaction.get_connection().in_atomic_block:
        # Again once the change is committed: a request that read the row before the commit
        # may have cached what it saw meanwhile.
        transaction.on_commit(forget)


def api_key_cache_forget_tenant(*, tenant_id: int) -> None:
    """Drop every key of a tenant from the cache (the cached entries carry the tenant's row)."""
    with rls_system_scope():
        prefixes = list(ApiKey.objects.filter(tenant_id=tenant_id).values_list("prefix", flat=True))
    api_key_cache_forget(prefixes=prefixes)


def api_key_mark_used(*, api_key: ApiKey, resolution_seconds: int) -> None:
    """Record use at most once per `resolution_seconds`, so reads do not all become writes."""
    now = timezone.now()
    stale = api_key.last_used_at is None or (now - api_key.last_used_at) >= dt.timedelta(
        seconds=resolution_seconds
    )
    if not stale:
        return
    ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
    api_key.last_used_at = now


def deleted_kinds(*, per_model: dict[str, int]) -> dict[str, int]:
    """Django's per-model delete counts ("sessions_app.StateEntry": 3) as the kinds every
    response and audit event uses ("state_entries": 3); zeros left out.

    Derived rows (a model with `derived_data = True`: embeddings, like the full-text index rows
    that go by trigger) are not a kind of their own: they are recomputed from the rows counted,
    and whether they existed yet says nothing about what a person had stored."""
    kinds: dict[str, int] = {}
    for label, count in sorted(per_model.items()):
        model = apps.get_model(label)
        if count and not getattr(model, "derived_data", False):
            kinds[str(model._meta.verbose_name_plural).replace(" ", "_")] = count
    return kinds


def deletion_counts(*, obj: models.Model) -> dict[str, int]:
    """What deleting `obj` would remove, per kind, without deleting anything: the dry run of
    audited_delete. The same deletion collector decides both, so they cannot disagree."""
    collector = Collector(using=router.db_for_write(type(obj)), origin=obj)
    collector.collect([obj])
    per_model: Counter[str] = Counter()
    for model, instances in collector.data.items():
        per_model[model._meta.label] += len(instances)
    for queryset in collector.fast_deletes:
        per_model[queryset.model._meta.label] += queryset.count()
    return deleted_kinds(per_model=dict(per_model))


def audited_delete(
    *,
    obj: models.Model,
    tenant: Tenant,
    actor: Actor,
    object_type: str,
    object_id: str,
    action: str = AuditAction.DELETE,
) -> dict[str, int]:
    """Delete `obj` with everything that cascades from it, in one transaction, and write one
    AuditEvent with the rows removed per kind ("messages", "state_entries", ...).

    The counts are Django's own (the deletion collector), so a new table that cascades is
    counted without anyone remembering to add it.
    """
    with transaction.atomic():
        _, per_model = obj.delete()
        counts = deleted_kinds(per_model=per_model)
        audit_event_record(
            tenant=tenant,
            actor=actor,
            action=action,
            object_type=object_type,
            object_id=object_id,
            counts=counts,
        )
    return counts


def end_user_erase(*, end_user: EndUser, actor: Actor) -> dict[str, int]:
    """Erase a person: delete them and everything that hangs off them, in one transaction, with
    one `erase` audit event. The one way a person goes, whoever asks (DELETE /users/{id}/, the
    purge API's scope "user", the person's page, the admin).

    Every table that references a person does so with ON DELETE CASCADE (sessions -> messages,
    state, summaries; memories -> versions; facts; notes; plans; stored idempotent responses),
    so Django's collector finds all of it and counts it per kind. The SQLite FTS rows go with
    their facts and messages through the delete triggers; on PostgreSQL the indexes follow.

    It completes while the bot is still writing: before the collector looks for what cascades,
    it locks the person's row, then the rows of theirs that have rows of their own (sessions
    first; _erasure_locks). Writers take the same rows in the same order (end_user_hold, then
    the session's row), so a write either committed first (and is found and erased here) or
    waits, then finds its person or session gone (404): no row can appear between the
    collector's delete of the children and the parent's. A deadlock that slips through is run
    again. ResourceNotFound when someone else erased the person meanwhile.
    """

    def erase() -> dict[str, int]:
        with transaction.atomic():
            if not rows_lock(EndUser.objects.filter(pk=end_user.pk)):
                raise ResourceNotFound("No such user.")
            for queryset in _erasure_locks(end_user=end_user):
                rows_lock(queryset)
            return audited_delete(
                obj=end_user,
                tenant=end_user.tenant,
                actor=actor,
                action=AuditAction.ERASE,
                object_type="end_user",
                object_id=end_user.external_id,
            )

    return run_rerunning(erase, sqlstates=DELETE_RERUN_SQLSTATES)


def _erasure_locks(*, end_user: EndUser) -> list[models.QuerySet[Any]]:
    """The person's rows that other rows hang off (sessions, plans, memories, facts, notes…),
    one queryset per table: found from the models, so a new table is covered without anyone
    remembering it. A table whose rows point at another such table's comes after it (plans
    after sessions), the order writers lock in."""
    # {model: the field that points at the person}
    parents: dict[type[models.Model], str] = {}
    for relation in EndUser._meta.related_objects:
        model = relation.related_model
        if not isinstance(model, type) or relation.on_delete is not models.CASCADE:
            continue
        if model._meta.related_objects:
            parents[model] = relation.field.name

    def order(model: type[models.Model]) -> tuple[bool, str]:
        under_another = any(
            field.related_model in parents and field.related_model is not model
            for field in model._meta.concrete_fields
            if field.is_relation
        )
        return under_another, model._meta.label

    return [
        model._base_manager.filter(**{parents[model]: end_user})
        for model in sorted(parents, key=order)
    ]


def memory_policy_save(
    *, policy: MemoryPolicy, changes: dict[str, Any], actor: Actor
) -> MemoryPolicy:
    """Save a tenant's or agent's memory policy (validated by the caller) with its audit event,
    in one transaction; `changes` ({field: new value}) goes into the event."""
    created = policy.pk is None
    with transaction.atomic():
        policy.save()
        audit_event_record(
            tenant=policy.tenant,
            actor=actor,
            action=AuditAction.CREATE if created else AuditAction.UPDATE,
            object_type="memory_policy",
            object_id=policy.agent_id,
            detail={"agent_id": policy.agent_id, "changes": changes},
        )
    return policy


def end_user_recall_touch(
    *, tenant: Tenant, end_user_ids: Iterable[int] | None = None, vectors_only: bool = False
) -> int:
    """Tell the search indexes that what they hold of these people (or of all the tenant's
    people) changed: rows deleted or edited, or (`vectors_only`) rows newly embedded.
    Appends need no touch."""
    people = EndUser.objects.filter(tenant=tenant)
    if end_user_ids is not None:
        people = people.filter(pk__in=list(end_user_ids))
    field = "vectors_version" if vectors_only else "recall_version"
    return people.update(**{field: models.F(field) + 1})


def delete_in_batches(
    *,
    queryset: models.QuerySet[Any],
    order_by: tuple[str, ...],
    batch_size: int,
    counts: Counter[str],
    progress: Callable[[str, int], None],
    before_delete: Callable[[list[Any]], None] | None = None,
    lock_first: Callable[[list[Any]], None] | None = None,
) -> None:
    """Delete what `queryset` selects, `batch_size` ids at a time along `order_by` (an index),
    adding what each DELETE really removed (cascades included) to `counts`.

    Each batch locks its rows first, with the filter applied again: a row a writer holds is
    waited for and then judged as the writer left it (a session appended to meanwhile is no
    longer idle, and stays), and under a locked row nothing new can appear between the
    collector's look for what cascades and the delete; a batch that meets a deadlock anyway is
    run again (inside an outer transaction, by whoever opened it). `before_delete(ids)` runs in
    the batch's transaction, just before the delete of those ids; `lock_first(ids)` runs in it
    before the batch's rows are locked, to lock the rows above them first, in the order writers
    lock (a message's session before the message).
    """
    while True:
        ids = list(queryset.order_by(*order_by).values_list("pk", flat=True)[:batch_size])
        if not ids:
            return

        def delete_batch(ids: list[Any] = ids) -> dict[str, int]:
            with transaction.atomic():
                if lock_first is not None:
                    lock_first(ids)
                # The filter again, not just the ids: a row that stopped matching is kept.
                going = rows_lock(queryset.filter(pk__in=ids))
                if not going:
                    return {}
                if before_delete is not None:
                    before_delete(going)
                return queryset.model._base_manager.filter(pk__in=going).delete()[1]

        per_model = run_rerunning(delete_batch, sqlstates=DELETE_RERUN_SQLSTATES)
        removed = deleted_kinds(per_model=per_model)
        counts.update(removed)
        progress(queryset.model._meta.verbose_name_plural, sum(removed.values()))
        if len(ids) < batch_size:
            return
