"""Lost retry (SPEC §1.8.1, ADR-0380 §2, ADR-0232 §3; RETRY-03..RETRY-11, RETRY-19).

One pure decision per candidate, with the precedence of B-23: DISABLED, UNSAFE, EXHAUSTED, then
schedule (`lost -> retry_wait`) or requeue (`retry_wait -> queued` with Attempt N+1). Every Event
is attributed to the reconciler; nothing here is a manual retry (ADR-0380 §4).
"""

from __future__ import annotations

from kernel.commands import LostRetryStep
from kernel.contracts import transition
from kernel.entities import Attempt, RunAggregate
from kernel.outcomes import Outcome, Raced, Rejected
from kernel.specs.codes import Code
from kernel.specs.states import (
    Actor,
    AttemptStatus,
    LostRetryDisposition,
    RunKind,
    RunOwner,
    RunStatus,
    Safety,
)
from kernel.transitions.clock import clock_regressed
from kernel.transitions.retry_policy import backoff_delay_ms, retry_enabled
from kernel.transitions.transaction import Tx

_FAILURES: dict[LostRetryDisposition, Code] = {
    LostRetryDisposition.FAILED_DISABLED: Code.RUN_LOST_RETRY_DISABLED,
    LostRetryDisposition.FAILED_UNSAFE: Code.RUN_LOST_RETRY_UNSAFE,
    LostRetryDisposition.FAILED_EXHAUSTED: Code.RUN_LOST_RETRY_EXHAUSTED,
}


def is_lost_retry_eligible(aggregate: RunAggregate) -> bool:
    """§1.8.1 eligibility, shared with candidate selection (§1.8.2): runtime-owned, ordinary,
    no cancellation intent, `lost` or `retry_wait`, latest Attempt `lost`."""
    run = aggregate.run
    latest = aggregate.latest_attempt
    return (
        run.owner is RunOwner.RUNTIME
        and run.kind is RunKind.ORDINARY
        and not run.has_cancel_intent
        and run.status in (RunStatus.LOST, RunStatus.RETRY_WAIT)
        and latest is not None
        and latest.status is AttemptStatus.LOST
    )


def retry_base_ms(aggregate: RunAggregate, latest: Attempt) -> int:
    """B-24: `base = max(run.created_at, latest.created_at, latest.finished_at)`."""
    return max(
        aggregate.run.created_at_ms,
        latest.created_at_ms,
        latest.finished_at_ms if latest.finished_at_ms is not None else 0,
    )


def decide(aggregate: RunAggregate, observed_at_ms: int) -> LostRetryDisposition | None:
    """The decision table R1..R6 of §1.8.1; `None` is R6 (not due)."""
    policy = aggregate.policy
    latest = aggregate.latest_attempt
    assert latest is not None
    if policy is None or not retry_enabled(policy.retry_on_lost, policy.max_attempts):
        return LostRetryDisposition.FAILED_DISABLED  # R1
    if policy.safety is Safety.UNKNOWN:
        return LostRetryDisposition.FAILED_UNSAFE  # R2
    if latest.number >= policy.max_attempts:
        return LostRetryDisposition.FAILED_EXHAUSTED  # R3
    if aggregate.run.status is RunStatus.LOST:
        return LostRetryDisposition.SCHEDULED  # R4
    due_at = policy.next_attempt_at_ms
    if due_at is not None and due_at <= observed_at_ms:
        return LostRetryDisposition.REQUEUED  # R5
    return None  # R6


@transition
def lost_retry_step(
    aggregate: RunAggregate | None, command: LostRetryStep, observed_at_ms: int
) -> Outcome:
    """One lost-retry step for one candidate. Ineligible: `Raced(NOT_ELIGIBLE)` (D-14), so a
    replay after a lost response or a stale candidate never creates Attempt N+2 (RETRY-09)."""
    now = observed_at_ms
    if aggregate is None or aggregate.run.run_id != command.run_id:
        return Raced(Code.NOT_ELIGIBLE)
    if not is_lost_retry_eligible(aggregate):
        return Raced(Code.NOT_ELIGIBLE)
    run = aggregate.run
    latest = aggregate.latest_attempt
    assert latest is not None
    policy = aggregate.policy
    durable_times = [run.updated_at_ms, latest.created_at_ms, latest.finished_at_ms or 0]
    if policy is not None:
        durable_times.append(policy.updated_at_ms)
    if clock_regressed(aggregate, now, *durable_times):
        return Rejected(Code.CLOCK_REGRESSION)  # V-5
    disposition = decide(aggregate, now)
    if disposition is None:
        return Rejected(Code.NOT_DUE)  # R6
    tx = Tx.begin(aggregate, command.name, now)
    if disposition in _FAILURES:  # R1..R3: fail closed, clear a pending cursor
        error = _FAILURES[disposition].value
        if policy is not None and policy.next_attempt_at_ms is not None:
            tx.set_policy(next_attempt_at_ms=None)
        tx.set_run(status=RunStatus.FAILED, error_code=error, finished_at_ms=now)
        tx.event(
            "run.failed", Actor.RECONCILER, code=error, payload=(("disposition", disposition),)
        )
        return tx.commit(Code(disposition.value))
    assert policy is not None
    if disposition is LostRetryDisposition.SCHEDULED:  # R4
        due = retry_base_ms(aggregate, latest) + backoff_delay_ms(
            policy.backoff_base_ms, policy.backoff_max_ms, latest.number
        )
        tx.set_policy(next_attempt_at_ms=due)
        tx.set_run(status=RunStatus.RETRY_WAIT)
        tx.event("run.retry_wait", Actor.RECONCILER, payload=(("next_attempt_at_ms", due),))
        return tx.commit(Code.SCHEDULED)
    # R5: requeue with exactly Attempt N+1, pristine; the lost Attempt is not touched.
    if aggregate.attempt(command.new_attempt_id) is not None:
        return Rejected(Code.ATTEMPT_ID_CONFLICT)
    tx.set_policy(next_attempt_at_ms=None)
    tx.set_run(status=RunStatus.QUEUED, queued_at_ms=now, error_code=None)
    tx.insert_attempt(
        Attempt(
            attempt_id=command.new_attempt_id,
            run_id=run.run_id,
            number=latest.number + 1,
            status=AttemptStatus.CLAIMED,
            executor_type=latest.executor_type,
            created_at_ms=now,
        )
    )
    tx.event("run.queued", Actor.RECONCILER)
    tx.event("attempt.claimed", Actor.RECONCILER, command.new_attempt_id)
    return tx.commit(Code.REQUEUED)
