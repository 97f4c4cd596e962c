"""The Workflow frontier (§4.4, B-62): the only transition that finishes a Workflow normally."""

from __future__ import annotations

from kernel.outcomes import Raced, Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.states import Actor, RunStatus
from kernel.specs.workflow import StepRunStatus
from kernel.workflow.commands import AdvanceFrontier
from kernel.workflow.contracts import workflow_transition
from kernel.workflow.entities import WorkflowAggregate
from kernel.workflow.outcomes import WorkflowOutcome
from kernel.workflow.rules import frontier_changes, frontier_due, workflow_regressed
from kernel.workflow.transaction import WorkflowTx

__all__ = ["advance_frontier"]


@workflow_transition
def advance_frontier(
    aggregate: WorkflowAggregate | None, command: AdvanceFrontier, observed_at_ms: int
) -> WorkflowOutcome:
    """Promote every `pending` StepRun whose dependencies succeeded to `ready` (a new epoch),
    cancel those behind a dependency that ended otherwise (WF-2), and when every StepRun is final
    end the parent: `succeeded` if all succeeded, else `failed` (B-62). A parent with a
    cancellation intent is phase 1's, not the frontier's."""
    if aggregate is None or aggregate.run.run_id != command.run_id:
        return Rejected(Code.RUN_NOT_FOUND)
    wf = aggregate
    if wf.run.status.terminal:
        return Replayed(Code.ALREADY_TERMINAL)  # a lost response, replayed (WF-18)
    if not frontier_due(wf):
        return Raced(Code.NOT_ELIGIBLE)
    if workflow_regressed(wf, observed_at_ms):
        return Rejected(Code.CLOCK_REGRESSION)
    tx = WorkflowTx.begin_workflow(wf, command.name, observed_at_ms)
    for step_run_id, target in frontier_changes(wf).items():
        if target is StepRunStatus.READY:
            tx.set_step(step_run_id, status=target, ready_at_ms=observed_at_ms)
        else:
            tx.set_step(
                step_run_id,
                status=target,
                finished_at_ms=observed_at_ms,
                error_code=Code.WORKFLOW_DEPENDENCY_FAILED.value,
            )
        tx.event(f"step.{target}", Actor.SCHEDULER, step_run_id=step_run_id)
    steps = tx.steps()
    if all(s.status.final for s in steps):
        if all(s.status is StepRunStatus.SUCCEEDED for s in steps):
            tx.set_run(status=RunStatus.SUCCEEDED, finished_at_ms=observed_at_ms)
        else:
            tx.set_run(
                status=RunStatus.FAILED,
                finished_at_ms=observed_at_ms,
                error_code=Code.WORKFLOW_STEP_FAILED.value,
            )
        tx.event(f"run.{tx.run.status}", Actor.SCHEDULER)
    return tx.commit_workflow(Code.APPLIED)
