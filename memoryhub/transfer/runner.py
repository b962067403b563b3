"""Feed a reader's records to the sink, one at a time, with a progress callback."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from memoryhub.accounts.models import Tenant
from memoryhub.transfer.sink import ImportSink
from memoryhub.transfer.types import (
    Changed,
    ImportedEndUser,
    ImportedFact,
    ImportedMemory,
    ImportedNote,
    ImportedPlan,
    ImportedPolicy,
    ImportedSession,
    ImportedTaskContext,
    ImportReport,
    Item,
    Skipped,
)


def import_items(
    *,
    tenant: Tenant,
    source: str,
    items: Iterable[Item],
    dry_run: bool = False,
    pin: bool = False,
    progress: Callable[[Item], None] | None = None,
) -> ImportReport:
    """Import every record `items` yields into `tenant`; see ImportSink for the guarantees.
    `pin`: the sessions it creates are exempt from retention (transfer.retention)."""
    sink = ImportSink(tenant=tenant, source=source, dry_run=dry_run, pin=pin)
    with sink.commits_unflushed():
        _feed(sink=sink, items=items, progress=progress)
        return sink.finish()


def _feed(
    *, sink: ImportSink, items: Iterable[Item], progress: Callable[[Item], None] | None
) -> None:
    for item in items:
        if isinstance(item, Skipped):
            sink.report.skipped.append(item)
        elif isinstance(item, Changed):
            sink.report.changed.append(item)
        elif isinstance(item, ImportedSession):
            sink.session(item)
        elif isinstance(item, ImportedMemory):
            sink.memory(item)
        elif isinstance(item, ImportedFact):
            sink.fact(item)
        elif isinstance(item, ImportedNote):
            sink.note(item)
        elif isinstance(item, ImportedEndUser):
            sink.end_user(item)
        elif isinstance(item, ImportedPolicy):
            sink.policy(item)
        elif isinstance(item, ImportedPlan):
            sink.plan(item)
        elif isinstance(item, ImportedTaskContext):
            sink.task_context(item)
        else:  # pragma: no cover - a reader bug, not bad input
            raise TypeError(f"not an import record: {item!r}")
        if progress is not None:
            progress(item)
