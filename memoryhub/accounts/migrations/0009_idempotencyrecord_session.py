"""IdempotencyRecord.session_id: deleting or purging a session blanks the stored responses of
the writes to it (issue 14)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0008_audit_object_id_fits_every_id"),
    ]

    operations = [
        migrations.AddField(
            model_name="idempotencyrecord",
            name="session_id",
            field=models.UUIDField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="idempotencyrecord",
            index=models.Index(fields=["tenant", "session_id"], name="idempotency_tenant_session"),
        ),
    ]
