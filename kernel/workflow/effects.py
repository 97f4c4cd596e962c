"""Workflow effects: what a runner persists for an applied Workflow transition, as data.

The Run-side effects (`kernel.effects`: Run CAS, Attempt insert/update, Events) keep their
meaning; a Workflow transaction adds the admission, StepRun and ledger rows. Order inside one
transaction: Run, Attempts, StepRuns, admission/ledger inserts, Events (the Run CAS first, so a
racing writer fails before it touches anything else). Each maps to one named SQL statement; an
update re-checks its guard and zero rows affected is `Raced`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel.effects import (
    Effect,
    EffectConflict,
    InsertLease,
    InsertPolicy,
    UpdateLease,
    UpdatePolicy,
    apply_effects,
)
from kernel.workflow.entities import StepRun, TaskAdmission, WorkflowAdmission, WorkflowAggregate

__all__ = [
    "InsertStepRun",
    "InsertTaskAdmission",
    "InsertWorkflowAdmission",
    "UpdateStepRun",
    "WorkflowEffect",
    "apply_workflow_effects",
]


@dataclass(frozen=True, slots=True)
class InsertWorkflowAdmission:
    row: WorkflowAdmission


@dataclass(frozen=True, slots=True)
class InsertStepRun:
    row: StepRun


@dataclass(frozen=True, slots=True)
class UpdateStepRun:
    """CAS on the epoch: `WHERE step_run_id = :id AND version = :expected_version`."""

    row: StepRun
    expected_version: int


@dataclass(frozen=True, slots=True)
class InsertTaskAdmission:
    """Unique `(step_run_id, step_run_version)` and unique `attempt_id` back I-W1."""

    row: TaskAdmission


WorkflowEffect = (
    Effect | InsertWorkflowAdmission | InsertStepRun | UpdateStepRun | InsertTaskAdmission
)


def apply_workflow_effects(
    before: WorkflowAggregate | None, effects: tuple[WorkflowEffect, ...]
) -> WorkflowAggregate:
    """Apply effects exactly as a runner's SQL must (every guard re-checked). The contracts
    check that this reproduces every applied Workflow aggregate."""
    run_effects: list[Effect] = []
    admission = before.admission if before is not None else None
    steps = {s.step_run_id: s for s in before.step_runs} if before is not None else {}
    order = [s.step_run_id for s in before.step_runs] if before is not None else []
    ledger = list(before.ledger) if before is not None else []
    for effect in effects:
        if isinstance(effect, InsertWorkflowAdmission):
            if admission is not None:
                raise EffectConflict(f"workflow admission {effect.row.run_id} exists")
            admission = effect.row
        elif isinstance(effect, InsertStepRun):
            if effect.row.step_run_id in steps:
                raise EffectConflict(f"step run {effect.row.step_run_id} exists")
            steps[effect.row.step_run_id] = effect.row
            order.append(effect.row.step_run_id)
        elif isinstance(effect, UpdateStepRun):
            current = steps.get(effect.row.step_run_id)
            if current is None or current.version != effect.expected_version:
                raise EffectConflict(f"step run {effect.row.step_run_id} epoch")
            steps[effect.row.step_run_id] = effect.row
        elif isinstance(effect, InsertTaskAdmission):
            row = effect.row
            if any(
                e.attempt_id == row.attempt_id
                or (e.step_run_id, e.step_run_version) == (row.step_run_id, row.step_run_version)
                for e in ledger
            ):
                raise EffectConflict(f"task admission {row.step_run_id}@{row.step_run_version}")
            ledger.append(row)
        elif isinstance(effect, InsertPolicy | UpdatePolicy | InsertLease | UpdateLease):
            raise EffectConflict("a Workflow transaction writes no policy or lease row")
        else:
            run_effects.append(effect)
    core = apply_effects(before.core if before is not None else None, tuple(run_effects))
    if admission is None:
        raise EffectConflict("no workflow admission")
    return WorkflowAggregate(
        core=core,
        admission=admission,
        step_runs=tuple(sorted((steps[i] for i in order), key=lambda s: s.ordinal)),
        ledger=tuple(ledger),
    )
