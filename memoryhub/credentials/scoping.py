"""What a person-bound token may reach: each person-owned model's path to its person, and the
request parameters that name objects, registered with the kernel (accounts.binding).

A session binding narrows what lives in a session (sessions, messages, state, summaries);
the person's memories, facts, notes, plans and task contexts stay theirs (seed 001: the
session and user scopes come with the person). Tenant-wide memories and facts (no person) are
readable; writing them needs the global-memory scope (a grant the token must carry)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from django.db import models
from django.db.models import Q

from facts_app.models import (
    Fact,
    FactVector,
    Note,
    NoteVector,
    UserMemory,
    UserMemoryVector,
    UserMemoryVersion,
)
from memoryhub.accounts.binding import (
    Ownership,
    PersonBinding,
    person_param_register,
    person_scope_register,
)
from memoryhub.accounts.models import EndUser, Tenant
from memoryhub.core.rls import rls_scope
from memoryhub.credentials.models import PersonToken
from sessions_app.models import (
    Message,
    MessageVector,
    Plan,
    Session,
    StateEntry,
    SubTask,
    Summary,
    TaskContext,
)


def _in_session(prefix: str) -> Callable[[PersonBinding], Q]:
    """Rows in the person's sessions (`prefix` leads from the row to its session)."""

    def scope(binding: PersonBinding) -> Q:
        q = Q(**{f"{prefix}end_user": binding.end_user})
        if binding.session_id is not None:
            q &= Q(**{f"{prefix}pk": binding.session_id})
        if binding.agent_id:
            q &= Q(**{f"{prefix}agent_id": binding.agent_id})
        return q

    return scope


def _own(path: str) -> Callable[[PersonBinding], Q]:
    return lambda binding: Q(**{path: binding.end_user})


def _own_or_shared(path: str) -> Callable[[PersonBinding], Q]:
    # Tenant-wide rows (no person) are every person's to read.
    return lambda binding: Q(**{path: binding.end_user}) | Q(**{f"{path}__isnull": True})


def _task_of_person(prefix: str) -> Callable[[PersonBinding], Q]:
    return lambda binding: (
        Q(**{f"{prefix}session__end_user": binding.end_user})
        | Q(**{f"{prefix}plan__end_user": binding.end_user})
    )


SCOPES: dict[type[models.Model], Callable[[PersonBinding], Q]] = {
    EndUser: lambda binding: Q(pk=binding.end_user.pk),
    Session: _in_session(""),
    Message: _in_session("session__"),
    StateEntry: _in_session("session__"),
    Summary: _in_session("session__"),
    MessageVector: _in_session("message__session__"),
    Plan: _own("end_user"),
    TaskContext: _task_of_person(""),
    SubTask: _task_of_person("task__"),
    UserMemory: _own_or_shared("end_user"),
    UserMemoryVersion: _own_or_shared("memory__end_user"),
    UserMemoryVector: _own_or_shared("memory__end_user"),
    Fact: _own_or_shared("end_user"),
    FactVector: _own_or_shared("fact__end_user"),
    Note: _own("end_user"),
    NoteVector: _own("note__end_user"),
    PersonToken: _own("end_user"),
}


def _owned(tenant: Tenant, model: type[models.Model], **lookup: object) -> Ownership:
    """ABSENT when the tenant has no such row; OWN when the bound tenant sees it (its person's
    own or, for memories and facts, tenant-wide: SHARED); FOREIGN otherwise."""
    manager: Any = model._default_manager
    # Row-level security hides the other people's rows from a bound request: whether the id
    # is someone else's (404) or free (a create) is asked in the tenant's scope.
    with rls_scope(tenant_id=tenant.pk):
        taken = manager.filter(tenant_id=tenant.pk, **lookup).exists()
    if not taken:
        return Ownership.ABSENT
    shareable = model in (Fact, UserMemory)
    seen = list(
        manager.for_tenant(tenant)
        .filter(**lookup)
        .values_list("end_user_id" if shareable else "pk", flat=True)[:1]
    )
    if not seen:
        return Ownership.FOREIGN
    if shareable and seen[0] is None:
        return Ownership.SHARED
    return Ownership.OWN


def _session(tenant: Tenant, value: str) -> Ownership:
    try:
        pk = uuid.UUID(value)
    except ValueError:
        return Ownership.ABSENT  # the view refuses it (404 or 400)
    return _owned(tenant, Session, pk=pk)


def _fact(tenant: Tenant, value: str) -> Ownership:
    try:
        pk = int(value)
    except ValueError:
        return Ownership.ABSENT
    if not -(2**63) <= pk < 2**63:
        return Ownership.ABSENT
    return _owned(tenant, Fact, pk=pk)


def _user(tenant: Tenant, value: str) -> Ownership:
    assert tenant.person is not None
    return Ownership.OWN if value == tenant.person.end_user.external_id else Ownership.FOREIGN


PARAMS: dict[str, Callable[[Tenant, str], Ownership]] = {
    "user_id": _user,
    "session_id": _session,
    "source_session_id": _session,
    "fact_id": _fact,
    "supersedes": _fact,
    "plan_id": lambda tenant, value: _owned(tenant, Plan, plan_id=value),
    "task_id": lambda tenant, value: _owned(tenant, TaskContext, task_id=value),
    "subtask_id": lambda tenant, value: _owned(tenant, SubTask, subtask_id=value),
    "jti": lambda tenant, value: _owned(tenant, PersonToken, jti=value),
}


def register() -> None:
    for model, scope in SCOPES.items():
        person_scope_register(model, scope)
    for name, owner in PARAMS.items():
        person_param_register(name, owner)
