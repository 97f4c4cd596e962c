"""The Workflow rules every transition and every source shares (SPEC §4.3-§4.5), as pure
predicates over one `WorkflowAggregate`. The runners' SQL sources are checked against these
(the selection oracle); the transitions re-check them under the transaction.
"""

from __future__ import annotations

from kernel.entities import Attempt
from kernel.specs.codes import Code
from kernel.specs.states import AttemptStatus, RunStatus
from kernel.specs.workflow import StepRunStatus
from kernel.workflow.entities import StepRun, WorkflowAggregate

__all__ = [
    "admission_due",
    "dispatchable",
    "frontier_changes",
    "needs_convergence",
    "retry_left",
    "started_attempts",
    "task_launched",
    "workflow_regressed",
]

_STARTED = frozenset({AttemptStatus.STARTING, AttemptStatus.RUNNING})
_NEVER_LAUNCHED = Code.WORKFLOW_TASK_NEVER_LAUNCHED.value


def workflow_regressed(wf: WorkflowAggregate, observed_at_ms: int, *attempts: Attempt) -> bool:
    """V-5 / E-4 for a Workflow: the observation is earlier than the Run's last change, than any
    StepRun's, or than the recorded start time of an Attempt the command ends or changes (a
    handle fact may lie ahead of its commit). Only those Attempts' start times count: one Task's
    launcher clock running ahead must not refuse every other step's commands, the frontier and
    the cancellation of the whole Workflow (decision WF-5)."""
    times = [wf.run.updated_at_ms]
    times.extend(s.updated_at_ms for s in wf.step_runs)
    times.extend(a.started_at_ms for a in attempts if a.started_at_ms is not None)
    return observed_at_ms < max(times)


def open_for_tasks(wf: WorkflowAggregate) -> bool:
    """The parent takes Task admission and dispatch: `running` without cancellation intent."""
    return wf.run.status is RunStatus.RUNNING and not wf.run.has_cancel_intent


def admission_due(wf: WorkflowAggregate, step: StepRun, observed_at_ms: int) -> bool:
    """§4.3: a `ready` StepRun of an open parent, due, with no ledger entry at its epoch and
    attempts left."""
    return (
        open_for_tasks(wf)
        and step.status is StepRunStatus.READY
        and (step.ready_at_ms is None or step.ready_at_ms <= observed_at_ms)
        and wf.admission_for(step.step_run_id, step.version) is None
        and retry_left(wf, step)
    )


def dispatchable(wf: WorkflowAggregate, attempt: Attempt) -> bool:
    """§4.3 / D-15 / WF-04: the immutable ledger entry exists, the StepRun is exactly `ready` at
    the ledger's epoch, the Attempt is the ledger's and `claimed`, the parent `running` without
    cancellation intent."""
    entry = wf.admission_of(attempt.attempt_id)
    if entry is None or attempt.status is not AttemptStatus.CLAIMED:
        return False
    step = wf.step_run(entry.step_run_id)
    return (
        step is not None
        and attempt.step_run_id == step.step_run_id
        and step.status is StepRunStatus.READY
        and step.version == entry.step_run_version
        and open_for_tasks(wf)
    )


def retry_left(wf: WorkflowAggregate, step: StepRun) -> bool:
    """Another Task Attempt is allowed: fewer admissions than the step's `max_attempts`, not
    counting an Attempt proven never launched (decision WF-6: it never ran)."""
    admitted = 0
    for entry in wf.ledger:
        if entry.step_run_id != step.step_run_id:
            continue
        attempt = wf.attempt(entry.attempt_id)
        if attempt is None or attempt.error_code != _NEVER_LAUNCHED:
            admitted += 1
    return admitted < step.max_attempts


def task_launched(attempt: Attempt, journaled_identity: str | None) -> bool:
    """Whether a Task Attempt's launch may have happened (D-1, LR-9): a recorded handle, or the
    launcher's journal line written before the command is ever sent. Neither: nothing ran."""
    return attempt.executor_handle is not None or journaled_identity is not None


def started_attempts(wf: WorkflowAggregate) -> tuple[Attempt, ...]:
    """The live Task Attempts past the start barrier: their processes must be stopped exactly
    before a convergence (§4.4, §4.8)."""
    return tuple(a for a in wf.attempts if a.status in _STARTED)


def needs_convergence(wf: WorkflowAggregate) -> bool:
    """Phase 1 candidate: a non-terminal Workflow with a persisted cancellation intent."""
    return wf.run.status is RunStatus.RUNNING and wf.run.has_cancel_intent


def frontier_changes(wf: WorkflowAggregate) -> dict[str, StepRunStatus]:
    """What the frontier would do to each `pending` StepRun, in plan order with dependencies
    resolved within the same pass: dependencies all `succeeded` -> `ready`; one ended otherwise
    (or will, in this pass) -> `cancelled` (decision WF-2). Empty: nothing to promote."""
    status = {s.step_key: s.status for s in wf.step_runs}
    changes: dict[str, StepRunStatus] = {}
    progressed = True
    while progressed:  # at most one pass per step: the dependencies are acyclic
        progressed = False
        for step in wf.step_runs:
            if status[step.step_key] is not StepRunStatus.PENDING:
                continue
            deps = [status[d] for d in step.depends_on]
            if all(d is StepRunStatus.SUCCEEDED for d in deps):
                target = StepRunStatus.READY
            elif any(d.final and d is not StepRunStatus.SUCCEEDED for d in deps):
                target = StepRunStatus.CANCELLED
            else:
                continue
            status[step.step_key] = target
            changes[step.step_run_id] = target
            progressed = True
    return changes


def frontier_due(wf: WorkflowAggregate) -> bool:
    """Frontier candidate: an open parent with a StepRun to promote, or with every StepRun final
    (the parent's terminal status is due)."""
    if not open_for_tasks(wf):
        return False
    return bool(frontier_changes(wf)) or all(s.status.final for s in wf.step_runs)
