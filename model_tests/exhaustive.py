"""Exhaustive small scope: every state reachable for one Run, two Workers and a bounded clock.

A breadth-first enumeration in the spirit of `tests/support/explore.py`. The Run is admitted
either for a remote executor (no policy, or a 2-Attempt retry policy) or for the local executor
(a 2-Attempt policy: local Attempts are lost without waiting for a lease, so exhaustion is
reached within the scope). Two Workers take leases; the control plane's view of a Worker varies
per command (online, draining, offline, restarted with a new session and generation); fences
come from every lease row, at the current and the previous version, plus a forged token; both
expiry profiles, recovery with each evidence kind, cancellation and lost retry are offered.
Time is a grid: commands happen at the current instant, and a separate tick moves the clock by
half a lease duration, up to a horizon. A lease granted at t therefore expires exactly on the
grid (t + 2 ticks), so the `expires_at_ms <= observed_at_ms` edge is hit exactly, and the
instant before it (t + 1 tick) is live.

Every state is checked with `check_invariants(agg, events)` (I-1..I-9, with the Events of the
path that first reached it); every transition with the kernel's own step check
(`kernel.contracts.step_violations`: V-1..V-4, I-5, effects) and with the model's oracles
(`model_tests.oracle`: fence identity codes, the expiry rows T7..T10 with E-1, the lost-retry
table R1..R6, the T1 guards, cancellation convergence with Appendix E-1); and every applied
transition is delivered a second time (a lost response) and must give the replay outcome of its
row. Transitions use the pure kernel
directly: there is no store to fault here.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from kernel import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    ActivateLocal,
    AdmitRun,
    Applied,
    CancelReason,
    CompletedEvidence,
    CompleteLocal,
    CompleteWithLease,
    CompletionOutcome,
    ConvergeCancel,
    Event,
    ExpireWithLease,
    FailStart,
    Fence,
    GrantLease,
    LocalReceipt,
    LostRetryStep,
    NotRunningEvidence,
    PolicyDefinition,
    Profile,
    RecordLocalHandle,
    RecordLocalStop,
    RecoverLocalStartup,
    RecoverRuntime,
    RenewLease,
    RequestCancel,
    RunAggregate,
    Safety,
    Secret,
    StopResult,
    UnknownEvidence,
    UnknownReason,
    WorkerSession,
    WorkerSessionStatus,
    apply,
    check_invariants,
    token_digest,
)
from kernel.commands import Command
from kernel.contracts import step_violations
from kernel.specs.invariants import i5_finality
from kernel.specs.states import OutcomeKind
from model_tests import oracle
from model_tests.harness import ModelViolation, require
from model_tests.oracle import FENCED_TYPES

RUN_ID = "r1"
EXECUTOR = "shell"
LOCAL = "local"
START_MS = 1_000_000
LEASE_MS = 5_000
TICK_MS = LEASE_MS // 2
HORIZON_MS = 2 * TICK_MS  # the clock never goes past START_MS + HORIZON_MS
MAX_LEASE_VERSION = 4  # renewals stop here (the scope bound on lease versions)
NEVER_MS = 10**13
ADMISSIONS: tuple[tuple[str, PolicyDefinition | None], ...] = (
    (EXECUTOR, None),
    (EXECUTOR, PolicyDefinition(2, True, Safety.IDEMPOTENT, 0, 0)),
    (LOCAL, PolicyDefinition(2, True, Safety.IDEMPOTENT, 0, 0)),
)
CALLBACK_DIGEST = token_digest("exhaustive_callback".ljust(40, "c"))


def _session(
    worker_id: str, generation: int, status: WorkerSessionStatus, expires: int
) -> WorkerSession:
    return WorkerSession(
        worker_id=worker_id,
        session_id=f"{worker_id}-s{generation}",
        generation=generation,
        status=status,
        session_expires_at_ms=expires,
        executor_types=(EXECUTOR,),
    )


def worker_views(worker_id: str) -> tuple[WorkerSession, ...]:
    """The control plane's possible views of one Worker (the registry is an input of every
    command, so its changes need no state of their own): online, draining (may still finish its
    leases), offline, and restarted with a new session and generation."""
    return (
        _session(worker_id, 1, WorkerSessionStatus.ONLINE, NEVER_MS),
        _session(worker_id, 1, WorkerSessionStatus.DRAINING, NEVER_MS),
        _session(worker_id, 1, WorkerSessionStatus.OFFLINE, NEVER_MS),
        _session(worker_id, 2, WorkerSessionStatus.ONLINE, NEVER_MS),
    )


def token(attempt_id: str, generation: int) -> Secret:
    return Secret.of(f"exhaustive_{attempt_id}_{generation}".ljust(40, "x"), "lease_token")


def _fenced(aid: str, fence: Fence, worker: WorkerSession, now: int) -> Iterator[Command]:
    yield AcknowledgeStarting(RUN_ID, aid, fence, worker)
    yield AcknowledgeRunning(RUN_ID, aid, fence, worker, "pid:1", now)
    if fence.expected_version < MAX_LEASE_VERSION:  # renewing at one instant has no end
        yield RenewLease(RUN_ID, aid, fence, worker, LEASE_MS)
    yield FailStart(RUN_ID, aid, fence, worker)
    yield CompleteWithLease(RUN_ID, aid, fence, worker, 1, CompletionOutcome.SUCCEEDED, 0)


def menu(agg: RunAggregate | None, now: int) -> Iterator[Command]:
    """The finite command menu of one state (at the current instant)."""
    if agg is None:
        for executor, policy in ADMISSIONS:
            yield AdmitRun(RUN_ID, "a1", "proj", "task", 1, executor, policy)
        return
    latest = agg.latest_attempt
    assert latest is not None
    for reason in (CancelReason.USER, CancelReason.TIMEOUT):
        yield RequestCancel(RUN_ID, reason)
    yield ConvergeCancel(RUN_ID)
    yield LostRetryStep(RUN_ID, f"a{len(agg.attempts) + 1}")
    if agg.run.executor_type == LOCAL:
        yield from _local_menu(agg, now)
        return
    generation = 1 + max(
        (x.lease_generation for x in agg.leases if x.attempt_id == latest.attempt_id), default=0
    )
    grant_token = token(latest.attempt_id, generation)
    for worker_id in ("w1", "w2"):
        online = _session(worker_id, 1, WorkerSessionStatus.ONLINE, NEVER_MS)
        yield GrantLease(RUN_ID, latest.attempt_id, online, grant_token, LEASE_MS)
    drained = _session("w2", 1, WorkerSessionStatus.DRAINING, NEVER_MS)
    yield GrantLease(RUN_ID, latest.attempt_id, drained, grant_token, LEASE_MS)
    current = agg.current_lease(latest)
    for lease in agg.leases:
        mine = lease is current
        for version in sorted(
            {lease.version, max(1, lease.version - 1)} if mine else {lease.version}
        ):
            fence = Fence(
                lease.worker_id,
                lease.worker_session_id,
                lease.worker_generation,
                lease.lease_generation,
                token(lease.attempt_id, lease.lease_generation),
                version,
            )
            live_version = mine and version == lease.version
            views = worker_views(lease.worker_id)[: 4 if live_version else 1]
            for worker in views:
                yield from _fenced(lease.attempt_id, fence, worker, now)
            if live_version:  # an old or forged capability on the live lease (LEASE-02)
                forged = Fence(
                    fence.worker_id,
                    fence.worker_session_id,
                    fence.worker_generation,
                    fence.lease_generation,
                    token("forged", 0),
                    version,
                )
                yield RenewLease(RUN_ID, lease.attempt_id, forged, views[0], LEASE_MS)
        profiles = (Profile.EDGE, Profile.CLUSTER) if mine else (Profile.EDGE,)
        for profile in profiles:
            yield ExpireWithLease(RUN_ID, lease.attempt_id, lease.lease_generation, profile)
    for evidence in (None, NotRunningEvidence(), UnknownEvidence(UnknownReason.PROBE_FAILED)):
        yield RecoverRuntime(RUN_ID, latest.attempt_id, evidence)


def _local_menu(agg: RunAggregate, now: int) -> Iterator[Command]:
    """The local executor path L1..L5 and local startup recovery (§2.2)."""
    latest = agg.latest_attempt
    assert latest is not None
    aid = latest.attempt_id
    yield ActivateLocal(RUN_ID, aid, LOCAL, 1, CALLBACK_DIGEST)
    yield RecordLocalHandle(RUN_ID, aid, "pid:7", now)
    started = latest.started_at_ms or latest.created_at_ms
    for outcome, exit_code in ((CompletionOutcome.SUCCEEDED, 0), (CompletionOutcome.FAILED, -15)):
        receipt = LocalReceipt(
            RUN_ID, aid, latest.callback_sequence, CALLBACK_DIGEST, outcome, started, exit_code
        )
        yield CompleteLocal(RUN_ID, aid, receipt)
    yield RecordLocalStop(RUN_ID, aid, StopResult.ALREADY_EXITED)
    completed = CompletedEvidence(CompletionOutcome.FAILED, latest.callback_sequence, 1)
    for evidence in (NotRunningEvidence(), UnknownEvidence(UnknownReason.PROBE_FAILED), completed):
        yield RecoverLocalStartup(RUN_ID, aid, evidence)


@dataclass
class Exhaustion:
    states: int = 0
    transitions: int = 0
    applied: int = 0
    invariant_checks: int = 0
    depth: int = 0
    seconds: float = 0.0
    statuses: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    max_attempts: int = 0

    def summary(self) -> str:
        return (
            f"exhaustive: {self.states} states, {self.transitions} transitions "
            f"({self.applied} applied), depth {self.depth}, up to {self.max_attempts} attempts, "
            f"{self.invariant_checks} invariant checks in {self.seconds:.1f} s; "
            f"run statuses reached: {dict(sorted(self.statuses.items()))}"
        )


def check_transition(agg: RunAggregate | None, command: Command, at: int, outcome: object) -> int:
    """Everything one transition must satisfy; returns the number of checks made."""
    require(
        getattr(outcome, "kind", None) in set(OutcomeKind), "RUN-05", f"{command.name}: {outcome}"
    )
    kind = outcome.kind.value  # type: ignore[attr-defined]
    code = outcome.code  # type: ignore[attr-defined]
    checks = 1
    if isinstance(outcome, Applied):
        violations = step_violations(agg, outcome, at)
        if agg is not None:
            violations += i5_finality(agg, outcome.aggregate)
        require(not violations, "RUN-01", f"{command.name} at {at}: {[str(v) for v in violations]}")
        checks += 1
    if isinstance(command, FENCED_TYPES):
        identity = oracle.fence_identity_code(agg, command)
        if identity is not None:
            require(
                (kind, code) == ("rejected", identity), "LEASE-02", f"{command.name} {kind} {code}"
            )
        elif kind == "applied":
            assert agg is not None
            lease = agg.lease(command.attempt_id, command.fence.lease_generation)
            assert lease is not None
            require(oracle.fence_live(lease, command, at), "LEASE-04", f"{command.name} at {at}")
        checks += 1
    elif isinstance(command, ExpireWithLease):
        want = oracle.expected_expiry(agg, command, at)
        require((kind, code) == want, "LEASE-05", f"expiry {kind} {code}, want {want}")
        checks += 1
    elif isinstance(command, LostRetryStep):
        want = oracle.expected_lost_retry(agg, command, at)
        spec = oracle.LOST_RETRY_SPEC.get(want[1], "RETRY-09")
        require((kind, code) == want, spec, f"lost retry {kind} {code}, want {want}")
        checks += 1
    elif isinstance(command, GrantLease):
        allowed = oracle.grant_allowed(agg, command, at)
        require((kind == "applied") == allowed, "T1", f"grant {kind} {code}")
        checks += 1
    elif local_completion(agg, command, outcome) is not None:
        assert agg is not None
        assert isinstance(outcome, Applied)
        completion = local_completion(agg, command, outcome)
        assert completion is not None
        want_status = oracle.local_completion_status(agg.run, completion)
        after = outcome.aggregate
        require(
            after.run.status is want_status
            and after.attempts[-1].status.value == want_status.value,
            "R-27",
            f"{command.name} {completion} under {agg.run.cancel_reason} ended {after.run.status}",
        )
        checks += 1
    elif isinstance(command, ConvergeCancel):
        want = oracle.expected_converge(agg, command.run_id, at)
        revoked = agg is not None and oracle.authority_revoked(agg)
        spec = "E-1" if revoked else "§1.9"
        require((kind, code) == want, spec, f"convergence {kind} {code}, want {want}")
        checks += 1
        if revoked and isinstance(outcome, Applied):
            # E-1: the same transaction ends the revoked Attempt with the Run's final status.
            assert agg is not None
            final = oracle.cancel_final_status(agg.run.cancel_reason)
            ended = outcome.aggregate.attempts[-1]
            require(
                outcome.aggregate.run.status is final
                and ended.status.value == final.value
                and ended.finished_at_ms == at,
                "E-1",
                f"E-1 convergence left the attempt {ended.status}",
            )
            checks += 1
    return checks


def local_completion(
    agg: RunAggregate | None, command: Command, outcome: object
) -> CompletionOutcome | None:
    """The outcome of an applied local completion (L3, or local startup recovery with
    `completed` evidence), which decision R-27 maps; None for any other transition."""
    if agg is None or not isinstance(outcome, Applied):
        return None
    if isinstance(command, CompleteLocal):
        return command.receipt.outcome
    if isinstance(command, RecoverLocalStartup) and isinstance(command.evidence, CompletedEvidence):
        return command.evidence.outcome
    return None


def check_replay(agg: RunAggregate | None, command: Command, at: int, first: Applied) -> int:
    """The same command delivered again right after it committed (a lost response): the
    replay outcome of its row, and never a second Attempt from a lost-retry replay."""
    again = apply(first.aggregate, command, at)
    if isinstance(command, LostRetryStep):
        before = len(agg.attempts) if agg is not None else 0
        after = len(again.aggregate.attempts) if isinstance(again, Applied) else before
        require(after <= before + 1, "RETRY-09", f"replay created Attempt N+2 at {at}")
        return 1
    want = oracle.replay_outcome(command)
    if want is not None:
        got = (again.kind.value, again.code)
        require(got == want, "RUN-03", f"{command.name} replay {got}, want {want}")
    return 1


def explore(horizon_ms: int = HORIZON_MS, max_states: int = 500_000) -> Exhaustion:
    """Visit every (aggregate, time) reachable from nothing within the horizon."""
    started = time.perf_counter()
    result = Exhaustion()
    seen: set[tuple[RunAggregate | None, int]] = {(None, START_MS)}
    queue: deque[tuple[RunAggregate | None, tuple[Event, ...], int, int]] = deque(
        [(None, (), START_MS, 0)]
    )
    while queue:
        agg, events, now, depth = queue.popleft()
        result.states += 1
        result.depth = max(result.depth, depth)
        if agg is not None:
            violations = check_invariants(agg, events)
            require(not violations, "RUN-01", f"state at {now}: {[str(v) for v in violations]}")
            result.invariant_checks += 1
            result.statuses[agg.run.status.value] += 1
            result.max_attempts = max(result.max_attempts, len(agg.attempts))
        successors: list[tuple[RunAggregate | None, tuple[Event, ...], int]] = []
        if agg is not None and now + TICK_MS - START_MS <= horizon_ms:
            successors.append((agg, events, now + TICK_MS))  # the clock ticks
        for command in menu(agg, now):
            outcome = apply(agg, command, now)
            result.transitions += 1
            result.invariant_checks += check_transition(agg, command, now, outcome)
            result.outcomes[f"{command.name} {outcome.kind.value} {outcome.code.value}"] += 1
            if (  # Appendix E-1, reached and checked
                isinstance(command, ConvergeCancel)
                and agg is not None
                and oracle.authority_revoked(agg)
            ):
                result.outcomes[f"E-1 {outcome.kind.value} {outcome.code.value}"] += 1
            completion = local_completion(agg, command, outcome)
            if completion is not None and agg is not None and agg.run.has_cancel_intent:
                # Decision R-27, reached and checked: the completion's outcome under an intent.
                result.outcomes[f"R-27 {completion.value} under intent"] += 1
            if isinstance(outcome, Applied):
                result.applied += 1
                result.invariant_checks += check_replay(agg, command, now, outcome)
                successors.append((outcome.aggregate, events + outcome.events, now))
        for successor, log, at in successors:
            key = (successor, at)
            if key in seen:
                continue
            if len(seen) >= max_states:
                raise ModelViolation(f"exhaustive: more than {max_states} states")
            seen.add(key)
            queue.append((successor, log, at, depth + 1))
    result.seconds = time.perf_counter() - started
    return result


if __name__ == "__main__":  # pragma: no cover - manual use: python -m model_tests.exhaustive
    print(explore().summary())
