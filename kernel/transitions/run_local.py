"""The local executor path L1..L5 (SPEC §1.7, §1.8.3, D-1; RETRY-18). Local Attempts have no
lease: the Run CAS of L1, committed before the spawn, is the same-host double-activation fence."""

from __future__ import annotations

from kernel.commands import ActivateLocal, CompleteLocal, RecordLocalHandle, RecordLocalStop
from kernel.contracts import transition
from kernel.entities import Attempt, Run, RunAggregate
from kernel.identity import digests_equal
from kernel.outcomes import Outcome, Raced, Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.states import (
    FINAL_ATTEMPT_STATUSES,
    OUTCOMES_OVER_INTENT,
    Actor,
    AttemptStatus,
    CompletionOutcome,
    RunOwner,
    RunStatus,
)
from kernel.transitions.clock import clock_regressed
from kernel.transitions.run_lease import outcome_error_code
from kernel.transitions.transaction import Tx


def _local_attempt(
    aggregate: RunAggregate | None, run_id: str, attempt_id: str
) -> tuple[RunAggregate, Attempt] | Rejected:
    if aggregate is None or aggregate.run.run_id != run_id:
        return Rejected(Code.RUN_NOT_FOUND)
    attempt = aggregate.attempt(attempt_id)
    if attempt is None:
        return Rejected(Code.ATTEMPT_NOT_FOUND)
    return aggregate, attempt


@transition
def activate_local(
    aggregate: RunAggregate | None, command: ActivateLocal, observed_at_ms: int
) -> Outcome:
    """L1 with the activation checks of §1.8.3: only the latest `claimed` Attempt of an
    uncancelled runtime `queued` Run with the local executor type. A second activation of the
    same Attempt finds it `starting` and is `Raced` (one spawn, RETRY-18)."""
    found = _local_attempt(aggregate, command.run_id, command.attempt_id)
    if isinstance(found, Rejected):
        return found
    agg, attempt = found
    run = agg.run
    if attempt is not agg.latest_attempt:
        return Rejected(Code.ATTEMPT_NOT_LATEST)
    if run.owner is not RunOwner.RUNTIME:
        return Rejected(Code.NOT_RUNTIME_OWNED)
    # An Attempt that was ever offered to a remote Worker (it has lease rows) is a remote
    # Attempt: activating it locally would give one Attempt two execution authorities.
    if attempt.executor_type != command.local_executor_type or attempt.lease_generation is not None:
        return Rejected(Code.EXECUTOR_TYPE_MISMATCH)
    if run.has_cancel_intent:
        return Rejected(Code.CANCEL_REQUESTED)
    if run.status is not RunStatus.QUEUED or attempt.status is not AttemptStatus.CLAIMED:
        return Raced(Code.NOT_ELIGIBLE)
    if command.callback_sequence <= attempt.callback_sequence:
        return Rejected(Code.CALLBACK_SEQUENCE_STALE)
    if clock_regressed(agg, observed_at_ms, run.updated_at_ms):
        return Rejected(Code.CLOCK_REGRESSION)
    tx = Tx.begin(agg, command.name, observed_at_ms)
    tx.set_attempt(
        attempt.attempt_id,
        status=AttemptStatus.STARTING,
        callback_sequence=command.callback_sequence,
        callback_token_sha256=command.callback_token_sha256,
    )
    tx.set_run(status=RunStatus.DISPATCHING)
    tx.event("run.dispatching", Actor.SCHEDULER)
    tx.event("attempt.starting", Actor.SCHEDULER, attempt.attempt_id)
    return tx.commit()


@transition
def record_local_handle(
    aggregate: RunAggregate | None, command: RecordLocalHandle, observed_at_ms: int
) -> Outcome:
    """L2: the durable handle and its start time (the handle fact, never a later clock read)."""
    found = _local_attempt(aggregate, command.run_id, command.attempt_id)
    if isinstance(found, Rejected):
        return found
    agg, attempt = found
    if not attempt.is_local:
        return Rejected(Code.INVALID_TRANSITION)
    if attempt.status in FINAL_ATTEMPT_STATUSES:
        return Replayed(Code.ALREADY_TERMINAL)
    if attempt.status is AttemptStatus.RUNNING:
        if attempt.executor_handle == command.executor_handle:
            return Replayed(Code.ALREADY_APPLIED)
        return Rejected(Code.HANDLE_CONFLICT)
    if attempt.status is not AttemptStatus.STARTING or agg.run.status is not RunStatus.DISPATCHING:
        return Rejected(Code.INVALID_TRANSITION)
    if command.started_at_ms < attempt.created_at_ms:
        return Rejected(Code.START_TIME_INVALID)
    if clock_regressed(agg, observed_at_ms, agg.run.updated_at_ms):
        return Rejected(Code.CLOCK_REGRESSION)
    tx = Tx.begin(agg, command.name, observed_at_ms)
    tx.set_attempt(
        attempt.attempt_id,
        status=AttemptStatus.RUNNING,
        executor_handle=command.executor_handle,
        started_at_ms=command.started_at_ms,
    )
    tx.set_run(status=RunStatus.RUNNING, started_at_ms=command.started_at_ms)
    tx.event("run.running", Actor.EXECUTOR)
    tx.event("attempt.running", Actor.EXECUTOR, attempt.attempt_id)
    return tx.commit()


def receipt_authenticated(attempt: Attempt, command: CompleteLocal) -> bool:
    """L3 authentication: ids equal, same callback sequence, constant-time digest equality,
    and the receipt's start time equals the recorded handle fact when there is one."""
    receipt = command.receipt
    return (
        attempt.callback_token_sha256 is not None
        and receipt.run_id == attempt.run_id
        and receipt.attempt_id == attempt.attempt_id
        and receipt.callback_sequence == attempt.callback_sequence
        and digests_equal(receipt.token_sha256, attempt.callback_token_sha256)
        and (attempt.started_at_ms is None or attempt.started_at_ms == receipt.started_at_ms)
    )


@transition
def complete_local(
    aggregate: RunAggregate | None, command: CompleteLocal, observed_at_ms: int
) -> Outcome:
    """L3: the first terminal fact wins; a later receipt is only cleaned up (O-2). Under a
    cancellation intent a receipt that is not `succeeded` ends the Attempt and the Run with the
    intent's status (L3 as amended by decision R-27): the receipt of a child stopped under the
    intent, applied after a crash lost the L4/L5 record, names the intent, not the signal."""
    found = _local_attempt(aggregate, command.run_id, command.attempt_id)
    if isinstance(found, Rejected):
        return found
    agg, attempt = found
    if not receipt_authenticated(attempt, command):
        return Rejected(Code.RECEIPT_UNAUTHENTICATED)
    if attempt.status in FINAL_ATTEMPT_STATUSES:
        return Replayed(Code.ALREADY_TERMINAL)
    if attempt.status not in (AttemptStatus.STARTING, AttemptStatus.RUNNING):
        return Rejected(Code.INVALID_TRANSITION)
    receipt = command.receipt
    if receipt.started_at_ms < attempt.created_at_ms:
        return Rejected(Code.START_TIME_INVALID)
    if clock_regressed(agg, observed_at_ms, agg.run.updated_at_ms):
        return Rejected(Code.CLOCK_REGRESSION)
    outcome = completion_status(agg.run, receipt.outcome).value
    error = outcome_error_code(outcome)
    tx = Tx.begin(agg, command.name, observed_at_ms)
    tx.set_attempt(
        attempt.attempt_id,
        status=AttemptStatus(outcome),
        exit_code=receipt.exit_code,
        finished_at_ms=observed_at_ms,
        started_at_ms=receipt.started_at_ms,
        error_code=error,
    )
    run_changes: dict[str, object] = {
        "status": RunStatus(outcome),
        "finished_at_ms": observed_at_ms,
        "error_code": error,
    }
    if agg.run.started_at_ms is None:
        run_changes["started_at_ms"] = receipt.started_at_ms
    tx.set_run(**run_changes)
    tx.event(f"run.{outcome}", Actor.EXECUTOR)
    tx.event(f"attempt.{outcome}", Actor.EXECUTOR, attempt.attempt_id)
    return tx.commit(Code.COMPLETED)


def completion_status(run: Run, outcome: CompletionOutcome) -> RunStatus:
    """The terminal status a local completion (L3, or §2.1 `completed` evidence) gives: its own
    outcome, unless the Run has a cancellation intent and the outcome is not one that stands over
    an intent (`OUTCOMES_OVER_INTENT`); then the intent's status, as L4/L5 would have recorded."""
    intent = run.intent_status
    if outcome in OUTCOMES_OVER_INTENT or intent is None:
        return RunStatus(outcome.value)
    return intent


@transition
def record_local_stop(
    aggregate: RunAggregate | None, command: RecordLocalStop, observed_at_ms: int
) -> Outcome:
    """L4 (`timeout` intent -> `timed_out`) and L5 (any other intent -> `cancelled`) after a
    conclusive stop of the recorded handle. Without an intent nothing is written."""
    found = _local_attempt(aggregate, command.run_id, command.attempt_id)
    if isinstance(found, Rejected):
        return found
    agg, attempt = found
    if not attempt.is_local:
        return Rejected(Code.INVALID_TRANSITION)
    if attempt.status in FINAL_ATTEMPT_STATUSES:
        return Replayed(Code.ALREADY_TERMINAL)
    run = agg.run
    intent = run.intent_status
    if intent is None:
        return Rejected(Code.STOP_NOT_APPLICABLE)
    if attempt.status is not AttemptStatus.RUNNING or run.status is not RunStatus.RUNNING:
        return Rejected(Code.INVALID_TRANSITION)
    if clock_regressed(agg, observed_at_ms, run.updated_at_ms):
        return Rejected(Code.CLOCK_REGRESSION)
    final = intent.value
    tx = Tx.begin(agg, command.name, observed_at_ms)
    tx.set_attempt(attempt.attempt_id, status=AttemptStatus(final), finished_at_ms=observed_at_ms)
    tx.set_run(status=RunStatus(final), finished_at_ms=observed_at_ms)
    tx.event(f"run.{final}", Actor.SYSTEM)
    tx.event(f"attempt.{final}", Actor.SYSTEM, attempt.attempt_id)
    return tx.commit(Code.STOPPED)
