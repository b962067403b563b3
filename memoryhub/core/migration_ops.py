"""Migration operations Django has no equivalent of."""

from __future__ import annotations

from typing import Any

from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ProjectState


class DropForeignKeyIndex(Operation):
    """Drop the index Django made for a foreign key alone (its db_index), as a plain DROP INDEX
    on every backend. Paired with the field's AlterField(db_index=False) in a
    SeparateDatabaseAndState's state: on SQLite that AlterField rebuilds the whole table, and a
    rebuild drops the triggers that keep the full-text tables (core.fts) in step."""

    reversible = True
    reduces_to_sql = True

    def __init__(self, model_name: str, name: str) -> None:
        self.model_name = model_name
        self.name = name

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return self.__class__.__name__, [], {"model_name": self.model_name, "name": self.name}

    def state_forwards(self, app_label: str, state: ProjectState) -> None:
        """The state says it with the AlterField beside this operation."""

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        # Django's own helpers for index names and SQL, private and so not in django-stubs.
        editor: Any = schema_editor
        model = from_state.apps.get_model(app_label, self.model_name)
        column = model._meta.get_field(self.name).column
        # The index on exactly this one column that the model does not declare itself (a
        # longer index that leads with it, or the model's own on it, stays).
        declared = {index.name for index in model._meta.indexes}
        for index_name in editor._constraint_names(
            model, [column], index=True, unique=False, primary_key=False, exclude=declared
        ):
            editor.execute(editor._delete_index_sql(model, index_name))

    def database_backwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        editor: Any = schema_editor
        model = to_state.apps.get_model(app_label, self.model_name)
        field = model._meta.get_field(self.name)
        editor.execute(editor._create_index_sql(model, fields=[field]))

    def describe(self) -> str:
        return f"Drop the index of {self.model_name}.{self.name} alone"

    @property
    def migration_name_fragment(self) -> str:
        return f"drop_{self.model_name}_{self.name}_index"
