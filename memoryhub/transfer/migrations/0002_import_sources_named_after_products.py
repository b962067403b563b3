"""The import formats are named after the product whose store they read: the records earlier
imports kept under the old names move to the new ones, or a re-run under the new name would
import every record again."""

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

RENAMED = {"seed000": "basic-session", "seed001": "picobot", "seed003": "bub", "seed004": "sclaw"}


def _rename(apps: StateApps, *, names: dict[str, str]) -> None:
    imported_record = apps.get_model("transfer", "ImportedRecord")
    for old, new in names.items():
        imported_record.objects.filter(source=old).update(source=new)


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _rename(apps, names=RENAMED)


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _rename(apps, names={new: old for old, new in RENAMED.items()})


class Migration(migrations.Migration):
    dependencies = [
        ("transfer", "0001_initial"),
    ]

    operations = [
        migrations.AlterField(
            model_name="importedrecord",
            name="source",
            field=models.CharField(
                help_text='The import format: "memoryhub", "basic-session"…', max_length=32
            ),
        ),
        migrations.RunPython(forwards, backwards),
    ]
