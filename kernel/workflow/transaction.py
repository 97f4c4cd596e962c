"""One Workflow transaction: the Run-side `Tx` (Run CAS and version, Attempts, Events) plus the
admission, StepRun and ledger rows, checked against the Workflow tables (§4.4, I-W4: Attempt,
StepRun, Run counters and Events change together or not at all, because they are one `Applied`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kernel.effects import AppendEvent
from kernel.entities import Run
from kernel.outcomes import Applied, Rejected
from kernel.specs.codes import Code
from kernel.specs.workflow import (
    STEP_RUN_TABLE,
    TASK_ATTEMPT_TABLE,
    WORKFLOW_RUN_TABLE,
    WorkflowCommandName,
)
from kernel.transitions.transaction import Tx
from kernel.workflow.effects import (
    InsertStepRun,
    InsertTaskAdmission,
    InsertWorkflowAdmission,
    UpdateStepRun,
    WorkflowEffect,
)
from kernel.workflow.entities import StepRun, TaskAdmission, WorkflowAdmission, WorkflowAggregate
from kernel.workflow.outcomes import WorkflowApplied

__all__ = ["WorkflowTx"]


class WorkflowTx(Tx):
    """A scratchpad for one Workflow transition call; never escapes it."""

    __slots__ = (
        "_inserted_steps",
        "_ledger_inserts",
        "_new_admission",
        "_step_order",
        "_steps",
        "admission",
        "old_workflow",
    )

    def __init__(
        self,
        old: WorkflowAggregate | None,
        command: str,
        now: int,
        run: Run,
        admission: WorkflowAdmission,
    ) -> None:
        super().__init__(old.core if old is not None else None, command, now, run)
        self.old_workflow = old
        self.admission = admission
        self._new_admission = old is None
        self._steps: dict[str, StepRun] = {}
        self._step_order: list[str] = []
        self._inserted_steps: set[str] = set()
        self._ledger_inserts: list[TaskAdmission] = []
        if old is not None:
            for step in old.step_runs:
                self._steps[step.step_run_id] = step
                self._step_order.append(step.step_run_id)

    @classmethod
    def begin_workflow(cls, old: WorkflowAggregate, command: str, now: int) -> WorkflowTx:
        return cls(old, command, now, old.run, old.admission)

    @classmethod
    def create_workflow(
        cls, run: Run, admission: WorkflowAdmission, command: str, now: int
    ) -> WorkflowTx:
        return cls(None, command, now, run, admission)

    # -- row changes -----------------------------------------------------------------------
    def step(self, step_run_id: str) -> StepRun:
        return self._steps[step_run_id]

    def steps(self) -> tuple[StepRun, ...]:
        return tuple(self._steps[i] for i in self._step_order)

    def insert_step(self, step: StepRun) -> None:
        self._steps[step.step_run_id] = step
        self._step_order.append(step.step_run_id)
        self._inserted_steps.add(step.step_run_id)

    def set_step(self, step_run_id: str, **changes: Any) -> None:
        """Every StepRun change is a new epoch: `version + 1` once per transaction (§4.1)."""
        before = self._original_step(step_run_id)
        current = self._steps[step_run_id]
        version = current.version if before is None else before.version + 1
        self._steps[step_run_id] = dataclasses.replace(
            current, **changes, version=version, updated_at_ms=self.now
        )

    def insert_admission(self, entry: TaskAdmission) -> None:
        self._ledger_inserts.append(entry)

    def _original_step(self, step_run_id: str) -> StepRun | None:
        old = self.old_workflow
        if old is None or step_run_id in self._inserted_steps:
            return None
        return old.step_run(step_run_id)

    # -- commit ----------------------------------------------------------------------------
    def commit_workflow(self, code: Code = Code.APPLIED) -> WorkflowApplied | Rejected:
        base = self.commit(code)
        if isinstance(base, Rejected):
            return base
        assert isinstance(base, Applied)
        if not self._steps_legal():
            return Rejected(Code.INVALID_TRANSITION)
        events = [e for e in base.effects if isinstance(e, AppendEvent)]
        effects: list[WorkflowEffect] = [e for e in base.effects if not isinstance(e, AppendEvent)]
        if self._new_admission:
            effects.append(InsertWorkflowAdmission(self.admission))
        for step_run_id in self._step_order:
            step = self._steps[step_run_id]
            before = self._original_step(step_run_id)
            if step_run_id in self._inserted_steps:
                effects.append(InsertStepRun(step))
            elif before is not None and step != before:
                effects.append(UpdateStepRun(step, expected_version=before.version))
        effects.extend(InsertTaskAdmission(entry) for entry in self._ledger_inserts)
        effects.extend(events)
        old_ledger = self.old_workflow.ledger if self.old_workflow is not None else ()
        aggregate = WorkflowAggregate(
            core=base.aggregate,
            admission=self.admission,
            step_runs=tuple(sorted(self._steps.values(), key=lambda s: s.ordinal)),
            ledger=(*old_ledger, *self._ledger_inserts),
        )
        return WorkflowApplied(aggregate, tuple(effects), code)

    def _legal(self, run: Run) -> bool:
        """Every status change is an edge of the Workflow tables for this command; a Workflow
        transaction touches only Task Attempts of this Run (same-Run StepRun fence, §4)."""
        try:
            cmd = WorkflowCommandName(self.command)
        except ValueError:
            return False
        old = self.old
        before_status = None if old is None else old.run.status
        if not WORKFLOW_RUN_TABLE.allows(before_status, cmd, run.status):
            return False
        old_attempts = {a.attempt_id: a for a in old.attempts} if old else {}
        for attempt_id, attempt in self._attempts.items():
            if attempt.step_run_id is None or attempt.step_run_id not in self._steps:
                return False
            if attempt_id in self._inserted_attempts:
                if not TASK_ATTEMPT_TABLE.allows(None, cmd, attempt.status):
                    return False
                continue
            prior = old_attempts[attempt_id]
            legal = TASK_ATTEMPT_TABLE.allows(prior.status, cmd, attempt.status)
            if attempt != prior and not legal:
                return False
        return not self._leases

    def _steps_legal(self) -> bool:
        cmd = WorkflowCommandName(self.command)
        for step_run_id, step in self._steps.items():
            before = self._original_step(step_run_id)
            if step_run_id in self._inserted_steps:
                if not STEP_RUN_TABLE.allows(None, cmd, step.status):
                    return False
            elif (
                before is not None
                and step != before
                and not STEP_RUN_TABLE.allows(before.status, cmd, step.status)
            ):
                return False
        return True
