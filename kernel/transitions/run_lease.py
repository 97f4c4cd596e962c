"""Dispatch lease transitions T1..T10 with fencing (SPEC §1.7, LEASE-01..LEASE-12).

The fence check is one ordered list (B-16): the first failing field wins, and every rejection
writes nothing. Token comparison is on SHA-256 digests with `hmac.compare_digest` (§0.4).
"""

from __future__ import annotations

from kernel.commands import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    CompleteWithLease,
    ExpireWithLease,
    FailStart,
    Fence,
    GrantLease,
    RenewLease,
)
from kernel.contracts import transition
from kernel.entities import Attempt, Lease, RunAggregate, WorkerSession
from kernel.identity import digests_equal, offer_id
from kernel.outcomes import Outcome, Raced, Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.limits import LEASE_DURATION_MAX_MS, LEASE_DURATION_MIN_MS
from kernel.specs.profiles import LOST_REQUIRES_EVIDENCE
from kernel.specs.states import (
    FINAL_ATTEMPT_STATUSES,
    Actor,
    AttemptStatus,
    LeaseStatus,
    ReleaseReason,
    RunOwner,
    RunStatus,
    WorkerSessionStatus,
)
from kernel.transitions.clock import clock_regressed
from kernel.transitions.transaction import Tx

_Fenced = AcknowledgeStarting | RenewLease | AcknowledgeRunning | FailStart | CompleteWithLease


def fence_identity(
    aggregate: RunAggregate | None, command: _Fenced
) -> tuple[Attempt, Lease] | Rejected:
    """Fence checks 1-7 of B-16: who is asking, for which lease, with which capability."""
    fence: Fence = command.fence
    attempt = aggregate.attempt(command.attempt_id) if aggregate is not None else None
    lease = (
        aggregate.lease(command.attempt_id, fence.lease_generation)
        if aggregate is not None and attempt is not None
        else None
    )
    if attempt is None or lease is None:
        return Rejected(Code.LEASE_MISSING)
    if lease.run_id != command.run_id:
        return Rejected(Code.LEASE_RUN_MISMATCH)
    if lease.worker_id != fence.worker_id:
        return Rejected(Code.LEASE_WORKER_MISMATCH)
    if lease.worker_session_id != fence.worker_session_id:
        return Rejected(Code.LEASE_WORKER_SESSION_MISMATCH)
    if lease.worker_generation != fence.worker_generation:
        return Rejected(Code.LEASE_WORKER_GENERATION_MISMATCH)
    if attempt.lease_generation != fence.lease_generation:
        return Rejected(Code.LEASE_GENERATION_MISMATCH)
    if not digests_equal(lease.token_digest, fence.lease_token.digest()):
        return Rejected(Code.LEASE_TOKEN_MISMATCH)
    return attempt, lease


def worker_is_current(worker: WorkerSession, lease: Lease, now: int) -> bool:
    """The Worker session named by the lease is current, unexpired and not offline; a
    `draining` session may still finish its leases (B-16)."""
    return (
        worker.worker_id == lease.worker_id
        and worker.session_id == lease.worker_session_id
        and worker.generation == lease.worker_generation
        and worker.status is not WorkerSessionStatus.OFFLINE
        and worker.session_expires_at_ms > now
    )


def fence_live(lease: Lease, command: _Fenced, now: int) -> Rejected | None:
    """Fence checks 8-12 of B-16: the lease is still the live authority at `now`."""
    if lease.status is not LeaseStatus.LEASED:
        return Rejected(Code.LEASE_NOT_LEASED)
    if lease.version != command.fence.expected_version:
        return Rejected(Code.LEASE_VERSION_MISMATCH)
    if lease.expires_at_ms <= now:
        return Rejected(Code.LEASE_EXPIRED)
    if not worker_is_current(command.worker, lease, now):
        return Rejected(Code.WORKER_UNAVAILABLE)
    if now < lease.updated_at_ms:
        return Rejected(Code.CLOCK_REGRESSION)
    return None


def _released_replay(attempt: Attempt, lease: Lease) -> Replayed | Rejected | None:
    """T2x/T4r on an Attempt that moved on. A `released` lease means the authority was revoked
    (lost, start failure, cancellation): the old fence is rejected (LEASE-09); a `completed`
    lease means the Attempt finished under this very fence, which is a replay."""
    if attempt.status is AttemptStatus.RUNNING or attempt.status in FINAL_ATTEMPT_STATUSES:
        if lease.status is LeaseStatus.RELEASED:
            return Rejected(Code.LEASE_NOT_LEASED)
        if attempt.status is AttemptStatus.RUNNING:
            return Replayed(Code.ALREADY_RUNNING)
        return Replayed(Code.ALREADY_TERMINAL)
    return None


def _duration_ok(duration_ms: int) -> bool:
    return LEASE_DURATION_MIN_MS <= duration_ms <= LEASE_DURATION_MAX_MS


@transition
def grant_lease(
    aggregate: RunAggregate | None, command: GrantLease, observed_at_ms: int
) -> Outcome:
    """T1: `queued / claimed / none live` -> `dispatching / claimed / leased` (generation
    max+1, version 1). The raw token is hashed here and never stored (I-9)."""
    now = observed_at_ms
    if aggregate is None or aggregate.run.run_id != command.run_id:
        return Rejected(Code.RUN_NOT_FOUND)
    run = aggregate.run
    attempt = aggregate.attempt(command.attempt_id)
    if attempt is None:
        return Rejected(Code.ATTEMPT_NOT_FOUND)
    if attempt is not aggregate.latest_attempt:
        return Rejected(Code.ATTEMPT_NOT_LATEST)
    if run.owner is not RunOwner.RUNTIME:
        return Rejected(Code.NOT_RUNTIME_OWNED)
    if run.status is not RunStatus.QUEUED or attempt.status is not AttemptStatus.CLAIMED:
        return Raced(Code.NOT_ELIGIBLE)
    if run.has_cancel_intent:
        return Rejected(Code.CANCEL_REQUESTED)
    worker = command.worker
    if worker.status is not WorkerSessionStatus.ONLINE or worker.session_expires_at_ms <= now:
        return Rejected(Code.WORKER_UNAVAILABLE)
    if attempt.executor_type not in worker.executor_types:
        return Rejected(Code.EXECUTOR_TYPE_MISMATCH)
    if not _duration_ok(command.lease_duration_ms):
        return Rejected(Code.LEASE_DURATION_INVALID)
    previous = list(aggregate.leases_of(attempt.attempt_id))
    if clock_regressed(aggregate, now, run.updated_at_ms, *(x.updated_at_ms for x in previous)):
        return Rejected(Code.CLOCK_REGRESSION)
    generation = max((x.lease_generation for x in previous), default=0) + 1
    tx = Tx.begin(aggregate, command.name, now)
    tx.insert_lease(
        Lease(
            attempt_id=attempt.attempt_id,
            run_id=run.run_id,
            lease_generation=generation,
            status=LeaseStatus.LEASED,
            version=1,
            worker_id=worker.worker_id,
            worker_session_id=worker.session_id,
            worker_generation=worker.generation,
            token_digest=command.lease_token.digest(),
            acquired_at_ms=now,
            renewed_at_ms=now,
            expires_at_ms=now + command.lease_duration_ms,
            updated_at_ms=now,
        )
    )
    tx.set_attempt(
        attempt.attempt_id,
        worker_id=worker.worker_id,
        worker_session_id=worker.session_id,
        worker_generation=worker.generation,
        offer_id=offer_id(
            attempt.attempt_id, generation, worker.worker_id, worker.session_id, worker.generation
        ),
        lease_generation=generation,
        lease_version=1,
    )
    tx.set_run(status=RunStatus.DISPATCHING)
    tx.event("run.dispatching", Actor.SCHEDULER)
    return tx.commit(Code.GRANTED)


@transition
def acknowledge_starting(
    aggregate: RunAggregate | None, command: AcknowledgeStarting, observed_at_ms: int
) -> Outcome:
    """T2 (`claimed -> starting`, lease version+1), T2r (already `starting`: replay without
    comparing the version, B-17), T2x (running or terminal: replay)."""
    checked = fence_identity(aggregate, command)
    if isinstance(checked, Rejected):
        return checked
    assert aggregate is not None
    attempt, lease = checked
    moved_on = _released_replay(attempt, lease)
    if moved_on is not None:
        return moved_on
    if attempt.status is AttemptStatus.STARTING and lease.status is LeaseStatus.LEASED:
        return Replayed(Code.ALREADY_APPLIED)
    refused = fence_live(lease, command, observed_at_ms)
    if refused is not None:
        return refused
    if clock_regressed(aggregate, observed_at_ms, aggregate.run.updated_at_ms):
        return Rejected(Code.CLOCK_REGRESSION)
    tx = Tx.begin(aggregate, command.name, observed_at_ms)
    tx.set_lease(attempt.attempt_id, lease.lease_generation)
    tx.set_attempt(attempt.attempt_id, status=AttemptStatus.STARTING)
    tx.event("attempt.starting", Actor.WORKER, attempt.attempt_id)
    return tx.commit()


@transition
def renew_lease(
    aggregate: RunAggregate | None, command: RenewLease, observed_at_ms: int
) -> Outcome:
    """T3: extend a live lease of a `starting`/`running` Attempt; lease version+1 and the
    Attempt mirror only. `Run.version` is unchanged: the lease CAS protects a renew (V-1, D-7)."""
    checked = fence_identity(aggregate, command)
    if isinstance(checked, Rejected):
        return checked
    assert aggregate is not None
    attempt, lease = checked
    refused = fence_live(lease, command, observed_at_ms)
    if refused is not None:
        return refused
    if attempt.status not in (AttemptStatus.STARTING, AttemptStatus.RUNNING):
        return Rejected(Code.INVALID_TRANSITION)
    if not _duration_ok(command.lease_duration_ms):
        return Rejected(Code.LEASE_DURATION_INVALID)
    tx = Tx.begin(aggregate, command.name, observed_at_ms)
    tx.set_lease(
        attempt.attempt_id,
        lease.lease_generation,
        renewed_at_ms=observed_at_ms,
        expires_at_ms=observed_at_ms + command.lease_duration_ms,
    )
    return tx.commit(bump_run=False)


@transition
def acknowledge_running(
    aggregate: RunAggregate | None, command: AcknowledgeRunning, observed_at_ms: int
) -> Outcome:
    """T4 (`starting -> running`, records the handle fact), T4r (same handle: replay)."""
    checked = fence_identity(aggregate, command)
    if isinstance(checked, Rejected):
        return checked
    assert aggregate is not None
    attempt, lease = checked
    if attempt.status is AttemptStatus.RUNNING and lease.status is LeaseStatus.LEASED:
        if attempt.executor_handle == command.executor_handle:
            return Replayed(Code.ALREADY_APPLIED)
        return Rejected(Code.HANDLE_CONFLICT)
    moved_on = _released_replay(attempt, lease)
    if moved_on is not None:
        return moved_on
    refused = fence_live(lease, command, observed_at_ms)
    if refused is not None:
        return refused
    if attempt.status is not AttemptStatus.STARTING:
        return Rejected(Code.INVALID_TRANSITION)
    if command.started_at_ms < attempt.created_at_ms:
        return Rejected(Code.START_TIME_INVALID)
    if clock_regressed(aggregate, observed_at_ms, aggregate.run.updated_at_ms):
        return Rejected(Code.CLOCK_REGRESSION)
    tx = Tx.begin(aggregate, command.name, observed_at_ms)
    tx.set_lease(attempt.attempt_id, lease.lease_generation)
    tx.set_attempt(
        attempt.attempt_id,
        status=AttemptStatus.RUNNING,
        executor_handle=command.executor_handle,
        started_at_ms=command.started_at_ms,
    )
    tx.set_run(status=RunStatus.RUNNING, started_at_ms=command.started_at_ms)
    tx.event("run.running", Actor.WORKER)
    tx.event("attempt.running", Actor.WORKER, attempt.attempt_id)
    return tx.commit()


@transition
def fail_start(aggregate: RunAggregate | None, command: FailStart, observed_at_ms: int) -> Outcome:
    """T5 (B-18): the Run fails with `START_FAILED`, the lease is released (`start_failed`).
    The identical command after success is `Replayed(already_applied)`."""
    checked = fence_identity(aggregate, command)
    if isinstance(checked, Rejected):
        return checked
    assert aggregate is not None
    attempt, lease = checked
    if (
        attempt.status is AttemptStatus.FAILED
        and lease.status is LeaseStatus.RELEASED
        and lease.release_reason is ReleaseReason.START_FAILED
        and lease.version == command.fence.expected_version + 1
        and attempt.error_code == command.failure_code
    ):
        return Replayed(Code.ALREADY_APPLIED)
    refused = fence_live(lease, command, observed_at_ms)
    if refused is not None:
        return refused
    if attempt.status is not AttemptStatus.STARTING:
        return Rejected(Code.INVALID_TRANSITION)
    if clock_regressed(aggregate, observed_at_ms, aggregate.run.updated_at_ms):
        return Rejected(Code.CLOCK_REGRESSION)
    tx = Tx.begin(aggregate, command.name, observed_at_ms)
    tx.set_lease(
        attempt.attempt_id,
        lease.lease_generation,
        status=LeaseStatus.RELEASED,
        released_at_ms=observed_at_ms,
        release_reason=ReleaseReason.START_FAILED,
    )
    tx.set_attempt(
        attempt.attempt_id,
        status=AttemptStatus.FAILED,
        finished_at_ms=observed_at_ms,
        error_code=command.failure_code,
    )
    tx.set_run(
        status=RunStatus.FAILED, error_code=Code.START_FAILED.value, finished_at_ms=observed_at_ms
    )
    tx.event("run.failed", Actor.WORKER, code=Code.START_FAILED.value)
    tx.event("attempt.failed", Actor.WORKER, attempt.attempt_id, code=command.failure_code)
    return tx.commit()


@transition
def complete_with_lease(
    aggregate: RunAggregate | None, command: CompleteWithLease, observed_at_ms: int
) -> Outcome:
    """T6 and the exact replay rule T6r (ADR-0021 §5.2, LEASE-03, LEASE-04)."""
    checked = fence_identity(aggregate, command)
    if isinstance(checked, Rejected):
        return checked
    assert aggregate is not None
    attempt, lease = checked
    # Exact replay: identity and token matched above; the lease completed under exactly the
    # version this request expected. Only then are liveness and time monotonicity skipped.
    if (
        lease.status is LeaseStatus.COMPLETED
        and lease.version == command.fence.expected_version + 1
    ):
        if (
            attempt.callback_sequence == command.callback_sequence
            and attempt.status.value == command.outcome.value
            and attempt.exit_code == command.exit_code
        ):
            return Replayed(Code.ALREADY_TERMINAL)
        return Rejected(Code.COMPLETION_CONFLICT)
    refused = fence_live(lease, command, observed_at_ms)
    if refused is not None:
        return refused
    if attempt.status not in (AttemptStatus.STARTING, AttemptStatus.RUNNING):
        return Rejected(Code.INVALID_TRANSITION)
    if command.callback_sequence <= attempt.callback_sequence:
        return Rejected(Code.CALLBACK_SEQUENCE_STALE)
    if clock_regressed(aggregate, observed_at_ms, aggregate.run.updated_at_ms):
        return Rejected(Code.CLOCK_REGRESSION)
    outcome = command.outcome.value
    tx = Tx.begin(aggregate, command.name, observed_at_ms)
    tx.set_lease(
        attempt.attempt_id,
        lease.lease_generation,
        status=LeaseStatus.COMPLETED,
        completed_at_ms=observed_at_ms,
    )
    error = outcome_error_code(outcome)
    tx.set_attempt(
        attempt.attempt_id,
        status=AttemptStatus(outcome),
        callback_sequence=command.callback_sequence,
        exit_code=command.exit_code,
        finished_at_ms=observed_at_ms,
        error_code=error,
    )
    tx.set_run(status=RunStatus(outcome), finished_at_ms=observed_at_ms, error_code=error)
    tx.event(f"run.{outcome}", Actor.WORKER)
    tx.event(f"attempt.{outcome}", Actor.WORKER, attempt.attempt_id)
    return tx.commit(Code.COMPLETED)


def outcome_error_code(outcome: str) -> str | None:
    """§1.2: a `failed` Run carries a stable `error_code`; a completion that reports `failed`
    records `EXECUTION_FAILED` on the Run and the Attempt (docs/decisions.md)."""
    return Code.EXECUTION_FAILED.value if outcome == "failed" else None


def release_current_lease(tx: Tx, attempt: Attempt, reason: ReleaseReason) -> None:
    """Release the Attempt's `leased` lease, if it has one, in the caller's transaction
    (§2.4: lost and the lease release are one fact; §1.9 for `cancelled`)."""
    if attempt.lease_generation is None:
        return
    lease = tx.lease(attempt.attempt_id, attempt.lease_generation)
    if lease.status is LeaseStatus.LEASED:
        tx.set_lease(
            attempt.attempt_id,
            attempt.lease_generation,
            status=LeaseStatus.RELEASED,
            released_at_ms=tx.now,
            release_reason=reason,
        )


def requeue_expired_claim(tx: Tx, attempt: Attempt) -> None:
    """T7 (B-19), also the cluster recovery of an expired non-pristine `claimed` Attempt
    (B-36): release the lease, clear the Worker binding so the Attempt can be granted again
    (generation + 1), and put the Run back to `queued`."""
    release_current_lease(tx, attempt, ReleaseReason.LEASE_EXPIRED)
    tx.set_attempt(
        attempt.attempt_id,
        worker_id=None,
        worker_session_id=None,
        worker_generation=None,
        offer_id=None,
    )
    tx.set_run(status=RunStatus.QUEUED, queued_at_ms=tx.now)
    tx.event("run.queued", Actor.RECONCILER)


def mark_lost(tx: Tx, attempt: Attempt, error_code: str | None) -> None:
    """T8 and recovery `not_running` (§2.2-§2.4): Attempt `lost` with
    `finished_at_ms = now` (V-6), the lease released (`lease_expired`) in the same transaction,
    Run `lost`, Events `run.lost` then `attempt.lost` by the reconciler."""
    release_current_lease(tx, attempt, ReleaseReason.LEASE_EXPIRED)
    tx.set_attempt(
        attempt.attempt_id,
        status=AttemptStatus.LOST,
        finished_at_ms=tx.now,
        error_code=error_code,
    )
    tx.set_run(status=RunStatus.LOST)
    tx.event("run.lost", Actor.RECONCILER)
    tx.event("attempt.lost", Actor.RECONCILER, attempt.attempt_id, code=error_code)


@transition
def expire_with_lease(
    aggregate: RunAggregate | None, command: ExpireWithLease, observed_at_ms: int
) -> Outcome:
    """T7..T10 with the profile flag E-1 (LEASE-05..LEASE-07, LEASE-12)."""
    now = observed_at_ms
    attempt = aggregate.attempt(command.attempt_id) if aggregate is not None else None
    lease = (
        aggregate.lease(command.attempt_id, command.lease_generation)
        if aggregate is not None and attempt is not None
        else None
    )
    if aggregate is None or attempt is None or lease is None:
        return Rejected(Code.LEASE_MISSING)
    if lease.run_id != command.run_id:
        return Rejected(Code.LEASE_RUN_MISMATCH)
    if attempt.lease_generation != lease.lease_generation or lease.status is not LeaseStatus.LEASED:
        return Replayed(Code.ALREADY_FINAL)  # T10
    if lease.expires_at_ms > now:
        return Replayed(Code.NOT_EXPIRED)  # T10
    if clock_regressed(aggregate, now, lease.updated_at_ms, aggregate.run.updated_at_ms):
        return Rejected(Code.CLOCK_REGRESSION)
    tx = Tx.begin(aggregate, command.name, now)
    if attempt.status is AttemptStatus.CLAIMED:  # T7
        requeue_expired_claim(tx, attempt)
        return tx.commit(Code.RELEASED)
    if aggregate.run.has_cancel_intent:  # T9: only revoke the old authority
        release_current_lease(tx, attempt, ReleaseReason.LEASE_EXPIRED)
        return tx.commit(Code.RELEASED)
    if LOST_REQUIRES_EVIDENCE[command.profile]:  # E-1 on cluster
        return Replayed(Code.EVIDENCE_REQUIRED)
    mark_lost(tx, attempt, Code.LEASE_EXPIRED.value)  # T8
    return tx.commit(Code.LOST)
