"""Minimal cancellation (SPEC §1.9, B-28; RETRY-11): an intent, then convergence when no
execution is live. An intent always wins over retry."""

from __future__ import annotations

from kernel.commands import ConvergeCancel, RequestCancel
from kernel.contracts import transition
from kernel.entities import RunAggregate
from kernel.outcomes import Outcome, Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.states import (
    Actor,
    AttemptStatus,
    CancelReason,
    ReleaseReason,
    RunStatus,
)
from kernel.transitions.run_lease import release_current_lease
from kernel.transitions.transaction import Tx

# §1.9: the Run states in which nothing can be executing (dispatching only with a `claimed`
# Attempt, which never has a process: activation commits before spawn).
_CONVERGEABLE = frozenset(
    {RunStatus.CREATED, RunStatus.QUEUED, RunStatus.LOST, RunStatus.RETRY_WAIT}
)


def has_no_live_execution(aggregate: RunAggregate) -> bool:
    run = aggregate.run
    latest = aggregate.latest_attempt
    if run.status in _CONVERGEABLE:
        return True
    return (
        run.status is RunStatus.DISPATCHING
        and latest is not None
        and latest.status is AttemptStatus.CLAIMED
    )


@transition
def request_cancel(
    aggregate: RunAggregate | None, command: RequestCancel, observed_at_ms: int
) -> Outcome:
    """Set the intent on a non-terminal Run; an existing intent is a replay."""
    if aggregate is None or aggregate.run.run_id != command.run_id:
        return Rejected(Code.RUN_NOT_FOUND)
    run = aggregate.run
    if run.status.terminal:
        return Replayed(Code.ALREADY_TERMINAL)
    if run.has_cancel_intent:
        return Replayed(Code.ALREADY_APPLIED)
    if observed_at_ms < run.updated_at_ms:
        return Rejected(Code.CLOCK_REGRESSION)
    tx = Tx.begin(aggregate, command.name, observed_at_ms)
    tx.set_run(cancel_requested_at_ms=observed_at_ms, cancel_reason=command.reason)
    tx.event("run.cancel_requested", command.actor, payload=(("reason", command.reason),))
    return tx.commit(Code.CANCEL_REQUESTED_APPLIED)


@transition
def converge_cancel(
    aggregate: RunAggregate | None, command: ConvergeCancel, observed_at_ms: int
) -> Outcome:
    """Run -> `cancelled` (`timed_out` for a `timeout` intent, B-06); a `claimed` latest
    Attempt takes the same status; a `leased` lease is released (`cancelled`); the policy
    cursor is cleared. With a live execution the execution control path stops it first."""
    if aggregate is None or aggregate.run.run_id != command.run_id:
        return Rejected(Code.RUN_NOT_FOUND)
    run = aggregate.run
    if run.status.terminal:
        return Replayed(Code.ALREADY_TERMINAL)
    if not run.has_cancel_intent:
        return Rejected(Code.NO_CANCEL_INTENT)
    if not has_no_live_execution(aggregate):
        return Rejected(Code.LIVE_EXECUTION)
    if observed_at_ms < run.updated_at_ms:
        return Rejected(Code.CLOCK_REGRESSION)
    final = (
        RunStatus.TIMED_OUT if run.cancel_reason is CancelReason.TIMEOUT else RunStatus.CANCELLED
    )
    tx = Tx.begin(aggregate, command.name, observed_at_ms)
    latest = aggregate.latest_attempt
    claimed = latest is not None and latest.status is AttemptStatus.CLAIMED
    if latest is not None and claimed:
        release_current_lease(tx, latest, ReleaseReason.CANCELLED)
        tx.set_attempt(
            latest.attempt_id, status=AttemptStatus(final.value), finished_at_ms=observed_at_ms
        )
    if aggregate.policy is not None and aggregate.policy.next_attempt_at_ms is not None:
        tx.set_policy(next_attempt_at_ms=None)
    tx.set_run(status=final, finished_at_ms=observed_at_ms)
    tx.event(f"run.{final}", Actor.SCHEDULER)
    if latest is not None and claimed:
        tx.event(f"attempt.{final}", Actor.SCHEDULER, latest.attempt_id)
    return tx.commit(Code.CONVERGED)
