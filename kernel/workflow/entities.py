"""Durable entities of a Workflow (SPEC §4.1, ADR-0229) as frozen values.

A Workflow is one aggregate Run: `WorkflowAggregate` holds that Run with its Task Attempts
(`core`, a `RunAggregate` with no policy and no lease rows), its immutable admission, one StepRun
per plan step and the immutable Task admission ledger. Every Workflow transition reads one and
returns one; a runner loads it, the kernel decides, the runner persists the effects.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel.entities import Attempt, Run, RunAggregate
from kernel.specs.workflow import StepRunStatus

__all__ = ["StepRun", "TaskAdmission", "WorkflowAdmission", "WorkflowAggregate"]


@dataclass(frozen=True, slots=True)
class WorkflowAdmission:
    """The immutable Workflow admission of a Run (§4.1): the plan it runs, by digest. Its
    existence is what marks a Run as a Workflow for recovery (§4.5, REC-07)."""

    run_id: str
    plan_name: str
    plan_digest: str
    step_count: int
    admitted_at_ms: int


@dataclass(frozen=True, slots=True)
class StepRun:
    """One StepRun (§4.1). `version` is the epoch: every change adds one. The plan columns
    (`step_key` .. `retry_backoff_ms`) are pinned at admission and never change; `depends_on`
    are step keys of the same Workflow, sorted."""

    step_run_id: str
    run_id: str
    step_key: str
    ordinal: int
    task_id: str
    task_revision: int
    executor_type: str
    depends_on: tuple[str, ...]
    max_attempts: int
    retry_backoff_ms: int
    status: StepRunStatus
    version: int
    created_at_ms: int
    updated_at_ms: int
    ready_at_ms: int | None = None
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    error_code: str | None = None


@dataclass(frozen=True, slots=True)
class TaskAdmission:
    """One immutable Task admission ledger entry (§4.1), keyed by `(step_run_id,
    step_run_version)` (§4.3, I-W1)."""

    attempt_id: str
    run_id: str
    step_run_id: str
    step_run_version: int
    plan_digest: str
    task_id: str
    task_revision: int
    executor_type: str
    attempt_number: int
    event_id: str
    admitted_at_ms: int


@dataclass(frozen=True, slots=True)
class WorkflowAggregate:
    """A Workflow Run with its Task Attempts, admission, StepRuns (in plan order) and ledger
    (in admission order)."""

    core: RunAggregate
    admission: WorkflowAdmission
    step_runs: tuple[StepRun, ...]
    ledger: tuple[TaskAdmission, ...] = ()

    @property
    def run(self) -> Run:
        return self.core.run

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        return self.core.attempts

    def attempt(self, attempt_id: str) -> Attempt | None:
        return self.core.attempt(attempt_id)

    def step_run(self, step_run_id: str) -> StepRun | None:
        for step in self.step_runs:
            if step.step_run_id == step_run_id:
                return step
        return None

    def step_by_key(self, step_key: str) -> StepRun | None:
        for step in self.step_runs:
            if step.step_key == step_key:
                return step
        return None

    def admission_for(self, step_run_id: str, version: int) -> TaskAdmission | None:
        for entry in self.ledger:
            if entry.step_run_id == step_run_id and entry.step_run_version == version:
                return entry
        return None

    def admission_of(self, attempt_id: str) -> TaskAdmission | None:
        for entry in self.ledger:
            if entry.attempt_id == attempt_id:
                return entry
        return None

    def attempts_of(self, step_run_id: str) -> tuple[Attempt, ...]:
        return tuple(a for a in self.core.attempts if a.step_run_id == step_run_id)
