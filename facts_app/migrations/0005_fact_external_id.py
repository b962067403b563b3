"""Fact.external_id: the caller's own id for a fact becomes a column with a unique index per
tenant, instead of metadata["external_id"] guarded by an advisory lock and found by an unindexed
JSON lookup. Existing ids are copied in batches; metadata keeps its copy (the API shows it there).

An id that cannot be a column value (not a non-empty text of at most 255 characters) or that a
lower fact of the same tenant already has stays in metadata only: the constraint is added after
the copy and must hold.
"""

from django.db import migrations, models
from django.db.models import Q

BATCH = 1000
KEY = "external_id"
MAX_LENGTH = 255


def copy_to_column(apps, schema_editor):  # type: ignore[no-untyped-def]
    fact_model = apps.get_model("facts_app", "Fact")
    facts = fact_model._default_manager.using(schema_editor.connection.alias)
    seen: set[tuple[int, str]] = set()
    last = 0
    while batch := list(
        facts.filter(pk__gt=last, metadata__has_key=KEY)
        .order_by("pk")
        .only("pk", "tenant_id", "metadata")[:BATCH]
    ):
        last = batch[-1].pk
        changed = []
        for fact in batch:
            value = fact.metadata.get(KEY) if isinstance(fact.metadata, dict) else None
            if not isinstance(value, str) or not value or len(value) > MAX_LENGTH:
                continue
            if (fact.tenant_id, value) in seen:
                continue
            seen.add((fact.tenant_id, value))
            fact.external_id = value
            changed.append(fact)
        facts.bulk_update(changed, ["external_id"], batch_size=BATCH)


def copy_to_metadata(apps, schema_editor):  # type: ignore[no-untyped-def]
    fact_model = apps.get_model("facts_app", "Fact")
    facts = fact_model._default_manager.using(schema_editor.connection.alias)
    last = 0
    while batch := list(
        facts.filter(pk__gt=last, external_id__isnull=False)
        .order_by("pk")
        .only("pk", "external_id", "metadata")[:BATCH]
    ):
        last = batch[-1].pk
        changed = []
        for fact in batch:
            metadata = fact.metadata if isinstance(fact.metadata, dict) else {}
            if metadata.get(KEY) != fact.external_id:
                fact.metadata = {**metadata, KEY: fact.external_id}
                changed.append(fact)
        facts.bulk_update(changed, ["metadata"], batch_size=BATCH)


class Migration(migrations.Migration):
    dependencies = [("facts_app", "0004_vectors")]

    operations = [
        migrations.AddField(
            model_name="fact",
            name="external_id",
            field=models.CharField(
                blank=True,
                help_text="The caller's own id for the fact (an import, a backfill): unique per "
                "tenant.",
                max_length=MAX_LENGTH,
                null=True,
            ),
        ),
        migrations.RunPython(copy_to_column, copy_to_metadata, elidable=False),
        migrations.AddConstraint(
            model_name="fact",
            constraint=models.UniqueConstraint(
                condition=Q(external_id__isnull=False),
                fields=("tenant", "external_id"),
                name="fact_unique_tenant_external_id",
            ),
        ),
    ]
