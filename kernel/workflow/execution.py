"""Task execution transitions (§4.4, ADR-0229 §2): prepare, running, start failure, completion,
timeout. Each advances the Task Attempt, its StepRun, the Run counters and the Events in one
transaction (I-W4) and never finishes the parent (I-W3): only the frontier does.

A failed or timed-out outcome with attempts left (the step's `max_attempts`) puts the StepRun
back to `ready` at a new epoch after `retry_backoff_ms`, so the next admission derives a new
Task Attempt id (decision WF-3); never under a cancellation intent.
"""

from __future__ import annotations

from kernel.commands import CompleteLocal
from kernel.entities import Attempt
from kernel.outcomes import Raced, Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.states import (
    FINAL_ATTEMPT_STATUSES,
    OUTCOMES_OVER_INTENT,
    Actor,
    AttemptStatus,
    CompletionOutcome,
)
from kernel.specs.workflow import StepRunStatus
from kernel.transitions.run_local import receipt_authenticated
from kernel.workflow.commands import (
    CompleteTask,
    FailTaskStart,
    PrepareTask,
    RecordTaskHandle,
    TimeOutTask,
)
from kernel.workflow.contracts import workflow_transition
from kernel.workflow.entities import StepRun, WorkflowAggregate
from kernel.workflow.outcomes import WorkflowOutcome
from kernel.workflow.rules import dispatchable, retry_left, workflow_regressed
from kernel.workflow.transaction import WorkflowTx

__all__ = [
    "complete_task",
    "fail_task_start",
    "finish_task",
    "prepare_task",
    "record_task_handle",
    "relaunch_task",
    "task_completion_status",
    "time_out_task",
]

_RETRYABLE = frozenset({AttemptStatus.FAILED, AttemptStatus.TIMED_OUT})


def _task(
    aggregate: WorkflowAggregate | None, run_id: str, attempt_id: str
) -> tuple[WorkflowAggregate, Attempt, StepRun] | Rejected:
    if aggregate is None or aggregate.run.run_id != run_id:
        return Rejected(Code.RUN_NOT_FOUND)
    attempt = aggregate.attempt(attempt_id)
    if attempt is None:
        return Rejected(Code.ATTEMPT_NOT_FOUND)
    step = aggregate.step_run(attempt.step_run_id or "")
    if step is None:
        return Rejected(Code.STEP_RUN_NOT_FOUND)
    return aggregate, attempt, step


def task_completion_status(wf: WorkflowAggregate, outcome: CompletionOutcome) -> AttemptStatus:
    """As L3 (decision R-27): under a cancellation intent an outcome other than `succeeded` is
    the intent's status; finished work stands."""
    intent = wf.run.intent_status
    if outcome in OUTCOMES_OVER_INTENT or intent is None:
        return AttemptStatus(outcome.value)
    return AttemptStatus(intent.value)


def finish_task(
    tx: WorkflowTx,
    wf: WorkflowAggregate,
    attempt: Attempt,
    step: StepRun,
    status: AttemptStatus,
    *,
    actor: Actor,
    error_code: str | None,
    step_error_code: str | None = None,
    retry: bool = True,
    **attempt_changes: object,
) -> None:
    """End one Task Attempt with `status` and its StepRun with the same status, or (WF-3) put
    the StepRun back to `ready` at a new epoch when the outcome is retryable and attempts are
    left. `lost` ends the StepRun `failed` (B-63)."""
    now = tx.now
    tx.set_attempt(
        attempt.attempt_id,
        status=status,
        finished_at_ms=now,
        error_code=error_code,
        **attempt_changes,
    )
    tx.event(f"attempt.{status}", actor, attempt.attempt_id, code=error_code)
    if retry and status in _RETRYABLE and not wf.run.has_cancel_intent and retry_left(wf, step):
        tx.set_step(
            step.step_run_id,
            status=StepRunStatus.READY,
            ready_at_ms=now + step.retry_backoff_ms,
            started_at_ms=None,
            finished_at_ms=None,
            error_code=None,
        )
        tx.event("step.ready", actor, step_run_id=step.step_run_id, payload=(("retry", True),))
        return
    step_status = StepRunStatus.FAILED if status is AttemptStatus.LOST else StepRunStatus(status)
    tx.set_step(
        step.step_run_id,
        status=step_status,
        finished_at_ms=now,
        error_code=step_error_code if step_error_code is not None else error_code,
    )
    tx.event(f"step.{step_status}", actor, step_run_id=step.step_run_id, code=error_code)


def relaunch_task(tx: WorkflowTx, attempt: Attempt, step: StepRun) -> None:
    """Decision WF-6: a prepared Task Attempt proven never launched (no handle, no launcher
    journal line, D-1) never ran, so it ends `lost` (`WORKFLOW_TASK_NEVER_LAUNCHED`, not counted
    against `max_attempts`) and its StepRun goes back to `ready` at a new epoch, exactly as the
    §4.5 orphan rule does for an Attempt that never ran: admission derives a new Attempt id."""
    code = Code.WORKFLOW_TASK_NEVER_LAUNCHED.value
    tx.set_attempt(attempt.attempt_id, status=AttemptStatus.LOST, finished_at_ms=tx.now,
                   error_code=code)  # fmt: skip
    tx.event("attempt.lost", Actor.RECONCILER, attempt.attempt_id, code=code)
    tx.set_step(step.step_run_id, status=StepRunStatus.READY, ready_at_ms=tx.now)
    tx.event("step.ready", Actor.RECONCILER, step_run_id=step.step_run_id, code=code)


@workflow_transition
def prepare_task(
    aggregate: WorkflowAggregate | None, command: PrepareTask, observed_at_ms: int
) -> WorkflowOutcome:
    """§4.4 prepare, the start barrier committed before the spawn: only a dispatchable Task
    Attempt (WF-04, D-15). A second prepare finds it `starting` and is `Raced` (one spawn)."""
    found = _task(aggregate, command.run_id, command.attempt_id)
    if isinstance(found, Rejected):
        return found
    wf, attempt, step = found
    if attempt.executor_type != command.local_executor_type:
        return Rejected(Code.EXECUTOR_TYPE_MISMATCH)
    if wf.run.has_cancel_intent:
        return Rejected(Code.CANCEL_REQUESTED)
    if not dispatchable(wf, attempt):
        return Raced(Code.NOT_ELIGIBLE)
    if command.callback_sequence <= attempt.callback_sequence:
        return Rejected(Code.CALLBACK_SEQUENCE_STALE)
    if workflow_regressed(wf, observed_at_ms, attempt):
        return Rejected(Code.CLOCK_REGRESSION)
    tx = WorkflowTx.begin_workflow(wf, command.name, observed_at_ms)
    tx.set_attempt(
        attempt.attempt_id,
        status=AttemptStatus.STARTING,
        callback_sequence=command.callback_sequence,
        callback_token_sha256=command.callback_token_sha256,
    )
    tx.set_step(step.step_run_id, status=StepRunStatus.RUNNING)
    tx.event("attempt.starting", Actor.SCHEDULER, attempt.attempt_id)
    tx.event("step.running", Actor.SCHEDULER, step_run_id=step.step_run_id)
    return tx.commit_workflow(Code.APPLIED)


@workflow_transition
def record_task_handle(
    aggregate: WorkflowAggregate | None, command: RecordTaskHandle, observed_at_ms: int
) -> WorkflowOutcome:
    """§4.4 running: the durable handle; Attempt and StepRun `started_at_ms` are the handle's
    start time, never a later clock read (§4.7, I-W5, WF-11)."""
    found = _task(aggregate, command.run_id, command.attempt_id)
    if isinstance(found, Rejected):
        return found
    wf, attempt, step = found
    if attempt.status in FINAL_ATTEMPT_STATUSES:
        return Replayed(Code.ALREADY_TERMINAL)
    if attempt.status is AttemptStatus.RUNNING:
        if attempt.executor_handle == command.executor_handle:
            return Replayed(Code.ALREADY_APPLIED)
        return Rejected(Code.HANDLE_CONFLICT)
    if attempt.status is not AttemptStatus.STARTING or step.status is not StepRunStatus.RUNNING:
        return Rejected(Code.INVALID_TRANSITION)
    if command.started_at_ms < attempt.created_at_ms:
        return Rejected(Code.START_TIME_INVALID)
    if workflow_regressed(wf, observed_at_ms, attempt):
        return Rejected(Code.CLOCK_REGRESSION)
    tx = WorkflowTx.begin_workflow(wf, command.name, observed_at_ms)
    tx.set_attempt(
        attempt.attempt_id,
        status=AttemptStatus.RUNNING,
        executor_handle=command.executor_handle,
        started_at_ms=command.started_at_ms,
    )
    tx.set_step(step.step_run_id, started_at_ms=command.started_at_ms)
    if wf.run.started_at_ms is None:
        tx.set_run(started_at_ms=command.started_at_ms)
    tx.event("attempt.running", Actor.EXECUTOR, attempt.attempt_id)
    return tx.commit_workflow(Code.APPLIED)


@workflow_transition
def fail_task_start(
    aggregate: WorkflowAggregate | None, command: FailTaskStart, observed_at_ms: int
) -> WorkflowOutcome:
    """§4.4 start failure: the spawn was refused after prepare; nothing ran."""
    found = _task(aggregate, command.run_id, command.attempt_id)
    if isinstance(found, Rejected):
        return found
    wf, attempt, step = found
    if attempt.status in FINAL_ATTEMPT_STATUSES:
        return Replayed(Code.ALREADY_TERMINAL)
    if attempt.status is not AttemptStatus.STARTING or step.status is not StepRunStatus.RUNNING:
        return Rejected(Code.INVALID_TRANSITION)
    if workflow_regressed(wf, observed_at_ms, attempt):
        return Rejected(Code.CLOCK_REGRESSION)
    tx = WorkflowTx.begin_workflow(wf, command.name, observed_at_ms)
    finish_task(
        tx, wf, attempt, step, AttemptStatus.FAILED, actor=Actor.EXECUTOR,
        error_code=Code.START_FAILED.value,
    )  # fmt: skip
    return tx.commit_workflow(Code.APPLIED)


@workflow_transition
def complete_task(
    aggregate: WorkflowAggregate | None, command: CompleteTask, observed_at_ms: int
) -> WorkflowOutcome:
    """§4.4 completion from the authenticated receipt: Attempt and StepRun take the outcome (or
    the StepRun a retry epoch, WF-3); the parent stays `running` (I-W3). As L3 (decision WF-7),
    a `starting` Attempt completes too: its receipt may be read before the handle fact was
    recorded, and it carries that start time, which is recorded from it (§4.7)."""
    found = _task(aggregate, command.run_id, command.attempt_id)
    if isinstance(found, Rejected):
        return found
    wf, attempt, step = found
    receipt = command.receipt
    # L3's own authentication (ids, callback sequence, constant-time digest, handle fact).
    if not receipt_authenticated(
        attempt, CompleteLocal(command.run_id, command.attempt_id, receipt)
    ):
        return Rejected(Code.RECEIPT_UNAUTHENTICATED)
    if attempt.status in FINAL_ATTEMPT_STATUSES:
        return Replayed(Code.ALREADY_TERMINAL)
    live = attempt.status in (AttemptStatus.STARTING, AttemptStatus.RUNNING)
    if not live or step.status is not StepRunStatus.RUNNING:
        return Rejected(Code.INVALID_TRANSITION)
    if receipt.started_at_ms < attempt.created_at_ms:
        return Rejected(Code.START_TIME_INVALID)
    if workflow_regressed(wf, observed_at_ms, attempt):
        return Rejected(Code.CLOCK_REGRESSION)
    status = task_completion_status(wf, receipt.outcome)
    error = _outcome_error(status)
    tx = WorkflowTx.begin_workflow(wf, command.name, observed_at_ms)
    finish_task(
        tx, wf, attempt, step, status, actor=Actor.EXECUTOR, error_code=error,
        exit_code=receipt.exit_code, started_at_ms=receipt.started_at_ms,
    )  # fmt: skip
    return tx.commit_workflow(Code.COMPLETED)


@workflow_transition
def time_out_task(
    aggregate: WorkflowAggregate | None, command: TimeOutTask, observed_at_ms: int
) -> WorkflowOutcome:
    """§4.4 timeout, after execution control stopped the process."""
    found = _task(aggregate, command.run_id, command.attempt_id)
    if isinstance(found, Rejected):
        return found
    wf, attempt, step = found
    if attempt.status in FINAL_ATTEMPT_STATUSES:
        return Replayed(Code.ALREADY_TERMINAL)
    if attempt.status is not AttemptStatus.RUNNING or step.status is not StepRunStatus.RUNNING:
        return Rejected(Code.INVALID_TRANSITION)
    if workflow_regressed(wf, observed_at_ms, attempt):
        return Rejected(Code.CLOCK_REGRESSION)
    tx = WorkflowTx.begin_workflow(wf, command.name, observed_at_ms)
    finish_task(tx, wf, attempt, step, AttemptStatus.TIMED_OUT, actor=Actor.SYSTEM, error_code=None)
    return tx.commit_workflow(Code.APPLIED)


def _outcome_error(status: AttemptStatus) -> str | None:
    return Code.EXECUTION_FAILED.value if status is AttemptStatus.FAILED else None
