"""The model's own reading of the SPEC: small, independent encodings of the rules the machines
check the kernel against.

Nothing here imports a kernel transition or helper (`kernel.transitions.*`): a planted bug in
the kernel must not be able to change the oracle too. Only the entity, enum and code types are
shared. Each function states the SPEC rule it encodes; when the SPEC leaves an order open, the
function returns a set of acceptable outcome kinds rather than one exact code.
"""

from __future__ import annotations

from collections.abc import Mapping

from kernel import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    ActivateLocal,
    AdmitRun,
    Attempt,
    CompleteLocal,
    CompleteWithLease,
    ConvergeCancel,
    ExpireWithLease,
    FailStart,
    GrantLease,
    Lease,
    LostRetryStep,
    RecordLocalHandle,
    RecordLocalStop,
    RecoverLocalStartup,
    RecoverRuntime,
    RenewLease,
    RequestCancel,
    Run,
    RunAggregate,
    RunRetryPolicy,
    WorkerSession,
)
from kernel.commands import Command
from kernel.specs.codes import Code
from kernel.specs.states import (
    AttemptStatus,
    CancelReason,
    CompletionOutcome,
    LeaseStatus,
    Profile,
    ReleaseReason,
    RunKind,
    RunOwner,
    RunStatus,
    Safety,
    WorkerSessionStatus,
)

FencedCommand = (
    AcknowledgeStarting | RenewLease | AcknowledgeRunning | FailStart | CompleteWithLease
)
FENCED_TYPES = (AcknowledgeStarting, RenewLease, AcknowledgeRunning, FailStart, CompleteWithLease)

# §1.4 / B-10 lease duration bounds; §1.11 max_attempts; §1.8.1 exponent cap.
LEASE_MIN_MS = 5_000
LEASE_MAX_MS = 600_000
MAX_ATTEMPTS_LIMIT = 16
BACKOFF_LIMIT_MS = 86_400_000
EXPONENT_CAP = 15

# E-1: only edge and standalone make an expired started Attempt `lost` on expiry alone.
LOST_ON_EXPIRY = frozenset({Profile.EDGE, Profile.STANDALONE})

# The checklist item each lost-retry disposition proves.
LOST_RETRY_SPEC = {
    Code.FAILED_DISABLED: "RETRY-03",
    Code.FAILED_UNSAFE: "RETRY-04",
    Code.FAILED_EXHAUSTED: "RETRY-05",
    Code.SCHEDULED: "RETRY-06",
    Code.NOT_DUE: "RETRY-07",
    Code.REQUEUED: "RETRY-08",
}

LOST_RETRY_FAILURE_CODES = {
    Code.FAILED_DISABLED: Code.RUN_LOST_RETRY_DISABLED,
    Code.FAILED_UNSAFE: Code.RUN_LOST_RETRY_UNSAFE,
    Code.FAILED_EXHAUSTED: Code.RUN_LOST_RETRY_EXHAUSTED,
}


def addressed(aggregates: Mapping[str, RunAggregate], command: Command) -> RunAggregate | None:
    """The aggregate a command reaches: by its Attempt when it names one that exists (so a fence
    naming another Run is seen as `LEASE_RUN_MISMATCH`), else by its Run id."""
    attempt_id = getattr(command, "attempt_id", None)
    if isinstance(attempt_id, str) and command.name != "admit_run":
        for aggregate in aggregates.values():
            if aggregate.attempt(attempt_id) is not None:
                return aggregate
    return aggregates.get(command.run_id)


# -- fencing (§1.7, LEASE-02, LEASE-04, LEASE-09) ---------------------------------------------
def fence_identity_code(aggregate: RunAggregate | None, command: FencedCommand) -> Code | None:
    """Fence checks 1-7 in the SPEC's order (first failure wins); `None` when all pass."""
    fence = command.fence
    attempt = aggregate.attempt(command.attempt_id) if aggregate is not None else None
    lease = (
        aggregate.lease(command.attempt_id, fence.lease_generation)
        if aggregate is not None and attempt is not None
        else None
    )
    if attempt is None or lease is None:
        return Code.LEASE_MISSING
    if lease.run_id != command.run_id:
        return Code.LEASE_RUN_MISMATCH
    if lease.worker_id != fence.worker_id:
        return Code.LEASE_WORKER_MISMATCH
    if lease.worker_session_id != fence.worker_session_id:
        return Code.LEASE_WORKER_SESSION_MISMATCH
    if lease.worker_generation != fence.worker_generation:
        return Code.LEASE_WORKER_GENERATION_MISMATCH
    if attempt.lease_generation != fence.lease_generation:
        return Code.LEASE_GENERATION_MISMATCH
    if lease.token_digest != fence.lease_token.digest():
        return Code.LEASE_TOKEN_MISMATCH
    return None


def session_current(worker: WorkerSession, lease: Lease, at_ms: int) -> bool:
    """Fence check 11: the control plane's current session for the lease's Worker is the one the
    lease names, unexpired and not offline (draining may finish its leases)."""
    return (
        worker.worker_id == lease.worker_id
        and worker.session_id == lease.worker_session_id
        and worker.generation == lease.worker_generation
        and worker.status is not WorkerSessionStatus.OFFLINE
        and worker.session_expires_at_ms > at_ms
    )


def fence_live(lease: Lease, command: FencedCommand, at_ms: int) -> bool:
    """Fence checks 8-12: the lease is still the live authority for this exact request."""
    return (
        lease.status is LeaseStatus.LEASED
        and lease.version == command.fence.expected_version
        and lease.expires_at_ms > at_ms
        and session_current(command.worker, lease, at_ms)
        and at_ms >= lease.updated_at_ms
    )


# -- grant (T1) -------------------------------------------------------------------------------
def grant_allowed(aggregate: RunAggregate | None, command: Command, at_ms: int) -> bool:
    """Every guard of T1 holds (runtime, queued, latest claimed, no intent, Worker online and
    unexpired, executor type, duration, no clock regression)."""
    if aggregate is None or not isinstance(command, GrantLease):
        return False
    run = aggregate.run
    latest = aggregate.latest_attempt
    worker = command.worker
    previous = [lease for lease in aggregate.leases if lease.attempt_id == command.attempt_id]
    return (
        run.run_id == command.run_id
        and latest is not None
        and latest.attempt_id == command.attempt_id
        and run.owner is RunOwner.RUNTIME
        and run.status is RunStatus.QUEUED
        and latest.status is AttemptStatus.CLAIMED
        and not run.has_cancel_intent
        and worker.status is WorkerSessionStatus.ONLINE
        and worker.session_expires_at_ms > at_ms
        and latest.executor_type in worker.executor_types
        and LEASE_MIN_MS <= command.lease_duration_ms <= LEASE_MAX_MS
        and at_ms >= run.updated_at_ms
        and all(at_ms >= lease.updated_at_ms for lease in previous)
    )


# -- expiry (T7..T10, E-1; LEASE-05, LEASE-06, LEASE-07, LEASE-12) -----------------------------
def expected_expiry(
    aggregate: RunAggregate | None, command: ExpireWithLease, at_ms: int
) -> tuple[str, Code]:
    """The outcome (kind, code) of `expire_with_lease` by the rows of the table."""
    attempt = aggregate.attempt(command.attempt_id) if aggregate is not None else None
    lease = (
        aggregate.lease(command.attempt_id, command.lease_generation)
        if aggregate is not None and attempt is not None
        else None
    )
    if aggregate is None or attempt is None or lease is None:
        return "rejected", Code.LEASE_MISSING
    if lease.run_id != command.run_id:
        return "rejected", Code.LEASE_RUN_MISMATCH
    if attempt.lease_generation != lease.lease_generation or lease.status is not LeaseStatus.LEASED:
        return "replayed", Code.ALREADY_FINAL  # T10: not current, completed or released
    if lease.expires_at_ms > at_ms:
        return "replayed", Code.NOT_EXPIRED  # T10: live
    if at_ms < lease.updated_at_ms or at_ms < aggregate.run.updated_at_ms:
        return "rejected", Code.CLOCK_REGRESSION  # V-5
    if attempt.status is AttemptStatus.CLAIMED:
        return "applied", Code.RELEASED  # T7
    if aggregate.run.has_cancel_intent:
        return "applied", Code.RELEASED  # T9
    if command.profile not in LOST_ON_EXPIRY:
        return "replayed", Code.EVIDENCE_REQUIRED  # E-1 on cluster
    return "applied", Code.LOST  # T8


# -- lost retry (§1.8.1; RETRY-03..RETRY-09, RETRY-16) ------------------------------------------
def retry_enabled(policy: RunRetryPolicy | None) -> bool:
    """A-4 / R1: enabled iff a policy exists, `retry_on_lost` and `max_attempts > 1`."""
    return policy is not None and policy.retry_on_lost and policy.max_attempts > 1


def backoff_ms(base_ms: int, max_ms: int, lost_number: int) -> int:
    """§1.8.1: 0 when the base is 0, else `min(max, base * 2 ** min(n - 1, 15))`."""
    if base_ms == 0:
        return 0
    return min(max_ms, base_ms * (1 << min(lost_number - 1, EXPONENT_CAP)))


def failure_precedence(policy: RunRetryPolicy | None, lost_number: int) -> Code | None:
    """R1..R3 in the SPEC's precedence (DISABLED > UNSAFE > EXHAUSTED): the Run error code a lost
    Run must end with, or `None` when it may be retried."""
    if not retry_enabled(policy):
        return Code.RUN_LOST_RETRY_DISABLED
    assert policy is not None
    if policy.safety is Safety.UNKNOWN:
        return Code.RUN_LOST_RETRY_UNSAFE
    if lost_number >= policy.max_attempts:
        return Code.RUN_LOST_RETRY_EXHAUSTED
    return None


def attempts_allowed(policy: RunRetryPolicy | None) -> int:
    """How many Attempts a Run may ever have (RETRY-05): one without a safe enabled policy."""
    if not retry_enabled(policy) or policy is None or policy.safety is Safety.UNKNOWN:
        return 1
    return policy.max_attempts


def lost_retry_eligible(aggregate: RunAggregate) -> bool:
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


def lost_retry_source(aggregates: Mapping[str, RunAggregate], at_ms: int) -> list[str]:
    """§1.8.2 read independently of `kernel.selection`: every eligible `lost` Run by
    (latest Attempt's finish, run id), then every eligible `retry_wait` Run already due
    (`next_attempt_at_ms <= now`, RETRY-07) by (due time, run id); lost first (RETRY-15);
    Workflow, non-runtime and not-lost-latest Runs never (RETRY-12)."""
    lost: list[tuple[int, str]] = []
    due: list[tuple[int, str]] = []
    for run_id, agg in aggregates.items():
        if not lost_retry_eligible(agg):
            continue
        latest = agg.latest_attempt
        assert latest is not None
        if agg.run.status is RunStatus.LOST:
            lost.append((latest.finished_at_ms or 0, run_id))
        elif (
            agg.policy is not None
            and agg.policy.next_attempt_at_ms is not None
            and agg.policy.next_attempt_at_ms <= at_ms
        ):
            due.append((agg.policy.next_attempt_at_ms, run_id))
    return [run_id for _, run_id in sorted(lost)] + [run_id for _, run_id in sorted(due)]


def retry_base_ms(aggregate: RunAggregate, latest: Attempt) -> int:
    """§1.8.1: `base = max(run.created_at, latest.created_at, latest.finished_at)`."""
    finished = latest.finished_at_ms if latest.finished_at_ms is not None else 0
    return max(aggregate.run.created_at_ms, latest.created_at_ms, finished)


def expected_lost_retry(
    aggregate: RunAggregate | None, command: LostRetryStep, at_ms: int
) -> tuple[str, Code]:
    """The outcome (kind, code) of one `lost_retry_step` by eligibility, V-5 and R1..R6."""
    if aggregate is None or aggregate.run.run_id != command.run_id:
        return "raced", Code.NOT_ELIGIBLE
    if not lost_retry_eligible(aggregate):
        return "raced", Code.NOT_ELIGIBLE  # D-14
    latest = aggregate.latest_attempt
    assert latest is not None
    policy = aggregate.policy
    durable = [aggregate.run.updated_at_ms, latest.created_at_ms, latest.finished_at_ms or 0]
    if policy is not None:
        durable.append(policy.updated_at_ms)
    if at_ms < max(durable):
        return "rejected", Code.CLOCK_REGRESSION
    failure = failure_precedence(policy, latest.number)
    if failure is Code.RUN_LOST_RETRY_DISABLED:
        return "applied", Code.FAILED_DISABLED
    if failure is Code.RUN_LOST_RETRY_UNSAFE:
        return "applied", Code.FAILED_UNSAFE
    if failure is Code.RUN_LOST_RETRY_EXHAUSTED:
        return "applied", Code.FAILED_EXHAUSTED
    assert policy is not None
    if aggregate.run.status is RunStatus.LOST:
        return "applied", Code.SCHEDULED  # R4
    due = policy.next_attempt_at_ms
    if due is None or due > at_ms:
        return "rejected", Code.NOT_DUE  # R6
    if aggregate.attempt(command.new_attempt_id) is not None:
        return "rejected", Code.ATTEMPT_ID_CONFLICT
    return "applied", Code.REQUEUED  # R5


def pristine_retry_attempt(attempt: Attempt, number: int, executor_type: str) -> bool:
    """RETRY-08: Attempt N+1 is `claimed` with no worker, session, lease, offer, handle, start
    time or callback fields."""
    return (
        attempt.number == number
        and attempt.status is AttemptStatus.CLAIMED
        and attempt.executor_type == executor_type
        and attempt.worker_id is None
        and attempt.worker_session_id is None
        and attempt.worker_generation is None
        and attempt.offer_id is None
        and attempt.lease_generation is None
        and attempt.lease_version is None
        and attempt.executor_handle is None
        and attempt.started_at_ms is None
        and attempt.callback_sequence == 0
        and attempt.callback_token_sha256 is None
        and attempt.finished_at_ms is None
        and attempt.exit_code is None
        and attempt.error_code is None
    )


# -- cancellation (§1.9) ----------------------------------------------------------------------
def cancel_final_status(reason: CancelReason | None) -> RunStatus:
    return RunStatus.TIMED_OUT if reason is CancelReason.TIMEOUT else RunStatus.CANCELLED


def local_completion_status(run: Run, outcome: CompletionOutcome) -> RunStatus:
    """Decision R-27 (L3 and §2.1 `completed` evidence of a local Attempt): a completion ends the
    Run with its outcome, except that under a cancellation intent anything but `succeeded` ends
    it with the intent's status, as the stop (L4/L5) would have."""
    if outcome is CompletionOutcome.SUCCEEDED or not run.has_cancel_intent:
        return RunStatus(outcome.value)
    return cancel_final_status(run.cancel_reason)


def authority_revoked(aggregate: RunAggregate) -> bool:
    """Appendix E-1: a `dispatching`/`running` Run whose latest Attempt is `starting` or
    `running` and whose lease row of the Attempt's current generation is `released` with
    reason `lease_expired` (T9): no Worker holds authority over it any more."""
    run = aggregate.run
    latest = aggregate.latest_attempt
    if (
        run.status not in (RunStatus.DISPATCHING, RunStatus.RUNNING)
        or latest is None
        or latest.status not in (AttemptStatus.STARTING, AttemptStatus.RUNNING)
    ):
        return False
    rows = [
        lease
        for lease in aggregate.leases
        if lease.attempt_id == latest.attempt_id
        and lease.lease_generation == latest.lease_generation
    ]
    return any(
        lease.status is LeaseStatus.RELEASED and lease.release_reason is ReleaseReason.LEASE_EXPIRED
        for lease in rows
    )


def no_live_execution(aggregate: RunAggregate) -> bool:
    """§1.9: `created`, `queued`, `lost`, `retry_wait`, or `dispatching` with a `claimed`
    Attempt (activation commits before spawn, so nothing can run); E-1: or a started remote
    Attempt whose authority T9 revoked."""
    run = aggregate.run
    latest = aggregate.latest_attempt
    if run.status in (RunStatus.CREATED, RunStatus.QUEUED, RunStatus.LOST, RunStatus.RETRY_WAIT):
        return True
    if authority_revoked(aggregate):
        return True
    return (
        run.status is RunStatus.DISPATCHING
        and latest is not None
        and latest.status is AttemptStatus.CLAIMED
    )


def expected_converge(aggregate: RunAggregate | None, run_id: str, at_ms: int) -> tuple[str, Code]:
    """The outcome (kind, code) of `converge_cancel` (§1.9, E-1, V-5; codes R-11, R-15)."""
    if aggregate is None or aggregate.run.run_id != run_id:
        return "rejected", Code.RUN_NOT_FOUND
    run = aggregate.run
    if run.status.terminal:
        return "replayed", Code.ALREADY_TERMINAL
    if not run.has_cancel_intent:
        return "rejected", Code.NO_CANCEL_INTENT
    if not no_live_execution(aggregate):
        return "rejected", Code.LIVE_EXECUTION
    if at_ms < run.updated_at_ms:
        return "rejected", Code.CLOCK_REGRESSION
    return "applied", Code.CONVERGED


# -- replays (RUN-03, LEASE-03, RETRY-09, RETRY-18, REC-11) -----------------------------------
def replay_outcome(command: Command) -> tuple[str, Code] | None:
    """The outcome of delivering exactly the same command again right after it committed (a
    lost response or a duplicate), by the replay rows of §1.6-§1.9 and §2; `None` for lost
    retry, whose next delivery may legitimately take the next step (R4 then R5)."""
    if isinstance(command, AcknowledgeStarting | AcknowledgeRunning | FailStart):
        return "replayed", Code.ALREADY_APPLIED  # T2r, T4r, T5 replay
    if isinstance(command, CompleteWithLease | CompleteLocal | ConvergeCancel | RecordLocalStop):
        return "replayed", Code.ALREADY_TERMINAL  # T6r, L3, §1.9, L4/L5
    if isinstance(command, RenewLease):
        return "rejected", Code.LEASE_VERSION_MISMATCH  # no replay row: the fence moved on
    if isinstance(command, ExpireWithLease):
        return "replayed", Code.ALREADY_FINAL  # T10
    if isinstance(command, RequestCancel):
        return "replayed", Code.ALREADY_APPLIED
    if isinstance(command, AdmitRun):
        return "replayed", Code.EXISTING
    if isinstance(command, RecordLocalHandle):
        return "replayed", Code.ALREADY_APPLIED  # L2
    if isinstance(command, GrantLease | ActivateLocal | RecoverLocalStartup | RecoverRuntime):
        return "raced", Code.NOT_ELIGIBLE  # no longer the selected candidate (L1, REC-11)
    return None
