"""A small simulator of one Run and a few Workers, driven only through kernel transitions.

Property tests use it to reach states the way production does (admission, grants, fences,
expiry, crashes as replays, stale Workers, clock steps), never by building rows by hand. Each
step draws one plausible command, biased toward valid input but often stale, replayed or
mutated, so that every guard and every replay path is exercised.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from hypothesis import strategies as st

from conformance.run.trace import trace_token
from kernel import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    ActivateLocal,
    AdmitRun,
    Applied,
    CancelReason,
    Command,
    CompletedEvidence,
    CompleteLocal,
    CompleteWithLease,
    CompletionOutcome,
    ConvergeCancel,
    CreateRun,
    Event,
    Evidence,
    ExpireWithLease,
    FailOrphanedCreated,
    FailStart,
    Fence,
    GrantLease,
    Lease,
    LiveEvidence,
    LocalReceipt,
    LostRetryStep,
    NotRunningEvidence,
    Outcome,
    PolicyDefinition,
    Profile,
    RecordLocalHandle,
    RecordLocalStop,
    RecoverLocalStartup,
    RecoverRuntime,
    RenewLease,
    RequestCancel,
    RunAggregate,
    RunStatus,
    Safety,
    Secret,
    StopResult,
    UnknownEvidence,
    UnknownReason,
    WorkerSession,
    WorkerSessionStatus,
    apply,
    token_digest,
)

RUN_ID = "run-1"
EXECUTOR = "shell"
LOCAL_EXECUTOR = "local"
WORKER_IDS = ("w1", "w2")
START_MS = 1_000_000
TIME_STEPS = (0, 1, 1, 7, 7, 7, 100, 100, 1_000, 1_000, 1_000, 5_000, 31_000, 120_000)


def lease_token(attempt_id: str, generation: int) -> Secret:
    """Deterministic test capability (a trace token, so simulated runs can be written as
    traces); only its digest is ever stored."""
    return trace_token(f"lease-{attempt_id}-{generation}")


def callback_token(attempt_id: str) -> str:
    return f"callback_{attempt_id}".ljust(40, "y")


def policies() -> st.SearchStrategy[PolicyDefinition | None]:
    """Provider policies, valid and invalid (A-3), safe and unsafe (A-4)."""
    return st.one_of(
        st.none(),
        st.builds(
            PolicyDefinition,
            max_attempts=st.integers(0, 17),
            retry_on_lost=st.booleans(),
            safety=st.sampled_from(Safety),
            backoff_base_ms=st.sampled_from([0, 1, 1_000, 30_000]),
            backoff_max_ms=st.sampled_from([0, 1_000, 60_000, 86_400_000, 86_400_001]),
        ),
    )


def worker_session(
    worker_id: str, status: WorkerSessionStatus = WorkerSessionStatus.ONLINE
) -> WorkerSession:
    """A Worker's first session as the control plane sees it."""
    return WorkerSession(
        worker_id=worker_id,
        session_id=f"{worker_id}-s1",
        generation=1,
        status=status,
        session_expires_at_ms=START_MS + 10**9,
        executor_types=(EXECUTOR,),
    )


def safe_policies() -> st.SearchStrategy[PolicyDefinition]:
    """Valid, enabled, safe policies: the ones that make lost retry schedule and requeue."""
    return st.builds(
        PolicyDefinition,
        max_attempts=st.integers(2, 5),
        retry_on_lost=st.just(True),
        safety=st.sampled_from([Safety.IDEMPOTENT, Safety.DEDUPLICATED]),
        backoff_base_ms=st.sampled_from([0, 1_000]),
        backoff_max_ms=st.just(60_000),
    )


def evidences() -> st.SearchStrategy[Evidence]:
    return st.one_of(
        st.just(NotRunningEvidence()),
        st.just(LiveEvidence()),
        st.builds(UnknownEvidence, reason=st.sampled_from(UnknownReason)),
        st.builds(
            CompletedEvidence,
            outcome=st.sampled_from(CompletionOutcome),
            callback_sequence=st.integers(0, 3),
            exit_code=st.sampled_from([None, 0, 1]),
        ),
    )


@dataclass
class Sim:
    """The state of one simulated Run plus the Workers' current sessions."""

    agg: RunAggregate | None = None
    events: list[Event] = field(default_factory=list)
    now: int = START_MS
    sessions: dict[str, WorkerSession] = field(default_factory=dict)
    attempts_made: int = 0
    log: list[tuple[Command, int, Outcome]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for worker_id in WORKER_IDS:
            self.sessions[worker_id] = worker_session(worker_id)

    def step(self, command: Command, now: int | None = None) -> Outcome:
        at = self.now if now is None else now
        outcome = apply(self.agg, command, at)
        if isinstance(outcome, Applied):
            self.agg = outcome.aggregate
            self.events.extend(outcome.events)
        self.log.append((command, at, outcome))
        return outcome

    def new_attempt_id(self) -> str:
        self.attempts_made += 1
        return f"a{self.attempts_made + 1}"

    # -- Worker life (not kernel commands: the control plane's session registry) -------------
    def restart_worker(self, worker_id: str) -> None:
        s = self.sessions[worker_id]
        self.sessions[worker_id] = dataclasses.replace(
            s,
            session_id=f"{worker_id}-s{s.generation + 1}",
            generation=s.generation + 1,
            status=WorkerSessionStatus.ONLINE,
        )

    def set_worker_status(self, worker_id: str, status: WorkerSessionStatus) -> None:
        self.sessions[worker_id] = dataclasses.replace(self.sessions[worker_id], status=status)

    # -- fences ------------------------------------------------------------------------------
    def fence_for(self, lease: Lease, version_offset: int = 0) -> Fence:
        return Fence(
            worker_id=lease.worker_id,
            worker_session_id=lease.worker_session_id,
            worker_generation=lease.worker_generation,
            lease_generation=lease.lease_generation,
            lease_token=lease_token(lease.attempt_id, lease.lease_generation),
            expected_version=max(1, lease.version + version_offset),
        )


_KINDS = (
    "admit",
    "create",
    "grant",
    "starting",
    "renew",
    "running",
    "fail_start",
    "complete",
    "expire",
    "request_cancel",
    "converge_cancel",
    "lost_retry",
    "activate_local",
    "local_handle",
    "complete_local",
    "local_stop",
    "recover_startup",
    "orphaned",
    "recover_runtime",
    "worker_restart",
    "worker_status",
    "replay_last",
)


_FENCED = ("starting", "starting", "running", "running", "renew", "complete", "complete")
# What tends to happen next in each Run status; the rest of `_KINDS` is drawn one time in five.
_PREFERRED: dict[RunStatus, tuple[str, ...]] = {
    RunStatus.CREATED: ("orphaned", "request_cancel", "converge_cancel", "admit"),
    RunStatus.QUEUED: ("grant", "grant", "grant", "activate_local", "activate_local", "expire"),
    RunStatus.DISPATCHING: (
        *_FENCED,
        "fail_start",
        "expire",
        "local_handle",
        "complete_local",
        "recover_startup",
        "recover_runtime",
        "replay_last",
    ),
    RunStatus.RUNNING: (
        *_FENCED,
        "expire",
        "expire",
        "complete_local",
        "local_stop",
        "recover_startup",
        "recover_runtime",
        "request_cancel",
        "replay_last",
    ),
    RunStatus.LOST: ("lost_retry", "lost_retry", "lost_retry", "converge_cancel", "request_cancel"),
    RunStatus.RETRY_WAIT: ("lost_retry", "lost_retry", "lost_retry", "converge_cancel"),
    **dict.fromkeys(
        (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT),
        ("replay_last", "complete", "starting", "expire", "lost_retry", "request_cancel"),
    ),
}


def _mutate_fence(data: st.DataObject, fence: Fence) -> Fence:
    """A stale fence: one field from an older or foreign authority."""
    which = data.draw(
        st.sampled_from(["none"] * 12 + ["worker", "session", "generation", "lease_gen", "token"])
    )
    if which == "worker":
        return dataclasses.replace(fence, worker_id="w-foreign")
    if which == "session":
        return dataclasses.replace(fence, worker_session_id=fence.worker_session_id + "-old")
    if which == "generation":
        return dataclasses.replace(fence, worker_generation=fence.worker_generation + 1)
    if which == "lease_gen":
        return dataclasses.replace(fence, lease_generation=max(1, fence.lease_generation - 1))
    if which == "token":
        return dataclasses.replace(fence, lease_token=trace_token("foreign-token"))
    return fence


def draw_command(data: st.DataObject, sim: Sim) -> Command | None:
    """Draw one plausible command for the current state, or perform a Worker-registry action
    and return None."""
    agg = sim.agg
    if agg is None:
        kind = data.draw(st.sampled_from(["admit"] * 7 + ["create"]))
    elif data.draw(st.integers(0, 4)):
        kind = data.draw(st.sampled_from(_PREFERRED[agg.run.status]))
    else:
        kind = data.draw(st.sampled_from(_KINDS))
    latest = agg.latest_attempt if agg is not None else None
    attempt_id = latest.attempt_id if latest is not None else "a1"

    if kind == "admit":
        return AdmitRun(
            run_id=RUN_ID,
            attempt_id="a1",
            project_id="proj",
            task_id="task",
            task_revision=1,
            executor_type=data.draw(st.sampled_from([EXECUTOR, LOCAL_EXECUTOR])),
            provider_policy=data.draw(st.one_of(safe_policies(), policies())),
        )
    if kind == "create":
        return CreateRun(
            run_id=RUN_ID,
            project_id="proj",
            task_id="task",
            task_revision=1,
            executor_type=EXECUTOR,
        )
    if kind == "replay_last" and sim.log:
        return sim.log[-1][0]
    if kind == "worker_restart":
        sim.restart_worker(data.draw(st.sampled_from(WORKER_IDS)))
        return None
    if kind == "worker_status":
        sim.set_worker_status(
            data.draw(st.sampled_from(WORKER_IDS)), data.draw(st.sampled_from(WorkerSessionStatus))
        )
        return None
    if kind == "grant":
        worker = sim.sessions[data.draw(st.sampled_from(WORKER_IDS))]
        generation = 1 + max(
            (x.lease_generation for x in agg.leases_of(attempt_id)) if agg else (), default=0
        )
        return GrantLease(
            run_id=RUN_ID,
            attempt_id=attempt_id,
            worker=worker,
            lease_token=lease_token(attempt_id, generation),
            lease_duration_ms=data.draw(st.sampled_from([30_000, 30_000, 5_000, 4_999])),
        )
    if kind in ("starting", "renew", "running", "fail_start", "complete"):
        leases = list(agg.leases) if agg is not None else []
        if not leases:
            return None
        current = agg.current_lease(latest) if agg is not None and latest is not None else None
        lease = current if current is not None and data.draw(st.integers(0, 4)) else None
        if lease is None:
            lease = data.draw(st.sampled_from(leases))
        offset = data.draw(st.sampled_from([0] * 8 + [-1, 1]))
        fence = _mutate_fence(data, sim.fence_for(lease, offset))
        worker = sim.sessions.get(lease.worker_id, sim.sessions[WORKER_IDS[0]])
        aid = lease.attempt_id
        if kind == "starting":
            return AcknowledgeStarting(run_id=RUN_ID, attempt_id=aid, fence=fence, worker=worker)
        if kind == "renew":
            return RenewLease(
                run_id=RUN_ID, attempt_id=aid, fence=fence, worker=worker, lease_duration_ms=30_000
            )
        if kind == "running":
            return AcknowledgeRunning(
                run_id=RUN_ID,
                attempt_id=aid,
                fence=fence,
                worker=worker,
                executor_handle=data.draw(st.sampled_from(["pid:1", "pid:2"])),
                started_at_ms=sim.now - data.draw(st.sampled_from([0, 1])),
            )
        if kind == "fail_start":
            return FailStart(run_id=RUN_ID, attempt_id=aid, fence=fence, worker=worker)
        return CompleteWithLease(
            run_id=RUN_ID,
            attempt_id=aid,
            fence=fence,
            worker=worker,
            callback_sequence=data.draw(st.integers(1, 3)),
            outcome=data.draw(st.sampled_from(CompletionOutcome)),
            exit_code=data.draw(st.sampled_from([None, 0, 2])),
        )
    if kind == "expire":
        leases = list(agg.leases) if agg is not None else []
        lease_generation = data.draw(st.sampled_from(leases)).lease_generation if leases else 1
        aid = data.draw(st.sampled_from(leases)).attempt_id if leases else attempt_id
        return ExpireWithLease(
            run_id=RUN_ID,
            attempt_id=aid,
            lease_generation=lease_generation,
            profile=data.draw(st.sampled_from(Profile)),
        )
    if kind == "request_cancel":
        return RequestCancel(run_id=RUN_ID, reason=data.draw(st.sampled_from(CancelReason)))
    if kind == "converge_cancel":
        return ConvergeCancel(run_id=RUN_ID)
    if kind == "lost_retry":
        return LostRetryStep(run_id=RUN_ID, new_attempt_id=sim.new_attempt_id())
    if kind == "activate_local":
        return ActivateLocal(
            run_id=RUN_ID,
            attempt_id=attempt_id,
            local_executor_type=data.draw(
                st.sampled_from([LOCAL_EXECUTOR, LOCAL_EXECUTOR, EXECUTOR])
            ),
            callback_sequence=data.draw(st.integers(1, 2)),
            callback_token_sha256=token_digest(callback_token(attempt_id)),
        )
    if kind == "local_handle":
        return RecordLocalHandle(
            run_id=RUN_ID,
            attempt_id=attempt_id,
            executor_handle=data.draw(st.sampled_from(["pid:7", "pid:8"])),
            started_at_ms=sim.now,
        )
    if kind == "complete_local":
        started = latest.started_at_ms if latest is not None and latest.started_at_ms else sim.now
        forged = data.draw(st.sampled_from([False, False, False, True]))
        return CompleteLocal(
            run_id=RUN_ID,
            attempt_id=attempt_id,
            receipt=LocalReceipt(
                run_id=RUN_ID,
                attempt_id=attempt_id,
                callback_sequence=latest.callback_sequence if latest is not None else 0,
                token_sha256=token_digest(callback_token("forged" if forged else attempt_id)),
                outcome=data.draw(st.sampled_from(CompletionOutcome)),
                started_at_ms=started,
                exit_code=data.draw(st.sampled_from([None, 0, 1])),
            ),
        )
    if kind == "local_stop":
        return RecordLocalStop(
            run_id=RUN_ID, attempt_id=attempt_id, result=data.draw(st.sampled_from(StopResult))
        )
    if kind == "recover_startup":
        return RecoverLocalStartup(
            run_id=RUN_ID, attempt_id=attempt_id, evidence=data.draw(evidences())
        )
    if kind == "orphaned":
        return FailOrphanedCreated(
            run_id=RUN_ID, process_started_at_ms=sim.now + data.draw(st.sampled_from([1, -1]))
        )
    if kind == "recover_runtime":
        return RecoverRuntime(
            run_id=RUN_ID,
            attempt_id=attempt_id,
            evidence=data.draw(st.one_of(st.none(), evidences())),
        )
    return None


def advance_clock(data: st.DataObject, sim: Sim) -> None:
    """Time usually moves forward; sometimes it steps back (clock skew, RUN-04)."""
    step = data.draw(st.sampled_from((*TIME_STEPS, -1, -2000)))
    sim.now = max(0, sim.now + step)


def run_random(data: st.DataObject, sim: Sim, steps: int) -> Sim:
    """Drive `sim` for `steps` drawn steps (the simulator is mutated and returned)."""
    for _ in range(steps):
        advance_clock(data, sim)
        command = draw_command(data, sim)
        if command is not None:
            sim.step(command)
    return sim
