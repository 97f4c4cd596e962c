"""Lease scenarios for the T1..T10 tests, reached only through kernel transitions.

`LeaseFlow` wraps a `Sim` (one Run, Workers `w1`/`w2`) and drives it through admission, grants,
starting/running ACKs, completions and expiries, insisting that each setup step applies. It also
builds the fenced Worker commands with the current lease's fence, so a test can change exactly
the field it is about. Nothing here builds a row by hand.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import fields, is_dataclass
from enum import Enum
from typing import Literal

from hypothesis import strategies as st

from kernel import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    AdmitRun,
    AppendEvent,
    Applied,
    Attempt,
    AttemptStatus,
    CancelReason,
    CompleteWithLease,
    CompletionOutcome,
    Effect,
    ExpireWithLease,
    FailStart,
    Fence,
    GrantLease,
    InsertLease,
    Lease,
    LeaseStatus,
    Outcome,
    PolicyDefinition,
    Profile,
    RenewLease,
    RequestCancel,
    RunAggregate,
    RunStatus,
    Secret,
    UpdateAttempt,
    UpdateLease,
    UpdateRun,
    WorkerSession,
)
from kernel.commands import Command
from tests.support.sim import EXECUTOR, RUN_ID, Sim, draw_command, lease_token

FencedKind = Literal["starting", "renew", "running", "fail_start", "complete"]
FencedCommand = (
    AcknowledgeStarting | RenewLease | AcknowledgeRunning | FailStart | CompleteWithLease
)
FENCED_KINDS: tuple[FencedKind, ...] = ("starting", "renew", "running", "fail_start", "complete")

FenceField = Literal[
    "worker_id",
    "worker_session_id",
    "worker_generation",
    "lease_generation",
    "lease_token",
    "expected_version",
]
# The six fence fields a Worker command carries, in B-16 check order.
FENCE_FIELDS: tuple[FenceField, ...] = (
    "worker_id",
    "worker_session_id",
    "worker_generation",
    "lease_generation",
    "lease_token",
    "expected_version",
)

DURATION_MS = 30_000
HANDLE = "pid:4242"
FOREIGN_TOKEN = Secret.of("f" * 43, "lease_token")


# Clock steps for lease walks: mostly well inside the default 30 s lease so that ACKs, renewals
# and completions apply; one step in ten jumps past a lease (expiry) or back (clock skew, RUN-04).
SMALL_STEPS = (0, 1, 7, 100, 500, 1_000, 2_000, 3_000, -1)
JUMPS = (31_000, 120_000, 600_001, -2_000)


def advance_lease_clock(data: st.DataObject, sim: Sim) -> None:
    jump = data.draw(st.integers(0, 9)) == 0
    step = data.draw(st.sampled_from(JUMPS if jump else SMALL_STEPS))
    sim.now = max(0, sim.now + step)


def replace_fence(fence: Fence, /, **changes: object) -> Fence:
    """`dataclasses.replace` for fence fields chosen at run time (the Fence validates them)."""
    return dataclasses.replace(fence, **changes)  # type: ignore[arg-type]


def must(outcome: Outcome) -> Applied:
    assert isinstance(outcome, Applied), outcome
    return outcome


class LeaseFlow:
    """One simulated Run driven through the dispatch lease rows."""

    def __init__(self) -> None:
        self.sim = Sim()

    # -- reading ---------------------------------------------------------------------------
    @property
    def agg(self) -> RunAggregate:
        assert self.sim.agg is not None
        return self.sim.agg

    @property
    def attempt(self) -> Attempt:
        latest = self.agg.latest_attempt
        assert latest is not None
        return latest

    @property
    def lease(self) -> Lease:
        """The latest Attempt's current lease (the row of I-6)."""
        lease = self.agg.current_lease(self.attempt)
        assert lease is not None
        return lease

    @property
    def now(self) -> int:
        return self.sim.now

    def tick(self, ms: int) -> int:
        self.sim.now += ms
        return self.sim.now

    def session(self, worker_id: str) -> WorkerSession:
        return self.sim.sessions[worker_id]

    # -- driving ---------------------------------------------------------------------------
    def step(self, command: Command, now: int | None = None) -> Outcome:
        return self.sim.step(command, now)

    def must(self, command: Command, now: int | None = None) -> Applied:
        return must(self.sim.step(command, now))

    def admit(self, policy: PolicyDefinition | None = None) -> Applied:
        return self.must(
            AdmitRun(
                run_id=RUN_ID,
                attempt_id="a1",
                project_id="proj",
                task_id="task",
                task_revision=1,
                executor_type=EXECUTOR,
                provider_policy=policy,
            )
        )

    def grant_command(self, worker_id: str = "w1", duration_ms: int = DURATION_MS) -> GrantLease:
        attempt_id = self.attempt.attempt_id
        generation = 1 + max(
            (x.lease_generation for x in self.agg.leases_of(attempt_id)), default=0
        )
        return GrantLease(
            run_id=RUN_ID,
            attempt_id=attempt_id,
            worker=self.session(worker_id),
            lease_token=lease_token(attempt_id, generation),
            lease_duration_ms=duration_ms,
        )

    def grant(self, worker_id: str = "w1", duration_ms: int = DURATION_MS) -> Applied:
        return self.must(self.grant_command(worker_id, duration_ms))

    def expire_claim(self, profile: Profile = Profile.EDGE) -> Applied:
        """T7: let the current claimed lease expire and release it."""
        self.sim.now = max(self.sim.now, self.lease.expires_at_ms)
        return self.must(self.expire_command(profile))

    def request_cancel(self, reason: CancelReason = CancelReason.USER) -> Applied:
        return self.must(RequestCancel(run_id=RUN_ID, reason=reason))

    def reach(
        self,
        status: AttemptStatus,
        *,
        worker_id: str = "w1",
        prior_expiries: int = 0,
        duration_ms: int = DURATION_MS,
        gap_ms: int = 1_000,
    ) -> None:
        """Admit, expire `prior_expiries` claimed grants of the same Worker (T7), grant, then
        walk the Attempt to `status` (`claimed`, `starting` or `running`)."""
        self.admit()
        for _ in range(prior_expiries):
            self.tick(gap_ms)
            self.grant(worker_id, duration_ms)
            self.expire_claim()
        self.tick(gap_ms)
        self.grant(worker_id, duration_ms)
        if status is AttemptStatus.CLAIMED:
            return
        self.tick(gap_ms)
        self.must(self.starting_command())
        if status is AttemptStatus.STARTING:
            return
        assert status is AttemptStatus.RUNNING
        self.tick(gap_ms)
        self.must(self.running_command())

    # -- fenced commands -------------------------------------------------------------------
    def fence(self, lease: Lease | None = None, /, **changes: object) -> Fence:
        """The fence of `lease` (default: the current lease) with `changes` applied."""
        return replace_fence(
            self.sim.fence_for(lease if lease is not None else self.lease), **changes
        )

    def _worker(self, fence: Fence, worker: WorkerSession | None) -> WorkerSession:
        if worker is not None:
            return worker
        return self.sim.sessions.get(fence.worker_id, self.session("w1"))

    def starting_command(
        self, fence: Fence | None = None, worker: WorkerSession | None = None
    ) -> AcknowledgeStarting:
        f = fence if fence is not None else self.fence()
        return AcknowledgeStarting(
            run_id=RUN_ID,
            attempt_id=self.attempt.attempt_id,
            fence=f,
            worker=self._worker(f, worker),
        )

    def renew_command(
        self,
        fence: Fence | None = None,
        worker: WorkerSession | None = None,
        duration_ms: int = DURATION_MS,
    ) -> RenewLease:
        f = fence if fence is not None else self.fence()
        return RenewLease(
            run_id=RUN_ID,
            attempt_id=self.attempt.attempt_id,
            fence=f,
            worker=self._worker(f, worker),
            lease_duration_ms=duration_ms,
        )

    def running_command(
        self,
        fence: Fence | None = None,
        worker: WorkerSession | None = None,
        handle: str = HANDLE,
        started_at_ms: int | None = None,
    ) -> AcknowledgeRunning:
        f = fence if fence is not None else self.fence()
        return AcknowledgeRunning(
            run_id=RUN_ID,
            attempt_id=self.attempt.attempt_id,
            fence=f,
            worker=self._worker(f, worker),
            executor_handle=handle,
            started_at_ms=self.now if started_at_ms is None else started_at_ms,
        )

    def fail_start_command(
        self,
        fence: Fence | None = None,
        worker: WorkerSession | None = None,
        failure_code: str = "START_FAILED",
    ) -> FailStart:
        f = fence if fence is not None else self.fence()
        return FailStart(
            run_id=RUN_ID,
            attempt_id=self.attempt.attempt_id,
            fence=f,
            worker=self._worker(f, worker),
            failure_code=failure_code,
        )

    def complete_command(
        self,
        fence: Fence | None = None,
        worker: WorkerSession | None = None,
        callback_sequence: int = 1,
        outcome: CompletionOutcome = CompletionOutcome.SUCCEEDED,
        exit_code: int | None = 0,
    ) -> CompleteWithLease:
        f = fence if fence is not None else self.fence()
        return CompleteWithLease(
            run_id=RUN_ID,
            attempt_id=self.attempt.attempt_id,
            fence=f,
            worker=self._worker(f, worker),
            callback_sequence=callback_sequence,
            outcome=outcome,
            exit_code=exit_code,
        )

    def fenced_command(
        self, kind: FencedKind, fence: Fence | None = None, worker: WorkerSession | None = None
    ) -> FencedCommand:
        if kind == "starting":
            return self.starting_command(fence, worker)
        if kind == "renew":
            return self.renew_command(fence, worker)
        if kind == "running":
            return self.running_command(fence, worker)
        if kind == "fail_start":
            return self.fail_start_command(fence, worker)
        return self.complete_command(fence, worker)

    def draw_step(self, data: st.DataObject) -> Command | None:
        """One walk step: half the time the simulator's own draw (stale, replayed, mutated,
        local, recovery, Worker registry changes), otherwise the well-formed next lease command
        for the current state, so that every row T1..T10 is reached in a short walk."""
        agg = self.sim.agg
        latest = agg.latest_attempt if agg is not None else None
        if agg is None or latest is None or data.draw(st.booleans()):
            return draw_command(data, self.sim)
        lease = agg.current_lease(latest)
        if agg.run.status is RunStatus.QUEUED and latest.status is AttemptStatus.CLAIMED:
            return self.grant_command(
                data.draw(st.sampled_from(["w1", "w2"])),
                data.draw(st.sampled_from([5_000, 30_000, 60_000])),
            )
        if lease is None or lease.status is not LeaseStatus.LEASED:
            return draw_command(data, self.sim)
        choices: tuple[str, ...] = {
            AttemptStatus.CLAIMED: ("starting", "starting", "expire"),
            AttemptStatus.STARTING: ("renew", "running", "running", "complete", "fail_start"),
            AttemptStatus.RUNNING: ("renew", "renew", "complete", "complete"),
        }.get(latest.status, ("expire",))
        kind = data.draw(st.sampled_from((*choices, *choices, *choices, "expire", "cancel")))
        if kind == "cancel":
            return RequestCancel(run_id=RUN_ID, reason=data.draw(st.sampled_from(CancelReason)))
        if kind == "expire":
            self.sim.now = max(self.sim.now, lease.expires_at_ms)
            return self.expire_command(data.draw(st.sampled_from(Profile)))
        if kind == "complete":
            return self.complete_command(
                callback_sequence=data.draw(st.integers(1, 2)),
                outcome=data.draw(st.sampled_from(CompletionOutcome)),
                exit_code=data.draw(st.sampled_from([None, 0, 1])),
            )
        fenced: FencedKind = kind  # type: ignore[assignment]
        return self.fenced_command(fenced)

    def expire_command(
        self, profile: Profile = Profile.EDGE, lease_generation: int | None = None
    ) -> ExpireWithLease:
        return ExpireWithLease(
            run_id=RUN_ID,
            attempt_id=self.attempt.attempt_id,
            lease_generation=(
                self.lease.lease_generation if lease_generation is None else lease_generation
            ),
            profile=profile,
        )


# -- effect and event shapes ---------------------------------------------------------------
EffectShape = tuple[str, object]


def effect_shape(effects: tuple[Effect, ...]) -> list[EffectShape]:
    """Each effect's kind with the guard a runner's statement re-checks (expected versions and
    statuses), in order; Events by their seq."""
    out: list[EffectShape] = []
    for effect in effects:
        if isinstance(effect, UpdateRun):
            out.append(("UpdateRun", effect.expected_version))
        elif isinstance(effect, UpdateAttempt):
            out.append(("UpdateAttempt", (effect.expected_status, effect.expected_lease_version)))
        elif isinstance(effect, UpdateLease):
            out.append(("UpdateLease", (effect.expected_version, effect.expected_status)))
        elif isinstance(effect, InsertLease):
            out.append(("InsertLease", effect.row.version))
        elif isinstance(effect, AppendEvent):
            out.append(("AppendEvent", effect.event.seq))
        else:
            out.append((type(effect).__name__, None))
    return out


def walk_values(value: object) -> Iterator[object]:
    """Every value reachable from `value` through dataclass fields and tuples/lists."""
    yield value
    if isinstance(value, Enum | str | int | bool) or value is None:
        return
    if is_dataclass(value) and not isinstance(value, type):
        for f in fields(value):
            yield from walk_values(getattr(value, f.name))
    elif isinstance(value, tuple | list):
        for item in value:
            yield from walk_values(item)
