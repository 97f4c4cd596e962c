"""Run aggregates for the local-path, recovery and selection tests, reached through transitions.

Every builder applies real commands through `kernel.apply` and insists on `Applied`; no row is
assembled by hand. `scenario_aggregate` walks one Run along a named path (admission, grant, start,
local activation, expiry, recovery, lost retry, cancellation) with drawn times, stopping at the
first step the kernel refuses, so every drawn aggregate is a state the kernel can reach.

Two relabellings are used by the selection tests and are documented where they happen:
`rename` gives a simulator Run (whose ids are fixed) distinct ids, and `relabel_legacy` marks a
reached Run as `legacy`-owned, the shape of a Run that a legacy state machine drives in the same
table (the runtime transitions refuse to move a legacy Run, so its states cannot be reached
through them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hypothesis import strategies as st

from kernel import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    ActivateLocal,
    AdmitRun,
    Applied,
    Attempt,
    CancelReason,
    CompleteLocal,
    CompletionOutcome,
    ConvergeCancel,
    CreateRun,
    ExpireWithLease,
    Fence,
    GrantLease,
    LocalReceipt,
    LostRetryStep,
    NotRunningEvidence,
    Outcome,
    PolicyDefinition,
    Profile,
    RecordLocalHandle,
    RecoverLocalStartup,
    RenewLease,
    RequestCancel,
    RunAggregate,
    RunKind,
    RunOwner,
    Safety,
    Secret,
    WorkerSession,
    WorkerSessionStatus,
    apply,
    token_digest,
)
from kernel.commands import Command

LOCAL = "local"  # the local executor type (tests/support/sim.py LOCAL_EXECUTOR)
REMOTE = "shell"  # the remote Workers' executor type (tests/support/sim.py EXECUTOR)
T0 = 1_000_000
LEASE_MS = 30_000

WORKER = WorkerSession(
    worker_id="w1",
    session_id="w1-s1",
    generation=1,
    status=WorkerSessionStatus.ONLINE,
    session_expires_at_ms=T0 + 10**12,
    executor_types=(REMOTE,),
)

SAFE_POLICY = PolicyDefinition(
    max_attempts=3,
    retry_on_lost=True,
    safety=Safety.IDEMPOTENT,
    backoff_base_ms=1_000,
    backoff_max_ms=60_000,
)


# -- tokens -----------------------------------------------------------------------------------
def callback_token(attempt_id: str) -> str:
    """A deterministic completion callback token for `attempt_id` (ids here use no `.`)."""
    return f"cb_{attempt_id}".ljust(40, "y")


def callback_digest(attempt_id: str) -> str:
    return token_digest(callback_token(attempt_id))


def lease_token(attempt_id: str, generation: int) -> Secret:
    return Secret.of(f"lease_{attempt_id}_{generation}".ljust(40, "x"), "lease_token")


# -- single steps -----------------------------------------------------------------------------
def ok(outcome: Outcome) -> RunAggregate:
    assert isinstance(outcome, Applied), outcome
    return outcome.aggregate


def latest(agg: RunAggregate) -> Attempt:
    attempt = agg.latest_attempt
    assert attempt is not None
    return attempt


def admit_cmd(
    run_id: str,
    attempt_id: str,
    *,
    executor: str = LOCAL,
    kind: RunKind = RunKind.ORDINARY,
    owner: RunOwner = RunOwner.RUNTIME,
    policy: PolicyDefinition | None = None,
) -> AdmitRun:
    return AdmitRun(
        run_id=run_id,
        attempt_id=attempt_id,
        project_id="proj",
        task_id="task",
        task_revision=1,
        executor_type=executor,
        provider_policy=policy,
        kind=kind,
        owner=owner,
    )


def admit(
    run_id: str,
    attempt_id: str,
    at: int,
    *,
    executor: str = LOCAL,
    kind: RunKind = RunKind.ORDINARY,
    owner: RunOwner = RunOwner.RUNTIME,
    policy: PolicyDefinition | None = None,
) -> RunAggregate:
    command = admit_cmd(
        run_id, attempt_id, executor=executor, kind=kind, owner=owner, policy=policy
    )
    return ok(apply(None, command, at))


def create_cmd(
    run_id: str, *, kind: RunKind = RunKind.ORDINARY, owner: RunOwner = RunOwner.RUNTIME
) -> CreateRun:
    return CreateRun(
        run_id=run_id,
        project_id="proj",
        task_id="task",
        task_revision=1,
        executor_type=LOCAL,
        kind=kind,
        owner=owner,
    )


def activate_cmd(agg: RunAggregate, sequence: int = 1) -> ActivateLocal:
    attempt = latest(agg)
    return ActivateLocal(
        run_id=agg.run.run_id,
        attempt_id=attempt.attempt_id,
        local_executor_type=LOCAL,
        callback_sequence=sequence,
        callback_token_sha256=callback_digest(attempt.attempt_id),
    )


def handle_cmd(agg: RunAggregate, started_at_ms: int, handle: str = "pid:7") -> RecordLocalHandle:
    return RecordLocalHandle(
        run_id=agg.run.run_id,
        attempt_id=latest(agg).attempt_id,
        executor_handle=handle,
        started_at_ms=started_at_ms,
    )


#: The one-fact changes `mutate_receipt` makes ("start" is "start_up").
RECEIPT_MUTATIONS = (
    "run_id",
    "attempt_id",
    "seq_up",
    "seq_down",
    "digest",
    "start_up",
    "start_down",
)


def mutate_receipt(receipt: LocalReceipt, which: str, position: int = 0) -> LocalReceipt:
    """`receipt` with exactly one fact changed (`none` changes nothing): another Run or
    Attempt id, the callback sequence one up or down, the token digest's hex digit at
    `position` flipped, or the start time one millisecond later or earlier."""
    if which == "run_id":
        return dataclasses.replace(receipt, run_id="run-other")
    if which == "attempt_id":
        return dataclasses.replace(receipt, attempt_id="a-other")
    if which == "seq_up":
        return dataclasses.replace(receipt, callback_sequence=receipt.callback_sequence + 1)
    if which == "seq_down":
        return dataclasses.replace(receipt, callback_sequence=receipt.callback_sequence - 1)
    if which == "digest":
        digest = receipt.token_sha256
        flipped = "0" if digest[position] != "0" else "1"
        return dataclasses.replace(
            receipt, token_sha256=digest[:position] + flipped + digest[position + 1 :]
        )
    if which in ("start", "start_up"):
        return dataclasses.replace(receipt, started_at_ms=receipt.started_at_ms + 1)
    if which == "start_down":
        return dataclasses.replace(receipt, started_at_ms=receipt.started_at_ms - 1)
    assert which == "none", which
    return receipt


def receipt_for(
    agg: RunAggregate,
    outcome: CompletionOutcome = CompletionOutcome.SUCCEEDED,
    *,
    started_at_ms: int | None = None,
    exit_code: int | None = 0,
) -> LocalReceipt:
    """The authentic receipt of the latest (activated, local) Attempt."""
    attempt = latest(agg)
    started = started_at_ms if started_at_ms is not None else attempt.started_at_ms
    return LocalReceipt(
        run_id=agg.run.run_id,
        attempt_id=attempt.attempt_id,
        callback_sequence=attempt.callback_sequence,
        token_sha256=callback_digest(attempt.attempt_id),
        outcome=outcome,
        started_at_ms=started if started is not None else attempt.created_at_ms,
        exit_code=exit_code,
    )


def complete_cmd(agg: RunAggregate, receipt: LocalReceipt) -> CompleteLocal:
    return CompleteLocal(run_id=agg.run.run_id, attempt_id=latest(agg).attempt_id, receipt=receipt)


def grant_cmd(agg: RunAggregate, duration_ms: int = LEASE_MS) -> GrantLease:
    attempt = latest(agg)
    generation = 1 + max((x.lease_generation for x in agg.leases_of(attempt.attempt_id)), default=0)
    return GrantLease(
        run_id=agg.run.run_id,
        attempt_id=attempt.attempt_id,
        worker=WORKER,
        lease_token=lease_token(attempt.attempt_id, generation),
        lease_duration_ms=duration_ms,
    )


def fence(agg: RunAggregate) -> Fence:
    attempt = latest(agg)
    lease = agg.current_lease(attempt)
    assert lease is not None
    return Fence(
        worker_id=lease.worker_id,
        worker_session_id=lease.worker_session_id,
        worker_generation=lease.worker_generation,
        lease_generation=lease.lease_generation,
        lease_token=lease_token(attempt.attempt_id, lease.lease_generation),
        expected_version=lease.version,
    )


def expires_at(agg: RunAggregate) -> int:
    lease = agg.current_lease(latest(agg))
    assert lease is not None
    return lease.expires_at_ms


def expire_cmd(agg: RunAggregate, profile: Profile = Profile.EDGE) -> ExpireWithLease:
    attempt = latest(agg)
    assert attempt.lease_generation is not None
    return ExpireWithLease(
        run_id=agg.run.run_id,
        attempt_id=attempt.attempt_id,
        lease_generation=attempt.lease_generation,
        profile=profile,
    )


def not_running_cmd(agg: RunAggregate) -> RecoverLocalStartup:
    return not_running_cmd_for(agg.run.run_id, latest(agg).attempt_id)


def not_running_cmd_for(run_id: str, attempt_id: str) -> RecoverLocalStartup:
    return RecoverLocalStartup(run_id=run_id, attempt_id=attempt_id, evidence=NotRunningEvidence())


def due_at(agg: RunAggregate) -> int:
    assert agg.policy is not None
    assert agg.policy.next_attempt_at_ms is not None
    return agg.policy.next_attempt_at_ms


# -- whole paths --------------------------------------------------------------------------------
def local_starting(
    run_id: str, attempt_id: str, at: int, *, policy: PolicyDefinition | None = None
) -> RunAggregate:
    """Admission then L1: Run `dispatching`, Attempt `starting`, callback pair stored."""
    agg = admit(run_id, attempt_id, at, executor=LOCAL, policy=policy)
    return ok(apply(agg, activate_cmd(agg), at))


def local_running(
    run_id: str,
    attempt_id: str,
    at: int,
    *,
    started_at_ms: int | None = None,
    policy: PolicyDefinition | None = None,
) -> RunAggregate:
    """Admission, L1, L2: Run and Attempt `running` with handle `pid:7`."""
    agg = local_starting(run_id, attempt_id, at, policy=policy)
    return ok(apply(agg, handle_cmd(agg, at if started_at_ms is None else started_at_ms), at))


def remote_started(
    run_id: str,
    attempt_id: str,
    at: int,
    *,
    running: bool,
    duration_ms: int = LEASE_MS,
    policy: PolicyDefinition | None = None,
) -> RunAggregate:
    """Admission, T1, T2 (and T4 when `running`), all at `at`; the lease expires at
    `at + duration_ms`."""
    agg = admit(run_id, attempt_id, at, executor=REMOTE, policy=policy)
    agg = ok(apply(agg, grant_cmd(agg, duration_ms), at))
    agg = ok(
        apply(
            agg,
            AcknowledgeStarting(
                run_id=run_id, attempt_id=attempt_id, fence=fence(agg), worker=WORKER
            ),
            at,
        )
    )
    if running:
        agg = ok(
            apply(
                agg,
                AcknowledgeRunning(
                    run_id=run_id,
                    attempt_id=attempt_id,
                    fence=fence(agg),
                    worker=WORKER,
                    executor_handle="pid:1",
                    started_at_ms=at,
                ),
                at,
            )
        )
    return agg


def local_requeued(run_id: str, first: str, second: str, at: int) -> RunAggregate:
    """A local Run whose Attempt 1 was lost at startup (`not_running`, at `at + 10`) and whose
    safe policy requeued it with a pristine `claimed` Attempt 2 (created at the due time)."""
    lost = ok(
        apply(
            local_running(run_id, first, at, policy=SAFE_POLICY),
            not_running_cmd_for(run_id, first),
            at + 10,
        )
    )
    scheduled = ok(apply(lost, LostRetryStep(run_id=run_id, new_attempt_id=second), at + 10))
    return ok(
        apply(scheduled, LostRetryStep(run_id=run_id, new_attempt_id=second), due_at(scheduled))
    )


def request_cancel(agg: RunAggregate, at: int, reason: CancelReason) -> RunAggregate:
    return ok(apply(agg, RequestCancel(run_id=agg.run.run_id, reason=reason), at))


# -- relabelling --------------------------------------------------------------------------------
def _aid(run_id: str, attempt_id: str) -> str:
    return f"{run_id}-{attempt_id}"


def rename(agg: RunAggregate, run_id: str) -> RunAggregate:
    """The same aggregate under another Run id, with Attempt ids prefixed by it, consistently in
    the Run, Attempts, policy and leases (the simulator always uses one fixed Run id)."""
    return RunAggregate(
        run=dataclasses.replace(agg.run, run_id=run_id),
        attempts=tuple(
            dataclasses.replace(a, run_id=run_id, attempt_id=_aid(run_id, a.attempt_id))
            for a in agg.attempts
        ),
        policy=dataclasses.replace(agg.policy, run_id=run_id) if agg.policy is not None else None,
        leases=tuple(
            dataclasses.replace(x, run_id=run_id, attempt_id=_aid(run_id, x.attempt_id))
            for x in agg.leases
        ),
    )


def relabel_legacy(agg: RunAggregate) -> RunAggregate:
    return dataclasses.replace(agg, run=dataclasses.replace(agg.run, owner=RunOwner.LEGACY))


# -- scenario strategy --------------------------------------------------------------------------
SCENARIOS: tuple[str, ...] = (
    "created",
    "queued",
    "claimed_leased",
    "claimed_requeued",
    "claimed_regranted",
    "remote_starting",
    "remote_running",
    "remote_revoked",
    "local_starting",
    "local_running",
    "local_lost",
    "remote_lost",
    "retry_wait",
    "requeued",
    "requeued_local_starting",
    "terminal",
    "converged",
)
TIMES = tuple(T0 + k * 5_000 for k in range(12))  # few distinct times, so keys tie
DURATIONS = (5_000, 30_000, 600_000)
GAPS = (0, 1, 1_000, 5_000, 40_000)
OBSERVED = st.one_of(
    st.sampled_from([T0 + k * 5_000 for k in range(0, 160)]),
    st.integers(T0, T0 + 800_000),
)


@st.composite
def scenario_aggregate(
    draw: st.DrawFn,
    run_id: str,
    attempt_prefix: str,
    *,
    scenarios: Sequence[str] = SCENARIOS,
    kinds: Sequence[RunKind] = (RunKind.ORDINARY,) * 4 + (RunKind.WORKFLOW,),
    legacy: bool = True,
    cancel: bool = True,
) -> RunAggregate:
    """One Run walked along a drawn scenario; see the module docstring."""
    scenario = draw(st.sampled_from(list(scenarios)))
    kind = draw(st.sampled_from(list(kinds)))
    policy = draw(st.sampled_from([SAFE_POLICY, SAFE_POLICY, None]))
    duration = draw(st.sampled_from(DURATIONS))
    a1 = f"{attempt_prefix}-a1"
    a2 = f"{attempt_prefix}-a2"
    now = draw(st.sampled_from(TIMES))

    def gap() -> int:
        return draw(st.sampled_from(GAPS))

    remote = scenario.startswith(("claimed", "remote")) or (
        scenario in ("retry_wait", "requeued") and draw(st.booleans())
    )
    plan: list[str]
    if scenario == "created":
        plan = ["create"]
    elif remote:
        plan = ["admit", "grant"]
        if scenario == "claimed_requeued":
            plan += ["expire"]
        elif scenario == "claimed_regranted":
            plan += ["expire", "grant"]
        elif scenario != "claimed_leased":
            plan += ["starting"]
            if scenario != "remote_starting":
                plan += ["running"]
            if scenario == "remote_revoked":
                plan += ["cancel", "expire"]
            if scenario in ("remote_lost", "retry_wait", "requeued"):
                plan += ["expire"]
    else:
        plan = ["admit"]
        if scenario != "queued":
            plan += ["activate"]
            if scenario not in ("local_starting",):
                plan += ["handle"]
            if scenario in ("local_lost", "retry_wait", "requeued", "requeued_local_starting"):
                plan += ["not_running"]
            if scenario == "terminal":
                plan += ["complete"]
            if scenario == "converged":
                plan = ["admit", "cancel", "converge"]
    if scenario in ("retry_wait", "requeued", "requeued_local_starting"):
        plan += ["schedule"]
    if scenario in ("requeued", "requeued_local_starting"):
        plan += ["requeue"]
    if scenario == "requeued_local_starting":
        plan += ["activate"]
    # A cancellation intent, sometimes, before some step or at the end.
    if cancel and "cancel" not in plan and draw(st.integers(0, 3)) == 0:
        plan.insert(draw(st.integers(1, len(plan))), "cancel")

    agg: RunAggregate | None = None
    for name in plan:
        at = now + gap()
        command: Command
        if name == "create":
            command = create_cmd(run_id, kind=kind)
        elif name == "admit":
            command = admit_cmd(
                run_id, a1, executor=REMOTE if remote else LOCAL, kind=kind, policy=policy
            )
        elif name == "cancel":
            command = RequestCancel(run_id=run_id, reason=draw(st.sampled_from(list(CancelReason))))
        elif name == "converge":
            command = ConvergeCancel(run_id=run_id)
        else:
            assert agg is not None
            attempt = latest(agg)
            if name == "grant":
                command = grant_cmd(agg, duration)
            elif name == "starting":
                command = AcknowledgeStarting(
                    run_id=run_id, attempt_id=attempt.attempt_id, fence=fence(agg), worker=WORKER
                )
            elif name == "running":
                if draw(st.booleans()):  # a renew first, sometimes
                    renew = RenewLease(
                        run_id=run_id,
                        attempt_id=attempt.attempt_id,
                        fence=fence(agg),
                        worker=WORKER,
                        lease_duration_ms=duration,
                    )
                    renewed = apply(agg, renew, at)
                    if isinstance(renewed, Applied):
                        agg = renewed.aggregate
                command = AcknowledgeRunning(
                    run_id=run_id,
                    attempt_id=attempt.attempt_id,
                    fence=fence(agg),
                    worker=WORKER,
                    executor_handle="pid:1",
                    started_at_ms=at,
                )
            elif name == "expire":
                at = max(at, expires_at(agg)) + gap()
                command = expire_cmd(agg)
            elif name == "activate":
                command = activate_cmd(agg)
            elif name == "handle":
                command = handle_cmd(agg, at)
            elif name == "not_running":
                command = not_running_cmd(agg)
            elif name == "complete":
                command = complete_cmd(
                    agg, receipt_for(agg, draw(st.sampled_from(list(CompletionOutcome))))
                )
            elif name == "schedule":
                command = LostRetryStep(run_id=run_id, new_attempt_id=a2)
            else:
                assert name == "requeue"
                if agg.policy is None or agg.policy.next_attempt_at_ms is None:
                    break  # lost retry failed the Run instead of scheduling it
                at = max(at, due_at(agg)) + gap()
                command = LostRetryStep(run_id=run_id, new_attempt_id=a2)
        outcome = apply(agg, command, at)
        if not isinstance(outcome, Applied):
            break  # the kernel refused this step: keep the last reached state
        agg = outcome.aggregate
        now = at
    assert agg is not None
    if legacy and draw(st.integers(0, 7)) == 0:
        agg = relabel_legacy(agg)
    return agg


@st.composite
def aggregate_sets(
    draw: st.DrawFn,
    min_size: int = 0,
    max_size: int = 24,
    *,
    scenarios: Sequence[str] = SCENARIOS,
    kinds: Sequence[RunKind] = (RunKind.ORDINARY,) * 4 + (RunKind.WORKFLOW,),
    legacy: bool = True,
    cancel: bool = True,
) -> list[RunAggregate]:
    """Aggregates with distinct Run ids and globally distinct Attempt ids, in a drawn order
    (Run id order and Attempt id order are independent)."""
    n = draw(st.integers(min_size, max_size))
    run_numbers = draw(st.lists(st.integers(0, 999), min_size=n, max_size=n, unique=True))
    attempt_numbers = draw(st.lists(st.integers(0, 999), min_size=n, max_size=n, unique=True))
    aggs = [
        draw(
            scenario_aggregate(
                f"r{r:03d}",
                f"x{x:03d}",
                scenarios=scenarios,
                kinds=kinds,
                legacy=legacy,
                cancel=cancel,
            )
        )
        for r, x in zip(run_numbers, attempt_numbers, strict=True)
    ]
    return list(draw(st.permutations(aggs)))
