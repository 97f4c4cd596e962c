"""Minimal cancellation (SPEC §1.9, B-28; RETRY-11; Appendix E-1): an intent, then convergence
when no execution is live. An intent always wins over retry. A remote execution whose lease
expired under the intent (T9) has no live authority left and converges too (E-1)."""

from __future__ import annotations

from kernel.commands import ConvergeCancel, RequestCancel
from kernel.contracts import transition
from kernel.entities import Payload, RunAggregate
from kernel.outcomes import Outcome, Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.states import (
    Actor,
    AttemptStatus,
    LeaseStatus,
    ReleaseReason,
    RunStatus,
)
from kernel.transitions.clock import clock_regressed
from kernel.transitions.run_lease import release_current_lease
from kernel.transitions.transaction import Tx

# §1.9: the Run states in which nothing can be executing (dispatching only with a `claimed`
# Attempt, which never has a process: activation commits before spawn).
_CONVERGEABLE = frozenset(
    {RunStatus.CREATED, RunStatus.QUEUED, RunStatus.LOST, RunStatus.RETRY_WAIT}
)


#: E-1: the Run statuses a `starting` / `running` latest Attempt pairs with (I-2).
_STARTED_RUN = frozenset({RunStatus.DISPATCHING, RunStatus.RUNNING})
_STARTED = frozenset({AttemptStatus.STARTING, AttemptStatus.RUNNING})


def has_revoked_remote_authority(aggregate: RunAggregate) -> bool:
    """Appendix E-1: the latest Attempt is a remote one (it holds a lease row; R-3) in `starting`
    or `running`, and its current lease was released `lease_expired` (T9, which only revokes
    the authority of an execution whose Run has an intent): no Worker may act on it any more,
    so nothing is live that the control plane could still stop or hear from."""
    run = aggregate.run
    latest = aggregate.latest_attempt
    if run.status not in _STARTED_RUN or latest is None or latest.status not in _STARTED:
        return False
    lease = aggregate.current_lease(latest)
    return (
        lease is not None
        and lease.status is LeaseStatus.RELEASED
        and lease.release_reason is ReleaseReason.LEASE_EXPIRED
    )


def has_no_live_execution(aggregate: RunAggregate) -> bool:
    """§1.9 and E-1: `created`, `queued`, `lost`, `retry_wait`, `dispatching` with a `claimed`
    Attempt, or a started remote Attempt whose authority T9 revoked."""
    run = aggregate.run
    latest = aggregate.latest_attempt
    if run.status in _CONVERGEABLE:
        return True
    claimed = (
        run.status is RunStatus.DISPATCHING
        and latest is not None
        and latest.status is AttemptStatus.CLAIMED
    )
    return claimed or has_revoked_remote_authority(aggregate)


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
    if clock_regressed(aggregate, observed_at_ms, run.updated_at_ms):
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
    cursor is cleared. With a live execution the execution control path stops it first.
    E-1: a started remote Attempt whose lease T9 revoked takes the same status too, its
    released lease stays as it is, and the Run's Event says `stop_unverified: true` (nobody
    confirmed that the Worker stopped); no Attempt is created."""
    if aggregate is None or aggregate.run.run_id != command.run_id:
        return Rejected(Code.RUN_NOT_FOUND)
    run = aggregate.run
    if run.status.terminal:
        return Replayed(Code.ALREADY_TERMINAL)
    final = run.intent_status
    if final is None:
        return Rejected(Code.NO_CANCEL_INTENT)
    if not has_no_live_execution(aggregate):
        return Rejected(Code.LIVE_EXECUTION)
    if clock_regressed(aggregate, observed_at_ms, run.updated_at_ms):
        return Rejected(Code.CLOCK_REGRESSION)
    tx = Tx.begin(aggregate, command.name, observed_at_ms)
    latest = aggregate.latest_attempt
    claimed = latest is not None and latest.status is AttemptStatus.CLAIMED
    revoked = has_revoked_remote_authority(aggregate)  # E-1
    ended = latest if claimed or revoked else None
    if ended is not None:
        release_current_lease(tx, ended, ReleaseReason.CANCELLED)  # only a `leased` one
        tx.set_attempt(
            ended.attempt_id, status=AttemptStatus(final.value), finished_at_ms=observed_at_ms
        )
    if aggregate.policy is not None and aggregate.policy.next_attempt_at_ms is not None:
        tx.set_policy(next_attempt_at_ms=None)
    tx.set_run(status=final, finished_at_ms=observed_at_ms)
    payload: Payload = (("stop_unverified", True),) if revoked else ()
    tx.event(f"run.{final}", Actor.SCHEDULER, payload=payload)
    if ended is not None:
        tx.event(f"attempt.{final}", Actor.SCHEDULER, ended.attempt_id)
    return tx.commit(Code.CONVERGED)
