"""The one thing seed 002 keeps that MemoryHub's task contexts have no column for.

Seed 002's `plan_id` on a task context is a free grouping string: a worker may group its tasks
under a plan no planner created. MemoryHub's task context links a plan of the tenant (a foreign
key: the task goes with its plan). When the string names a plan of the tenant, the compat
surface links that plan and stores nothing here; when it names none, the string is kept here,
beside the task, so the seed's client reads back what it wrote. Nothing else is duplicated.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import models

from memoryhub.accounts.models import TenantOwnedModel
from sessions_app.models import WORK_ID_MAX_LENGTH, TaskContext


class TaskPlanRef(TenantOwnedModel):
    """A task context's seed-002 `plan_id` when it names no plan of the tenant."""

    # Part of its task context, not a kind of its own in deletion counts (accounts.services).
    derived_data: ClassVar[bool] = True

    task = models.OneToOneField(
        TaskContext, on_delete=models.CASCADE, primary_key=True, related_name="seed002_plan_ref"
    )
    plan_id = models.CharField(max_length=WORK_ID_MAX_LENGTH)

    class Meta:
        indexes = [models.Index(fields=["tenant", "plan_id"], name="seed002_planref_plan")]

    def __str__(self) -> str:
        return f"{self.task_id} → {self.plan_id}"
