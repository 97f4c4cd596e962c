"""Planted bugs: mutated copies of kernel transitions that the models must catch (issue 3).

Each `Mutant` is a realistic small change of real kernel code: the mutated function below is a
copy of the original with one change, marked `# MUTATION:`. `Mutant.applied()` patches it in
where the kernel looks it up at call time:

- a helper (`fence_identity`, `decide`, `_delay`, ...) is replaced as a module attribute of the
  module whose transitions call it (a transition resolves its helpers through its module's
  globals on every call, so the icontract-wrapped transition runs the mutated helper);
- a whole transition is replaced in `kernel.transitions.TRANSITIONS`, the table that `apply`
  (and so the engine, the reference store and the models) dispatches through. The copy is
  decorated with the kernel's own `@transition` contracts, as the original is;
- a table entry (`LOST_REQUIRES_EVIDENCE`) is replaced by a copy with one entry changed.

`applied(contracts=False)` also strips the kernel's icontract pre/postconditions from every
transition and helper (the equivalent of `python -O`), so that a catch is known to come from the
models' own checks and not from the kernel checking itself.

Every mutant breaks a rule the SPEC states (its `spec` id is a registered property id; `rule`
names the row or sentence); none is an equivalent mutant: `probe` is a directed example on which
the mutated kernel answers differently (checked by `test_mutants.py`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import Any
from unittest import mock

import kernel.transitions as transitions_pkg
from kernel.commands import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    AdmitRun,
    Command,
    CompleteWithLease,
    ConvergeCancel,
    ExpireWithLease,
    Fence,
    GrantLease,
    LostRetryStep,
    PolicyDefinition,
    RecoverRuntime,
    RenewLease,
    RequestCancel,
)
from kernel.contracts import transition
from kernel.entities import Attempt, Lease, RunAggregate, WorkerSession
from kernel.evidence import CompletedEvidence, NotRunningEvidence
from kernel.identity import Secret, digests_equal
from kernel.outcomes import Applied, Outcome, Raced, Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.limits import BACKOFF_EXPONENT_CAP
from kernel.specs.profiles import LOST_REQUIRES_EVIDENCE
from kernel.specs.states import (
    FINAL_LEASE_STATUSES,
    Actor,
    AttemptStatus,
    CancelReason,
    CompletionOutcome,
    LeaseStatus,
    LostRetryDisposition,
    Profile,
    ReleaseReason,
    RunKind,
    RunOwner,
    RunStatus,
    Safety,
    WorkerSessionStatus,
)
from kernel.transitions import (
    retry_policy,
    run_admission,
    run_cancellation,
    run_lease,
    run_local,
    run_lost_retry,
    run_recovery,
)
from kernel.transitions.retry_policy import backoff_delay_ms, retry_enabled
from kernel.transitions.run_lease import (
    _released_replay,
    fence_identity,
    fence_live,
    mark_lost,
    outcome_error_code,
    release_current_lease,
    requeue_expired_claim,
    worker_is_current,
)
from kernel.transitions.run_lost_retry import (
    _FAILURES,
    decide,
    is_lost_retry_eligible,
    retry_base_ms,
)
from kernel.transitions.run_recovery import is_runtime_recovery_candidate, resolve_started
from kernel.transitions.transaction import Tx

__all__ = ["MUTANTS", "ModulePatch", "Mutant", "TransitionPatch", "by_name", "play"]

# The kernel modules whose transitions and helpers carry icontract contracts.
KERNEL_MODULES: tuple[ModuleType, ...] = (
    retry_policy,
    run_admission,
    run_cancellation,
    run_lease,
    run_local,
    run_lost_retry,
    run_recovery,
)

RawTransition = Callable[[RunAggregate | None, Any, int], Outcome]


# -- how a mutant is applied --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ModulePatch:
    """Replace `module.name` (a helper or a table the module's transitions look up)."""

    module: ModuleType
    name: str
    replacement: object


@dataclass(frozen=True, slots=True)
class TransitionPatch:
    """Replace the transition of `command` in `kernel.transitions.TRANSITIONS` with a mutated
    copy (given undecorated; it gets the kernel's `@transition` contracts unless they are off)."""

    command: type[Command]
    replacement: RawTransition


Patch = ModulePatch | TransitionPatch


def _is_contracted(value: object) -> bool:
    return callable(value) and hasattr(value, "__postconditions__")


def _raw(value: Any) -> Any:
    """The function under icontract's checker (`__wrapped__`), or the value itself."""
    return value.__wrapped__ if _is_contracted(value) else value


@functools.cache
def _contracted(fn: RawTransition) -> RawTransition:
    return transition(fn)


@dataclass(frozen=True, slots=True)
class Mutant:
    """One planted bug: what it breaks, how it is applied, and a directed example."""

    name: str
    spec: str  # a property id of kernel.specs.properties that the bug violates
    rule: str  # the SPEC rule or table row it breaks
    description: str  # the one change, in a line
    patches: tuple[Patch, ...]
    probe: Callable[[], Sequence[Step]]  # a directed script on which the mutant differs
    # The model the hunt starts with, by what the mutated code does: "retry" for code that
    # loses Attempts or retries them (the RetryExhaustionMachine's subject), "lifecycle" for
    # fencing, completion, replays and cancellation. The other engines follow (`hunt`).
    aim: str = "lifecycle"

    @contextmanager
    def applied(self, *, contracts: bool = True) -> Iterator[None]:
        """Patch the mutant in for the duration of the block (everything is restored after,
        also on an exception). `contracts=False` also turns the kernel's icontract checks off."""
        with ExitStack() as stack:
            table: dict[type, Any] = dict(transitions_pkg.TRANSITIONS)
            if not contracts:
                table = {command: _raw(fn) for command, fn in table.items()}
                for module in KERNEL_MODULES:
                    for name, value in list(vars(module).items()):
                        if _is_contracted(value):
                            stack.enter_context(mock.patch.object(module, name, _raw(value)))
            for patch in self.patches:
                if isinstance(patch, TransitionPatch):
                    fn = patch.replacement
                    table[patch.command] = _contracted(fn) if contracts else fn
                else:
                    stack.enter_context(
                        mock.patch.object(patch.module, patch.name, patch.replacement)
                    )
            stack.enter_context(
                mock.patch.object(transitions_pkg, "TRANSITIONS", MappingProxyType(table))
            )
            yield


# -- directed examples ---------------------------------------------------------------------------
T0 = 1_000_000
LEASE_MS = 5_000
RUN = "q1"
A1 = "q1-a1"
A2 = "q1-a2"
NEVER = 10**13
WORKER = WorkerSession("w1", "w1-s1", 1, WorkerSessionStatus.ONLINE, NEVER, ("shell",))
TOKEN = Secret.of("quality_probe_lease_token".ljust(40, "x"), "lease_token")
TOKEN_2 = Secret.of("quality_probe_lease_token_two".ljust(40, "x"), "lease_token")
RETRY = PolicyDefinition(2, True, Safety.IDEMPOTENT, 0, 0)
BACKOFF = PolicyDefinition(3, True, Safety.IDEMPOTENT, 1_000, 60_000)

Step = tuple[int, Command]


def fence(version: int, *, session: str = "w1-s1", token: Secret = TOKEN) -> Fence:
    return Fence("w1", session, 1, 1, token, version)


def started(policy: PolicyDefinition | None = RETRY) -> list[Step]:
    """Admit, grant (lease version 1, expiring at T0 + LEASE_MS), acknowledge starting (v2)."""
    return [
        (T0, AdmitRun(RUN, A1, "proj", "task", 1, "shell", policy)),
        (T0, GrantLease(RUN, A1, WORKER, TOKEN, LEASE_MS)),
        (T0 + 1, AcknowledgeStarting(RUN, A1, fence(1), WORKER)),
    ]


def lost(policy: PolicyDefinition | None = RETRY) -> list[Step]:
    """Attempt 1 started, then lost by lease expiry on edge (T8) exactly at its expiry."""
    return [*started(policy), (T0 + LEASE_MS, ExpireWithLease(RUN, A1, 1, Profile.EDGE))]


def requeued(policy: PolicyDefinition = RETRY) -> list[Step]:
    """Attempt 1 lost, scheduled (R4, no backoff) and requeued (R5) as Attempt 2."""
    due = T0 + LEASE_MS
    return [
        *lost(policy),
        (due, LostRetryStep(RUN, A2)),
        (due, LostRetryStep(RUN, A2)),
    ]


def play(script: Sequence[Step]) -> tuple[str, ...]:
    """Apply a script through `kernel.transitions.apply` (the dispatch the engine uses), one
    aggregate carried along; the observable result: every outcome, then the final aggregate
    and its Events."""
    agg: RunAggregate | None = None
    seen: list[str] = []
    events: list[str] = []
    for at, command in script:
        outcome = transitions_pkg.apply(agg, command, at)
        seen.append(f"{command.name} {outcome.kind.value} {outcome.code.value}")
        if isinstance(outcome, Applied):
            agg = outcome.aggregate
            events += [f"{e.seq} {e.type} {e.actor.value} {e.attempt_id}" for e in outcome.events]
    return (*seen, repr(agg), *events)


# -- the mutated code ----------------------------------------------------------------------------
# Lease fencing (SPEC §1.7, B-16) ------------------------------------------------------------------
def fence_identity_without_session(
    aggregate: RunAggregate | None, command: Any
) -> tuple[Attempt, Lease] | Rejected:
    """`run_lease.fence_identity` with fence check 4 (the Worker session) dropped."""
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
    # MUTATION: the session check is gone:
    #     if lease.worker_session_id != fence.worker_session_id:
    #         return Rejected(Code.LEASE_WORKER_SESSION_MISMATCH)
    if lease.worker_generation != fence.worker_generation:
        return Rejected(Code.LEASE_WORKER_GENERATION_MISMATCH)
    if attempt.lease_generation != fence.lease_generation:
        return Rejected(Code.LEASE_GENERATION_MISMATCH)
    if not digests_equal(lease.token_digest, fence.lease_token.digest()):
        return Rejected(Code.LEASE_TOKEN_MISMATCH)
    return attempt, lease


def worker_is_current_when_offline(worker: WorkerSession, lease: Lease, now: int) -> bool:
    """`run_lease.worker_is_current` without the `offline` clause of fence check 11."""
    return (
        worker.worker_id == lease.worker_id
        and worker.session_id == lease.worker_session_id
        and worker.generation == lease.worker_generation
        # MUTATION: `and worker.status is not WorkerSessionStatus.OFFLINE` dropped
        and worker.session_expires_at_ms > now
    )


def fence_live_at_expiry(lease: Lease, command: Any, now: int) -> Rejected | None:
    """`run_lease.fence_live` with `<` for `<=` in the expiry check (fence check 10)."""
    if lease.status is not LeaseStatus.LEASED:
        return Rejected(Code.LEASE_NOT_LEASED)
    if lease.version != command.fence.expected_version:
        return Rejected(Code.LEASE_VERSION_MISMATCH)
    if lease.expires_at_ms < now:  # MUTATION: `<=` -> `<` (a lease is live at its expiry)
        return Rejected(Code.LEASE_EXPIRED)
    if not worker_is_current(command.worker, lease, now):
        return Rejected(Code.WORKER_UNAVAILABLE)
    if now < lease.updated_at_ms:
        return Rejected(Code.CLOCK_REGRESSION)
    return None


def expire_with_lease_after_expiry(
    aggregate: RunAggregate | None, command: ExpireWithLease, observed_at_ms: int
) -> Outcome:
    """`run_lease.expire_with_lease` with `>=` for `>` in the T10 `not_expired` guard."""
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
    if lease.expires_at_ms >= now:  # MUTATION: `>` -> `>=` (not expired at its expiry)
        return Replayed(Code.NOT_EXPIRED)  # T10
    if now < lease.updated_at_ms or now < aggregate.run.updated_at_ms:
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


# MUTATION: E-1 table entry `Profile.CLUSTER: True` -> `False` (cluster loses on expiry alone).
LOST_REQUIRES_EVIDENCE_CLUSTER_FALSE: Mapping[Profile, bool] = MappingProxyType(
    {**LOST_REQUIRES_EVIDENCE, Profile.CLUSTER: False}
)


def renew_lease_two_updates(
    aggregate: RunAggregate | None, command: RenewLease, observed_at_ms: int
) -> Outcome:
    """`run_lease.renew_lease` writing `renewed_at_ms` and `expires_at_ms` as two lease
    updates, each of which bumps the lease version."""
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
    if not run_lease._duration_ok(command.lease_duration_ms):
        return Rejected(Code.LEASE_DURATION_INVALID)
    tx = Tx.begin(aggregate, command.name, observed_at_ms)
    # MUTATION: one `set_lease(renewed_at_ms=..., expires_at_ms=...)` split into two calls.
    tx.set_lease(attempt.attempt_id, lease.lease_generation, renewed_at_ms=observed_at_ms)
    tx.set_lease(
        attempt.attempt_id,
        lease.lease_generation,
        expires_at_ms=observed_at_ms + command.lease_duration_ms,
    )
    return tx.commit(bump_run=False)


def _complete_with_lease(replay_when: Callable[[Lease, CompleteWithLease], bool]) -> RawTransition:
    """`run_lease.complete_with_lease` with the exact-replay guard of T6r given as a predicate
    (the original: `lease.status is COMPLETED and lease.version == expected_version + 1`)."""

    def complete_with_lease(
        aggregate: RunAggregate | None, command: CompleteWithLease, observed_at_ms: int
    ) -> Outcome:
        checked = fence_identity(aggregate, command)
        if isinstance(checked, Rejected):
            return checked
        assert aggregate is not None
        attempt, lease = checked
        if replay_when(lease, command):
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
        if observed_at_ms < aggregate.run.updated_at_ms:
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

    return complete_with_lease


def _replay_on_final_lease(lease: Lease, command: CompleteWithLease) -> bool:
    # MUTATION: `lease.status is LeaseStatus.COMPLETED` -> `in FINAL_LEASE_STATUSES`
    return (
        lease.status in FINAL_LEASE_STATUSES and lease.version == command.fence.expected_version + 1
    )


def _replay_on_any_older_fence(lease: Lease, command: CompleteWithLease) -> bool:
    # MUTATION: `lease.version == expected_version + 1` -> `>=`
    return (
        lease.status is LeaseStatus.COMPLETED
        and lease.version >= command.fence.expected_version + 1
    )


complete_with_lease_replay_on_released = _complete_with_lease(_replay_on_final_lease)
complete_with_lease_replay_older_fence = _complete_with_lease(_replay_on_any_older_fence)


def acknowledge_starting_replay_event(
    aggregate: RunAggregate | None, command: AcknowledgeStarting, observed_at_ms: int
) -> Outcome:
    """`run_lease.acknowledge_starting` whose T2r replay records the acknowledgement again as an
    Event instead of answering `Replayed(already_applied)`."""
    checked = fence_identity(aggregate, command)
    if isinstance(checked, Rejected):
        return checked
    assert aggregate is not None
    attempt, lease = checked
    moved_on = _released_replay(attempt, lease)
    if moved_on is not None:
        return moved_on
    if attempt.status is AttemptStatus.STARTING and lease.status is LeaseStatus.LEASED:
        # MUTATION: `return Replayed(Code.ALREADY_APPLIED)` -> the replay appends an Event
        replay = Tx.begin(aggregate, command.name, observed_at_ms)
        replay.event("attempt.starting", Actor.WORKER, attempt.attempt_id)
        return replay.commit(Code.ALREADY_APPLIED)
    refused = fence_live(lease, command, observed_at_ms)
    if refused is not None:
        return refused
    if observed_at_ms < aggregate.run.updated_at_ms:
        return Rejected(Code.CLOCK_REGRESSION)
    tx = Tx.begin(aggregate, command.name, observed_at_ms)
    tx.set_lease(attempt.attempt_id, lease.lease_generation)
    tx.set_attempt(attempt.attempt_id, status=AttemptStatus.STARTING)
    tx.event("attempt.starting", Actor.WORKER, attempt.attempt_id)
    return tx.commit()


# Lost retry (SPEC §1.8.1) -----------------------------------------------------------------------
def decide_one_attempt_too_many(
    aggregate: RunAggregate, observed_at_ms: int
) -> LostRetryDisposition | None:
    """`run_lost_retry.decide` with `>` for `>=` in R3 (exhaustion one Attempt late)."""
    policy = aggregate.policy
    latest = aggregate.latest_attempt
    assert latest is not None
    if policy is None or not retry_enabled(policy.retry_on_lost, policy.max_attempts):
        return LostRetryDisposition.FAILED_DISABLED  # R1
    if policy.safety is Safety.UNKNOWN:
        return LostRetryDisposition.FAILED_UNSAFE  # R2
    if latest.number > policy.max_attempts:  # MUTATION: `>=` -> `>`
        return LostRetryDisposition.FAILED_EXHAUSTED  # R3
    if aggregate.run.status is RunStatus.LOST:
        return LostRetryDisposition.SCHEDULED  # R4
    due_at = policy.next_attempt_at_ms
    if due_at is not None and due_at <= observed_at_ms:
        return LostRetryDisposition.REQUEUED  # R5
    return None  # R6


def decide_one_ms_early(
    aggregate: RunAggregate, observed_at_ms: int
) -> LostRetryDisposition | None:
    """`run_lost_retry.decide` with a millisecond of "tolerance" in the R5 due check."""
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
    if due_at is not None and due_at <= observed_at_ms + 1:  # MUTATION: `+ 1`
        return LostRetryDisposition.REQUEUED  # R5
    return None  # R6


def eligible_despite_intent(aggregate: RunAggregate) -> bool:
    """`run_lost_retry.is_lost_retry_eligible` without the cancellation-intent clause."""
    run = aggregate.run
    latest = aggregate.latest_attempt
    return (
        run.owner is RunOwner.RUNTIME
        and run.kind is RunKind.ORDINARY
        # MUTATION: `and not run.has_cancel_intent` dropped
        and run.status in (RunStatus.LOST, RunStatus.RETRY_WAIT)
        and latest is not None
        and latest.status is AttemptStatus.LOST
    )


def delay_exponent_off_by_one(
    backoff_base_ms: int, backoff_max_ms: int, attempt_number: int
) -> int:
    """`retry_policy._delay` with exponent `n` for `n - 1`."""
    if backoff_base_ms == 0:
        return 0
    exponent = min(attempt_number, BACKOFF_EXPONENT_CAP)  # MUTATION: `- 1` dropped
    return int(min(backoff_max_ms, backoff_base_ms * 2**exponent))


@dataclass(frozen=True, slots=True)
class _LostRetryKnobs:
    """The single places where the three lost-retry mutants differ from the original."""

    clear_cursor_on_requeue: bool = True
    next_number_offset: int = 1
    schedule_actor: Actor = Actor.RECONCILER


def _lost_retry_step(knobs: _LostRetryKnobs) -> RawTransition:
    """`run_lost_retry.lost_retry_step`, verbatim except where `knobs` says otherwise."""

    def lost_retry_step(
        aggregate: RunAggregate | None, command: LostRetryStep, observed_at_ms: int
    ) -> Outcome:
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
        if now < max(durable_times):
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
            # MUTATION (actor): `Actor.RECONCILER`
            tx.event("run.retry_wait", knobs.schedule_actor, payload=(("next_attempt_at_ms", due),))
            return tx.commit(Code.SCHEDULED)
        if aggregate.attempt(command.new_attempt_id) is not None:
            return Rejected(Code.ATTEMPT_ID_CONFLICT)
        if knobs.clear_cursor_on_requeue:  # MUTATION (cursor): this line is dropped
            tx.set_policy(next_attempt_at_ms=None)
        tx.set_run(status=RunStatus.QUEUED, queued_at_ms=now, error_code=None)
        tx.insert_attempt(
            Attempt(
                attempt_id=command.new_attempt_id,
                run_id=run.run_id,
                number=latest.number + knobs.next_number_offset,  # MUTATION (number): `+ 2`
                status=AttemptStatus.CLAIMED,
                executor_type=latest.executor_type,
                created_at_ms=now,
            )
        )
        tx.event("run.queued", Actor.RECONCILER)
        tx.event("attempt.claimed", Actor.RECONCILER, command.new_attempt_id)
        return tx.commit(Code.REQUEUED)

    return lost_retry_step


lost_retry_step_keeps_cursor = _lost_retry_step(_LostRetryKnobs(clear_cursor_on_requeue=False))
lost_retry_step_attempt_n_plus_2 = _lost_retry_step(_LostRetryKnobs(next_number_offset=2))
lost_retry_step_scheduler_actor = _lost_retry_step(_LostRetryKnobs(schedule_actor=Actor.SCHEDULER))


# Cancellation and recovery (SPEC §1.9, §2) ------------------------------------------------------
def no_live_execution_while_starting(aggregate: RunAggregate) -> bool:
    """`run_cancellation.has_no_live_execution` taking a `starting` Attempt as not live."""
    run = aggregate.run
    latest = aggregate.latest_attempt
    if run.status in run_cancellation._CONVERGEABLE:
        return True
    return (
        run.status is RunStatus.DISPATCHING
        and latest is not None
        # MUTATION: `latest.status is AttemptStatus.CLAIMED` -> also `starting`
        and latest.status in (AttemptStatus.CLAIMED, AttemptStatus.STARTING)
    )


def recover_runtime_no_evidence_is_not_running(
    aggregate: RunAggregate | None, command: RecoverRuntime, observed_at_ms: int
) -> Outcome:
    """`run_recovery.recover_runtime` reading missing evidence as `not_running`."""
    if aggregate is None or aggregate.run.run_id != command.run_id:
        return Raced(Code.NOT_ELIGIBLE)
    latest = aggregate.latest_attempt
    if (
        latest is None
        or latest.attempt_id != command.attempt_id
        or not is_runtime_recovery_candidate(aggregate, observed_at_ms)
    ):
        return Raced(Code.NOT_ELIGIBLE)
    if latest.status is AttemptStatus.CLAIMED:
        leased = aggregate.leased_lease(latest.attempt_id)
        if leased is None or leased.status is not LeaseStatus.LEASED:
            return Raced(Code.NOT_ELIGIBLE)
        if observed_at_ms < max(aggregate.run.updated_at_ms, leased.updated_at_ms):
            return Rejected(Code.CLOCK_REGRESSION)
        tx = Tx.begin(aggregate, command.name, observed_at_ms)
        requeue_expired_claim(tx, latest)
        return tx.commit(Code.RELEASED)
    # MUTATION: `if command.evidence is None: return Replayed(Code.EVIDENCE_REQUIRED)` ->
    evidence = command.evidence if command.evidence is not None else NotRunningEvidence()
    return resolve_started(aggregate, latest, evidence, command.name, observed_at_ms)


def mark_lost_keeping_lease(tx: Tx, attempt: Attempt, error_code: str | None) -> None:
    """`run_lease.mark_lost` without the lease release (§2.4: lost and release are one fact)."""
    # MUTATION: `release_current_lease(tx, attempt, ReleaseReason.LEASE_EXPIRED)` dropped
    tx.set_attempt(
        attempt.attempt_id,
        status=AttemptStatus.LOST,
        finished_at_ms=tx.now,
        error_code=error_code,
    )
    tx.set_run(status=RunStatus.LOST)
    tx.event("run.lost", Actor.RECONCILER)
    tx.event("attempt.lost", Actor.RECONCILER, attempt.attempt_id, code=error_code)


# -- the registry ----------------------------------------------------------------------------------
def _probe_session() -> list[Step]:
    renew = RenewLease(RUN, A1, fence(2, session="w1-s0"), WORKER, LEASE_MS)
    return [*started(), (T0 + 2, renew)]


def _probe_offline() -> list[Step]:
    offline = dataclasses.replace(WORKER, status=WorkerSessionStatus.OFFLINE)
    return [*started(), (T0 + 2, RenewLease(RUN, A1, fence(2), offline, LEASE_MS))]


def _probe_renew_at_expiry() -> list[Step]:
    return [*started(), (T0 + LEASE_MS, RenewLease(RUN, A1, fence(2), WORKER, LEASE_MS))]


def _probe_cluster_expiry() -> list[Step]:
    return [*started(), (T0 + LEASE_MS, ExpireWithLease(RUN, A1, 1, Profile.CLUSTER))]


def _probe_renew() -> list[Step]:
    return [*started(), (T0 + 2, RenewLease(RUN, A1, fence(2), WORKER, LEASE_MS))]


def _probe_completion_after_recovery() -> list[Step]:
    # Cluster recovery applies a completion receipt (the lease is released, lease_expired);
    # then the old Worker's own completion arrives with the fence it had.
    running = AcknowledgeRunning(RUN, A1, fence(2), WORKER, "pid:1", T0 + 2)
    receipt = CompletedEvidence(CompletionOutcome.SUCCEEDED, 1, 0, T0 + 2)
    late = CompleteWithLease(RUN, A1, fence(3), WORKER, 1, CompletionOutcome.SUCCEEDED, 0)
    at = T0 + LEASE_MS
    return [
        *started(),
        (T0 + 2, running),
        (at, RecoverRuntime(RUN, A1, receipt)),
        (at + 1, late),
    ]


def _probe_completion_with_older_fence() -> list[Step]:
    running = AcknowledgeRunning(RUN, A1, fence(2), WORKER, "pid:1", T0 + 2)
    done = CompleteWithLease(RUN, A1, fence(3), WORKER, 1, CompletionOutcome.SUCCEEDED, 0)
    older = dataclasses.replace(done, fence=fence(2))
    return [*started(), (T0 + 2, running), (T0 + 3, done), (T0 + 4, older)]


def _probe_starting_replay() -> list[Step]:
    return [*started(), (T0 + 2, AcknowledgeStarting(RUN, A1, fence(1), WORKER))]


def _probe_exhaustion() -> list[Step]:
    grant = GrantLease(RUN, A2, WORKER, TOKEN_2, LEASE_MS)
    second = Fence("w1", "w1-s1", 1, 1, TOKEN_2, 1)
    at = T0 + LEASE_MS
    return [
        *requeued(),
        (at, grant),
        (at + 1, AcknowledgeStarting(RUN, A2, second, WORKER)),
        (at + LEASE_MS, ExpireWithLease(RUN, A2, 1, Profile.EDGE)),
        (at + LEASE_MS, LostRetryStep(RUN, "q1-a3")),
    ]


def _probe_intent() -> list[Step]:
    at = T0 + LEASE_MS
    return [*lost(), (at, RequestCancel(RUN, CancelReason.USER)), (at, LostRetryStep(RUN, A2))]


def _probe_backoff() -> list[Step]:
    return [*lost(BACKOFF), (T0 + LEASE_MS, LostRetryStep(RUN, A2))]


def _probe_early() -> list[Step]:
    # lost at T0 + LEASE_MS, due 1,000 ms later; one ms before that it is not due (R6)
    due = T0 + LEASE_MS + 1_000
    return [*_probe_backoff(), (due - 1, LostRetryStep(RUN, A2))]


def _probe_converge() -> list[Step]:
    at = T0 + 2
    return [*started(), (at, RequestCancel(RUN, CancelReason.USER)), (at, ConvergeCancel(RUN))]


def _probe_recovery() -> list[Step]:
    return [*started(), (T0 + LEASE_MS, RecoverRuntime(RUN, A1, None))]


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "fence_session_unchecked",
        "LEASE-02",
        "§1.7 fence check 4: worker session, LEASE_WORKER_SESSION_MISMATCH",
        "fence_identity no longer compares the fence's worker session with the lease's",
        (ModulePatch(run_lease, "fence_identity", fence_identity_without_session),),
        _probe_session,
    ),
    Mutant(
        "fence_accepts_offline_worker",
        "LEASE-04",
        "§1.7 fence check 11: an offline Worker session is not current (WORKER_UNAVAILABLE)",
        "worker_is_current drops the `status is not offline` clause",
        (ModulePatch(run_lease, "worker_is_current", worker_is_current_when_offline),),
        _probe_offline,
    ),
    Mutant(
        "fence_live_at_expiry",
        "LEASE-04",
        "§1.4/§1.7 fence check 10: live only while expires_at_ms > observed_at_ms",
        "fence_live rejects LEASE_EXPIRED on `expires_at_ms < now` instead of `<=`",
        (ModulePatch(run_lease, "fence_live", fence_live_at_expiry),),
        _probe_renew_at_expiry,
    ),
    Mutant(
        "expiry_one_ms_late",
        "LEASE-07",
        "§1.7 T7/T8 guard `expires_at_ms <= observed_at_ms` (T10 only while live)",
        "expire_with_lease answers not_expired on `expires_at_ms >= now` instead of `>`",
        (TransitionPatch(ExpireWithLease, expire_with_lease_after_expiry),),
        lost,
        aim="retry",
    ),
    Mutant(
        "cluster_expiry_marks_lost",
        "LEASE-12",
        "E-1: on cluster expire_with_lease never makes a started Attempt lost",
        "LOST_REQUIRES_EVIDENCE[cluster] is False, so cluster expiry applies T8",
        (ModulePatch(run_lease, "LOST_REQUIRES_EVIDENCE", LOST_REQUIRES_EVIDENCE_CLUSTER_FALSE),),
        _probe_cluster_expiry,
        aim="retry",
    ),
    Mutant(
        "lease_version_bumped_twice",
        "LEASE-01",
        "V-2: every successful lease mutation adds exactly 1 to the lease version",
        "renew_lease writes renewed_at and expires_at as two set_lease calls (+2)",
        (TransitionPatch(RenewLease, renew_lease_two_updates),),
        _probe_renew,
    ),
    Mutant(
        "completion_replay_on_released_lease",
        "LEASE-09",
        "T6r: exact replay only on a `completed` lease; after release the fence fails",
        "the T6r guard takes any final lease (`released` too), not only `completed`",
        (TransitionPatch(CompleteWithLease, complete_with_lease_replay_on_released),),
        _probe_completion_after_recovery,
    ),
    Mutant(
        "completion_replay_older_fence",
        "LEASE-03",
        "T6r: replay iff lease.version == expected_version + 1; any other version is rejected",
        "the T6r version test is `>=` instead of `==`, so an older fence replays",
        (TransitionPatch(CompleteWithLease, complete_with_lease_replay_older_fence),),
        _probe_completion_with_older_fence,
    ),
    Mutant(
        "starting_replay_appends_event",
        "RUN-03",
        "T2r: Replayed(already_applied), a replay appends no Event",
        "the T2r replay commits an `attempt.starting` Event (and a Run version)",
        (TransitionPatch(AcknowledgeStarting, acknowledge_starting_replay_event),),
        _probe_starting_replay,
    ),
    Mutant(
        "max_attempts_off_by_one",
        "RETRY-05",
        "R3: latest.number >= max_attempts fails with RUN_LOST_RETRY_EXHAUSTED",
        "decide tests `latest.number > max_attempts`: one Attempt more than allowed",
        (ModulePatch(run_lost_retry, "decide", decide_one_attempt_too_many),),
        _probe_exhaustion,
        aim="retry",
    ),
    Mutant(
        "retry_ignores_cancel_intent",
        "RETRY-11",
        "§1.8.1 eligibility and §1.9: an intent always wins over retry",
        "is_lost_retry_eligible drops `not run.has_cancel_intent`",
        (ModulePatch(run_lost_retry, "is_lost_retry_eligible", eligible_despite_intent),),
        _probe_intent,
        aim="retry",
    ),
    Mutant(
        "backoff_exponent_off_by_one",
        "RETRY-06",
        "§1.8.1: next_attempt_at_ms = base + min(max, base_ms * 2 ** min(n - 1, 15))",
        "the backoff exponent is min(n, 15): every delay is doubled",
        (ModulePatch(retry_policy, "_delay", delay_exponent_off_by_one),),
        _probe_backoff,
        aim="retry",
    ),
    Mutant(
        "retry_requeued_before_due",
        "RETRY-07",
        "R5/R6: requeue only when next_attempt_at_ms <= observed_at_ms, else NOT_DUE",
        "the R5 due check has 1 ms of tolerance (`<= observed_at_ms + 1`)",
        (ModulePatch(run_lost_retry, "decide", decide_one_ms_early),),
        _probe_early,
        aim="retry",
    ),
    Mutant(
        "requeue_keeps_policy_cursor",
        "RETRY-08",
        "R5: the policy's next_attempt_at_ms is cleared (version+1) with the requeue; I-3",
        "the requeue forgets `tx.set_policy(next_attempt_at_ms=None)`",
        (TransitionPatch(LostRetryStep, lost_retry_step_keeps_cursor),),
        requeued,
        aim="retry",
    ),
    Mutant(
        "requeue_creates_attempt_n_plus_2",
        "RUN-02",
        "R5: insert Attempt number = latest.number + 1 (no gap, I-1)",
        "the requeued Attempt is numbered latest.number + 2",
        (TransitionPatch(LostRetryStep, lost_retry_step_attempt_n_plus_2),),
        requeued,
        aim="retry",
    ),
    Mutant(
        "lost_retry_event_not_reconciler",
        "RETRY-19",
        "§1.8.1: every Event lost_retry_step appends carries actor `reconciler`",
        "the R4 `run.retry_wait` Event is attributed to the scheduler",
        (TransitionPatch(LostRetryStep, lost_retry_step_scheduler_actor),),
        _probe_backoff,
        aim="retry",
    ),
    Mutant(
        "converge_cancel_while_starting",
        "RUN-01",
        "§1.9: converge only with no live execution (dispatching only with a claimed Attempt)",
        "has_no_live_execution also accepts a dispatching Run whose Attempt is `starting`",
        (ModulePatch(run_cancellation, "has_no_live_execution", no_live_execution_while_starting),),
        _probe_converge,
    ),
    Mutant(
        "recovery_without_evidence_marks_lost",
        "REC-03",
        "§2.3: a started Attempt becomes lost only with trusted not-running evidence",
        "recover_runtime reads missing evidence as not_running",
        (TransitionPatch(RecoverRuntime, recover_runtime_no_evidence_is_not_running),),
        _probe_recovery,
        aim="retry",
    ),
    Mutant(
        "lost_keeps_lease_leased",
        "LEASE-07",
        "§2.4 / I-4: lost and the lease release (lease_expired, version+1) are one fact",
        "mark_lost no longer releases the Attempt's leased lease",
        (
            ModulePatch(run_lease, "mark_lost", mark_lost_keeping_lease),
            ModulePatch(run_recovery, "mark_lost", mark_lost_keeping_lease),
        ),
        lost,
        aim="retry",
    ),
)


def by_name(name: str) -> Mutant:
    for mutant in MUTANTS:
        if mutant.name == name:
            return mutant
    raise KeyError(name)
