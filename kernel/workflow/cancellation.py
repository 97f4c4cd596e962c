"""Whole-Workflow cancellation convergence (§4.4 phase 1, §4.8, WF-15, WF-16).

With a persisted cancellation intent on the parent (`request_workflow_cancel`), Attempts
that never started and StepRuns that never ran end at once; a started Task's process is stopped
first by execution control (`stops_needed` names them), and only then does one transaction end
the Attempts, every StepRun and the parent with the intent's status.
"""

from __future__ import annotations

from kernel.outcomes import Raced, Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.states import FINAL_ATTEMPT_STATUSES, Actor, AttemptStatus, RunStatus
from kernel.specs.workflow import StepRunStatus
from kernel.workflow.commands import ConvergeWorkflowCancel, RequestWorkflowCancel
from kernel.workflow.contracts import workflow_transition
from kernel.workflow.entities import WorkflowAggregate
from kernel.workflow.outcomes import WorkflowOutcome
from kernel.workflow.rules import needs_convergence, started_attempts, workflow_regressed
from kernel.workflow.transaction import WorkflowTx

__all__ = ["converge_workflow_cancel", "request_workflow_cancel", "stops_needed"]


def stops_needed(wf: WorkflowAggregate) -> tuple[str, ...]:
    """The Task Attempts whose processes execution control must stop exactly before the
    convergence may apply (§4.8): every started one."""
    if not needs_convergence(wf):
        return ()
    return tuple(a.attempt_id for a in started_attempts(wf))


@workflow_transition
def request_workflow_cancel(
    aggregate: WorkflowAggregate | None, command: RequestWorkflowCancel, observed_at_ms: int
) -> WorkflowOutcome:
    """Set the intent on a Workflow not yet terminal; an existing intent is a replay."""
    if aggregate is None or aggregate.run.run_id != command.run_id:
        return Rejected(Code.RUN_NOT_FOUND)
    run = aggregate.run
    if run.status.terminal:
        return Replayed(Code.ALREADY_TERMINAL)
    if run.has_cancel_intent:
        return Replayed(Code.ALREADY_APPLIED)
    if workflow_regressed(aggregate, observed_at_ms):
        return Rejected(Code.CLOCK_REGRESSION)
    tx = WorkflowTx.begin_workflow(aggregate, command.name, observed_at_ms)
    tx.set_run(cancel_requested_at_ms=observed_at_ms, cancel_reason=command.reason)
    tx.event("run.cancel_requested", command.actor, payload=(("reason", command.reason),))
    return tx.commit_workflow(Code.CANCEL_REQUESTED_APPLIED)


@workflow_transition
def converge_workflow_cancel(
    aggregate: WorkflowAggregate | None, command: ConvergeWorkflowCancel, observed_at_ms: int
) -> WorkflowOutcome:
    """End every live Task Attempt, every StepRun not final and the parent with the intent's
    status (`cancelled`, or `timed_out` for a deadline) in one transaction. Refused with
    `LIVE_EXECUTION` while a started Attempt is not among `stopped_attempt_ids`."""
    if aggregate is None or aggregate.run.run_id != command.run_id:
        return Rejected(Code.RUN_NOT_FOUND)
    wf = aggregate
    if wf.run.status.terminal:
        return Replayed(Code.ALREADY_TERMINAL)  # a lost response, replayed (WF-18)
    if not wf.run.has_cancel_intent:
        return Rejected(Code.NO_CANCEL_INTENT)
    if not needs_convergence(wf):
        return Raced(Code.NOT_ELIGIBLE)
    stopped = set(command.stopped_attempt_ids)
    if any(wf.attempt(attempt_id) is None for attempt_id in stopped):
        return Rejected(Code.ATTEMPT_NOT_FOUND)
    started = started_attempts(wf)
    if any(a.attempt_id not in stopped for a in started):
        return Rejected(Code.LIVE_EXECUTION)
    if workflow_regressed(wf, observed_at_ms, *started):
        return Rejected(Code.CLOCK_REGRESSION)
    intent = wf.run.intent_status
    assert intent is not None
    final = intent.value
    tx = WorkflowTx.begin_workflow(wf, command.name, observed_at_ms)
    for attempt in wf.attempts:
        if attempt.status in FINAL_ATTEMPT_STATUSES:
            continue
        tx.set_attempt(
            attempt.attempt_id, status=AttemptStatus(final), finished_at_ms=observed_at_ms
        )
        tx.event(f"attempt.{final}", Actor.SYSTEM, attempt.attempt_id)
    for step in wf.step_runs:
        if step.status.final:
            continue
        tx.set_step(step.step_run_id, status=StepRunStatus(final), finished_at_ms=observed_at_ms)
        tx.event(f"step.{final}", Actor.SYSTEM, step_run_id=step.step_run_id)
    tx.set_run(status=RunStatus(final), finished_at_ms=observed_at_ms)
    tx.event(f"run.{final}", Actor.SYSTEM)
    return tx.commit_workflow(Code.CONVERGED)
