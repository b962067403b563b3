"""`manage.py embed_memory [--tenant SLUG]`: compute the missing vectors now, by hand.

Vectors are normally made by a worker after each append; this fills in what is older than the
embedder (an install that turned embeddings on, an import, a model change) with a progress bar.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from facts_app.embedding import (
    fact_vectors_compute,
    facts_without_vector,
    memories_without_vector,
    memory_vectors_compute,
    note_vectors_compute,
    notes_without_vector,
)
from facts_app.models import Fact, Note, UserMemory
from memoryhub.accounts.models import Tenant
from memoryhub.llm.embeddings import get_embedder
from sessions_app.embedding import message_vectors_compute, messages_without_vector
from sessions_app.models import Message


class Command(BaseCommand):
    help = (
        "Embed every message, fact, memory and current note that has no vector of the current "
        "embedding model "
        "(EMBEDDINGS_BACKEND), for the given tenants or all. Safe to repeat and to run beside "
        "the workers: a vector is keyed by its row."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--tenant", action="append", default=[], help="A tenant slug; repeatable."
        )
        parser.add_argument(
            "--no-progress", action="store_true", help="No progress bar (for logs)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        embedder = get_embedder()
        if embedder is None:
            raise CommandError("Embeddings are off (EMBEDDINGS_BACKEND=off): nothing to do.")
        slugs: list[str] = options["tenant"]
        tenants = Tenant.objects.order_by("pk")
        if slugs:
            tenants = tenants.filter(slug__in=slugs)
            missing = sorted(set(slugs) - set(tenants.values_list("slug", flat=True)))
            if missing:
                raise CommandError(f"No such tenant: {', '.join(missing)}")
        for tenant in tenants:
            messages = Message.objects.filter(tenant=tenant).filter(
                messages_without_vector(embedder=embedder)
            )
            facts = Fact.objects.filter(tenant=tenant).filter(
                facts_without_vector(embedder=embedder)
            )
            memories = UserMemory.objects.filter(tenant=tenant).filter(
                memories_without_vector(embedder=embedder)
            )
            notes = Note.objects.filter(tenant=tenant).filter(
                notes_without_vector(embedder=embedder)
            )
            with tqdm(
                total=messages.count() + facts.count() + memories.count() + notes.count(),
                unit=" rows",
                desc=f"{tenant.slug}: embedding",
                disable=options["no_progress"],
                file=sys.stderr,
            ) as bar:

                def advance(rows: int) -> None:
                    bar.update(rows)

                sessions = messages.values_list("session_id", flat=True).distinct()
                embedded = 0
                for session_id in list(sessions):
                    embedded += message_vectors_compute(session_id=session_id, progress=advance)
                embedded += fact_vectors_compute(tenant_id=tenant.pk, progress=advance)
                embedded += memory_vectors_compute(tenant_id=tenant.pk, progress=advance)
                embedded += note_vectors_compute(tenant_id=tenant.pk, progress=advance)
            self.stdout.write(f"{tenant.slug}: embedded {embedded} rows with {embedder.model_name}")
