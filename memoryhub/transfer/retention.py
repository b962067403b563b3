"""Imported history meets the tenant's retention: say how much, before anything is written.

A store of 2025 imported into a tenant with the default policy (90 days) would lose every old
session at the next hourly retention run. So every import (the command, the web page, a dry run)
first reads its input once for times only (`retention_survey`) and says how many sessions,
messages, daily notes and memories fall outside the retention windows; when some do, the
importer chooses (RetentionChoice) before anything is written:

- extend: the policies that would remove imported items keep conversations (and daily notes)
  forever from now on (retention_days / daily_note_retention_days emptied, audited as a policy
  change); the tenant's own items are kept along with the imported ones;
- pin: the imported sessions are pinned (Session.pinned: retention never removes them nor their
  messages) and expired memories are pinned; notes have no pin, so old daily notes extend the
  tenant's daily-note retention as `extend` does;
- proceed: import as it is, knowing the next retention run removes what the survey counted.
  Given to the command beforehand (`--retention proceed`), it needs nothing done before the
  import writes: the survey then counts in the import's own pass (RetentionSurveyor, no second
  read of the input) and is told with the import's report.

This module only reads the input and the policies, and writes the policy change of `extend`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from django.db import models
from django.utils import timezone

from memoryhub.accounts.models import Actor, MemoryPolicy, Tenant
from memoryhub.accounts.services import memory_policy_save
from memoryhub.transfer.models import ImportedRecord
from memoryhub.transfer.sink import source_key
from memoryhub.transfer.types import (
    ImportedMemory,
    ImportedMessage,
    ImportedNote,
    ImportedSession,
    Item,
)


class RetentionChoice(models.TextChoices):
    EXTEND = "extend", "Extend the retention policy: keep conversations and notes forever"
    PIN = "pin", "Pin what is imported: retention never removes it"
    PROCEED = "proceed", "Import as it is: the next retention run removes the old items"


def _default(name: str) -> int | None:
    """The policy a tenant without a row has: the model's defaults, as retention applies them."""
    value = getattr(MemoryPolicy(), name)
    return None if value is None else int(value)


@dataclass
class RetentionSurvey:
    """What of an input falls outside the tenant's retention windows, as of `now`.

    `sessions`: sessions idle since before their cutoff (they go whole, with their messages);
    `messages`: messages older than their cutoff, those of such sessions included;
    `daily_notes`: daily notes of a day before the daily-note cutoff; `memories`: memories
    whose own expiry has passed. `policies` names the policy rows ("" the tenant's) whose
    cutoff catches sessions or messages."""

    now: dt.datetime
    sessions: int = 0
    messages: int = 0
    daily_notes: int = 0
    memories: int = 0
    oldest: dt.datetime | None = None
    retention_days: dict[str, int | None] = field(default_factory=dict)  # by agent, "" tenant
    daily_note_retention_days: int | None = None
    policies: set[str] = field(default_factory=set)

    @property
    def outside(self) -> bool:
        return bool(self.sessions or self.messages or self.daily_notes or self.memories)

    def lines(self) -> list[str]:
        """What the importer is told, before choosing."""
        if not self.outside:
            return ["Retention: nothing in this input falls outside the retention windows."]
        windows = ", ".join(
            f"{'tenant' if not agent else f'agent {agent!r}'}: "
            + ("forever" if days is None else f"{days} days")
            for agent, days in sorted(self.retention_days.items())
        )
        notes_window = (
            "forever"
            if self.daily_note_retention_days is None
            else f"{self.daily_note_retention_days} days"
        )
        oldest = f" (the oldest from {self.oldest.date().isoformat()})" if self.oldest else ""
        lines = [
            "Retention: this input holds items older than the retention windows "
            f"(conversations {windows}; daily notes {notes_window}){oldest}. "
            "The next retention run (hourly) would remove:",
            f"  sessions: {self.sessions} (whole, idle for longer than the window)",
            f"  messages: {self.messages} (those of these sessions included)",
            f"  daily notes: {self.daily_notes}",
            f"  memories already expired: {self.memories}",
        ]
        return lines


def _cutoffs(*, tenant: Tenant, now: dt.datetime) -> tuple[dict[str, int | None], int | None]:
    policies = {policy.agent_id: policy for policy in MemoryPolicy.objects.filter(tenant=tenant)}
    days = {agent: policy.retention_days for agent, policy in policies.items()}
    days.setdefault("", _default("retention_days"))
    tenant_policy = policies.get("")
    note_days = (
        tenant_policy.daily_note_retention_days
        if tenant_policy is not None
        else _default("daily_note_retention_days")
    )
    return days, note_days


def _imported_before(*, tenant: Tenant, source: str, kind: str, source_id: str) -> bool:
    return ImportedRecord.objects.filter(
        tenant=tenant, source=source, kind=kind, source_key=source_key(source_id)
    ).exists()


class RetentionSurveyor:
    """Counts, item by item, what of an input falls outside the tenant's retention windows
    (`survey`). `see(item)` returns the item to pass on: a session whose messages count comes
    back with them wrapped, so that they are counted as whoever reads them reads them (once,
    from a stream). Sessions, notes and memories an earlier run imported were decided on then:
    not counted."""

    def __init__(self, *, tenant: Tenant, source: str, now: dt.datetime | None = None) -> None:
        self.now = now or timezone.now()
        self._days, note_days = _cutoffs(tenant=tenant, now=self.now)
        self.survey = RetentionSurvey(
            now=self.now, retention_days=self._days, daily_note_retention_days=note_days
        )
        self._tenant, self._source = tenant, source
        # A first import of this source (the usual case) has nothing imported before: no query
        # per session to find out.
        self._earlier = ImportedRecord.objects.filter(tenant=tenant, source=source).exists()

    def _imported_before(self, *, kind: str, source_id: str) -> bool:
        return self._earlier and _imported_before(
            tenant=self._tenant, source=self._source, kind=kind, source_id=source_id
        )

    def _older(self, value: dt.datetime | None) -> None:
        if value is not None and (self.survey.oldest is None or value < self.survey.oldest):
            self.survey.oldest = value

    def see(self, item: Item) -> Item:
        survey, now = self.survey, self.now
        if isinstance(item, ImportedSession):
            if item.pinned or self._imported_before(kind="sessions", source_id=item.source_id):
                return item
            agent = item.agent_id if item.agent_id in self._days else ""
            window = self._days[agent]
            last_active = item.last_active_at or item.created_at or now
            self._older(item.created_at)
            if window is None:
                return item
            cutoff = now - dt.timedelta(days=window)
            whole = last_active < cutoff
            survey.sessions += whole
            if whole:
                survey.policies.add(agent)
            return dataclasses.replace(
                item,
                messages=self._messages(item, agent=agent, cutoff=cutoff, whole=whole),
            )
        if isinstance(item, ImportedNote):
            if item.day is None or survey.daily_note_retention_days is None:
                return item
            if self._imported_before(kind="notes", source_id=item.source_id):
                return item
            note_days = survey.daily_note_retention_days
            if item.day < (now - dt.timedelta(days=note_days)).date():
                survey.daily_notes += 1
        elif isinstance(item, ImportedMemory):
            if item.pinned or item.expires_at is None or item.expires_at > now:
                return item
            if not self._imported_before(kind="user_memories", source_id=item.source_id):
                survey.memories += 1
        return item

    def _messages(
        self, item: ImportedSession, *, agent: str, cutoff: dt.datetime, whole: bool
    ) -> Iterator[ImportedMessage]:
        for message in item.messages:
            time = message.created_at or item.created_at or self.now
            self._older(time)
            if whole or time < cutoff:
                self.survey.messages += 1
                self.survey.policies.add(agent)
            yield message


def retention_survey(
    *, tenant: Tenant, source: str, items: Iterable[Item], now: dt.datetime | None = None
) -> RetentionSurvey:
    """Read `items` (times only, nothing kept) against the tenant's retention windows."""
    surveyor = RetentionSurveyor(tenant=tenant, source=source, now=now)
    for item in items:
        seen = surveyor.see(item)
        if seen is not item:  # a session whose messages count: read them
            assert isinstance(seen, ImportedSession)
            for _ in seen.messages:
                pass
    return surveyor.survey


def retention_choice_apply(
    *, tenant: Tenant, survey: RetentionSurvey, choice: RetentionChoice, actor: Actor
) -> list[str]:
    """Make the importer's choice take effect before the import writes; what it did, in words.
    `pin` itself is the sink's (ImportSink(pin=True)): here only its part for daily notes."""
    if not survey.outside or choice == RetentionChoice.PROCEED:
        if survey.outside:
            return [
                "Retention: importing as it is, as chosen; the next retention run removes the "
                "items counted above."
            ]
        return []
    done: list[str] = []
    agents = set(survey.policies) if choice == RetentionChoice.EXTEND else set()
    if survey.daily_notes:
        agents.add("")
    for agent in sorted(agents):
        policy = MemoryPolicy.objects.filter(tenant=tenant, agent_id=agent).first() or MemoryPolicy(
            tenant=tenant, agent_id=agent
        )
        changes: dict[str, list[int | None]] = {}
        if agent in survey.policies and choice == RetentionChoice.EXTEND:
            changes["retention_days"] = [policy.retention_days, None]
            policy.retention_days = None
        if agent == "" and survey.daily_notes:
            changes["daily_note_retention_days"] = [policy.daily_note_retention_days, None]
            policy.daily_note_retention_days = None
        if not changes:
            continue
        memory_policy_save(policy=policy, changes=changes, actor=actor)
        which = (
            "the tenant's memory policy" if not agent else f"the memory policy of agent {agent!r}"
        )
        kept = " and ".join(
            f"{'conversations' if name == 'retention_days' else 'daily notes'} (was "
            f"{'forever' if old is None else f'{old} days'})"
            for name, (old, _new) in changes.items()
        )
        done.append(f"Retention: {which} now keeps {kept} forever.")
    if choice == RetentionChoice.PIN:
        done.append(
            "Retention: the imported sessions are pinned (and expired memories): retention "
            "never removes them. Unpin them in the admin to let retention apply."
        )
    return done
