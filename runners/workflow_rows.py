"""Rows <-> Workflow entities, shared by the runners (as `runners.rows` for the Run domain): the
columns of the three Workflow tables are the kernel entity field names (kernel/workflow), so the
named parameters of a row and the converters back from column values are the same for SQLite and
PostgreSQL. `depends_on` is stored as JSON text. Pure mapping: no SQL, no connection.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from kernel import Effect
from kernel.workflow import (
    InsertStepRun,
    InsertTaskAdmission,
    InsertWorkflowAdmission,
    StepRun,
    StepRunStatus,
    TaskAdmission,
    UpdateStepRun,
    WorkflowAdmission,
    WorkflowEffect,
)
from runners.rows import effect_statement

__all__ = [
    "ADMISSION_TYPES",
    "LEDGER_TYPES",
    "STEP_RUN_TYPES",
    "step_run_from_row",
    "workflow_effect_statement",
]


def _depends_on(value: Any) -> tuple[str, ...]:
    items = json.loads(value) if isinstance(value, str) else value
    return tuple(str(item) for item in items)


ADMISSION_TYPES: Final[Mapping[str, Callable[[Any], Any]]] = {}
STEP_RUN_TYPES: Final[Mapping[str, Callable[[Any], Any]]] = {
    "status": StepRunStatus,
    "depends_on": _depends_on,
}
LEDGER_TYPES: Final[Mapping[str, Callable[[Any], Any]]] = {}

_FIELDS: Final[Mapping[type, tuple[str, ...]]] = {
    cls: tuple(f.name for f in dataclasses.fields(cls))
    for cls in (WorkflowAdmission, StepRun, TaskAdmission)
}


def _params(row: WorkflowAdmission | StepRun | TaskAdmission) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _FIELDS[type(row)]:
        value = getattr(row, name)
        if isinstance(value, enum.Enum):
            value = value.value
        elif name == "depends_on":
            value = json.dumps(list(value), separators=(",", ":"))
        out[name] = value
    return out


def step_run_from_row(row: Mapping[str, Any]) -> StepRun:
    return StepRun(
        **{
            k: (v if v is None or k not in STEP_RUN_TYPES else STEP_RUN_TYPES[k](v))
            for k, v in row.items()
        }
    )


def workflow_effect_statement(effect: WorkflowEffect) -> tuple[str, dict[str, Any]]:
    """The named statement that persists `effect` (a Run-side effect, or one of the Workflow
    effects of `runners/*/sql/workflow.sql`) and its parameters, guard included."""
    if isinstance(effect, InsertWorkflowAdmission):
        return "insert_workflow_admission", _params(effect.row)
    if isinstance(effect, InsertStepRun):
        return "insert_step_run", _params(effect.row)
    if isinstance(effect, UpdateStepRun):
        return "update_step_run", _params(effect.row) | {
            "expected_version": effect.expected_version
        }
    if isinstance(effect, InsertTaskAdmission):
        return "insert_task_admission", _params(effect.row)
    run_effect: Effect = effect
    return effect_statement(run_effect)
