"""Minimal cancellation (SPEC §1.9, B-06, B-28; RETRY-11, RUN-03, RUN-04).

`request_cancel` records an intent once; `converge_cancel` ends a Run that has no live
execution as `cancelled` (`timed_out` for a `timeout` intent). An intent always wins over lost
retry. Every state is reached through kernel transitions.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import (
    AcknowledgeRunning,
    Actor,
    AppendEvent,
    Applied,
    AttemptStatus,
    CancelReason,
    Code,
    CompleteWithLease,
    CompletionOutcome,
    ConvergeCancel,
    CreateRun,
    EffectConflict,
    ExpireWithLease,
    Fence,
    LeaseStatus,
    LostRetryStep,
    NotRunningEvidence,
    PolicyDefinition,
    Profile,
    Raced,
    RecoverRuntime,
    Rejected,
    ReleaseReason,
    RenewLease,
    Replayed,
    RequestCancel,
    RunAggregate,
    RunStatus,
    UpdateRun,
    apply_effects,
    check_invariants,
    converge_cancel,
    lost_retry_step,
    request_cancel,
)
from tests.support.retry_fixtures import (
    EXECUTOR,
    LEASE_MS,
    RUN_ID,
    WORKER,
    Flow,
    policy,
    safe_enabled_policies,
)

RETRY_POLICY = policy(max_attempts=4, backoff_base_ms=1_000, backoff_max_ms=60_000)
NON_TERMINAL = (
    "created",
    "queued",
    "dispatching",
    "starting",
    "running",
    "lost",
    "retry_wait",
)
CONVERGEABLE = ("created", "queued", "dispatching", "lost", "retry_wait")
LIVE = ("starting", "running")


def running(flow: Flow) -> Applied:
    latest = flow.aggregate.latest_attempt
    assert latest is not None
    return flow.must(
        AcknowledgeRunning(
            run_id=RUN_ID,
            attempt_id=latest.attempt_id,
            fence=flow.fence(),
            worker=WORKER,
            executor_handle="pid:42",
            started_at_ms=flow.now,
        ),
        flow.now + 1,
    )


def reach(state: str, provider_policy: PolicyDefinition | None = RETRY_POLICY) -> Flow:
    """A Run in `state`, reached through kernel transitions only."""
    flow = Flow()
    if state == "created":
        flow.must(
            CreateRun(
                run_id=RUN_ID,
                project_id="proj",
                task_id="task",
                task_revision=1,
                executor_type=EXECUTOR,
            )
        )
        return flow
    flow.admit(provider_policy)
    if state == "queued":
        return flow
    flow.grant()
    if state == "dispatching":
        return flow
    flow.starting()
    if state == "starting":
        return flow
    if state in ("running", "succeeded"):
        running(flow)
        if state == "succeeded":
            latest = flow.aggregate.latest_attempt
            assert latest is not None
            flow.must(
                CompleteWithLease(
                    run_id=RUN_ID,
                    attempt_id=latest.attempt_id,
                    fence=flow.fence(),
                    worker=WORKER,
                    callback_sequence=1,
                    outcome=CompletionOutcome.SUCCEEDED,
                    exit_code=0,
                ),
                flow.now + 1,
            )
        return flow
    flow.expire_lost()
    if state == "lost":
        return flow
    if state == "failed":
        flow.must(LostRetryStep(run_id=RUN_ID, new_attempt_id="a2"))
        assert flow.aggregate.run.status is RunStatus.FAILED
        return flow
    assert state == "retry_wait"
    flow.must(LostRetryStep(run_id=RUN_ID, new_attempt_id="a2"))
    return flow


def final_status(reason: CancelReason) -> RunStatus:
    return RunStatus.TIMED_OUT if reason is CancelReason.TIMEOUT else RunStatus.CANCELLED


# -- request_cancel ----------------------------------------------------------------------------
@pytest.mark.spec("RUN-03", "RETRY-11")
@given(
    st.sampled_from(NON_TERMINAL),
    st.sampled_from(CancelReason),
    st.sampled_from(CancelReason),
    st.sampled_from(Actor),
    st.integers(0, 10**7),
)
def test_request_cancel_sets_the_intent_once(
    state: str, reason: CancelReason, second: CancelReason, actor: Actor, gap: int
) -> None:
    """§1.9 / V-3: on a non-terminal Run without intent, `request_cancel` sets
    `cancel_requested_at_ms = now` and the reason, changes nothing else but the Run's version,
    and appends exactly one `run.cancel_requested` Event (by the requesting actor). A second
    request, with any reason, is `Replayed(already_applied)` and keeps the first intent."""
    flow = reach(state)
    before = flow.aggregate
    now = flow.now + gap
    outcome = flow.step(RequestCancel(run_id=RUN_ID, reason=reason, actor=actor), now)
    assert isinstance(outcome, Applied)
    assert outcome.code is Code.CANCEL_REQUESTED_APPLIED
    after = outcome.aggregate
    assert after.run.cancel_requested_at_ms == now
    assert after.run.cancel_reason is reason
    assert after.run.status is before.run.status
    assert after.run.version == before.run.version + 1
    assert (after.attempts, after.policy, after.leases) == (
        before.attempts,
        before.policy,
        before.leases,
    )
    assert [type(e) for e in outcome.effects] == [UpdateRun, AppendEvent]
    assert [(e.type, e.actor) for e in outcome.events] == [("run.cancel_requested", actor)]
    assert ("reason", reason) in outcome.events[0].payload
    again = flow.step(RequestCancel(run_id=RUN_ID, reason=second), now + 1)
    assert again == Replayed(Code.ALREADY_APPLIED)
    assert flow.aggregate == after


@pytest.mark.spec("RUN-03")
@pytest.mark.parametrize("state", ["failed", "succeeded"])
@pytest.mark.parametrize("reason", list(CancelReason))
def test_request_cancel_on_a_terminal_run_is_already_terminal(
    state: str, reason: CancelReason
) -> None:
    """§1.9: a terminal Run takes no intent: `Replayed(already_terminal)`, nothing written."""
    flow = reach(state, None)
    before = flow.aggregate
    assert before.run.status.terminal
    assert flow.step(RequestCancel(run_id=RUN_ID, reason=reason)) == Replayed(Code.ALREADY_TERMINAL)
    assert flow.step(ConvergeCancel(run_id=RUN_ID)) == Replayed(Code.ALREADY_TERMINAL)
    assert flow.aggregate == before


@pytest.mark.spec("RUN-03")
def test_request_cancel_for_a_missing_run_is_refused() -> None:
    """Nothing to cancel: `Rejected(RUN_NOT_FOUND)`; the same for convergence."""
    assert request_cancel(None, RequestCancel(run_id=RUN_ID, reason=CancelReason.USER), 0) == (
        Rejected(Code.RUN_NOT_FOUND)
    )
    assert converge_cancel(None, ConvergeCancel(run_id=RUN_ID), 0) == Rejected(Code.RUN_NOT_FOUND)


# -- converge_cancel ---------------------------------------------------------------------------
@pytest.mark.spec("RETRY-11", "RUN-03", "RUN-08")
@settings(max_examples=100)
@given(st.sampled_from(CONVERGEABLE), st.sampled_from(CancelReason), st.integers(0, 10**7))
def test_converge_cancel_ends_a_run_without_live_execution(
    state: str, reason: CancelReason, gap: int
) -> None:
    """§1.9 / B-06: with an intent and no live execution (`created`, `queued`, `lost`,
    `retry_wait`, or `dispatching` with a `claimed` Attempt), `converge_cancel` makes the Run
    `cancelled` (`timed_out` for reason `timeout`); a `claimed` latest Attempt takes the same
    status; its `leased` lease becomes `released(cancelled)` (version+1); the policy cursor is
    cleared (policy version+1); a `lost` Attempt is left as it is. Events: `run.<final>`, then
    `attempt.<final>` for a claimed Attempt. Afterwards everything is a replay."""
    flow = reach(state)
    flow.must(RequestCancel(run_id=RUN_ID, reason=reason))
    before = flow.aggregate
    latest = before.latest_attempt
    now = flow.now + gap
    outcome = flow.step(ConvergeCancel(run_id=RUN_ID), now)
    assert isinstance(outcome, Applied)
    assert outcome.code is Code.CONVERGED
    after = outcome.aggregate
    final = final_status(reason)
    assert after.run.status is final
    assert after.run.finished_at_ms == now
    assert after.run.version == before.run.version + 1
    claimed = latest is not None and latest.status is AttemptStatus.CLAIMED
    expected_events = [f"run.{final}"] + ([f"attempt.{final}"] if claimed else [])
    assert [e.type for e in outcome.events] == expected_events
    if latest is None:
        assert after.attempts == ()
    elif claimed:
        new = after.attempts[-1]
        assert new.status.value == final.value
        assert new.finished_at_ms == now
        assert outcome.events[-1].attempt_id == latest.attempt_id
    else:
        assert after.attempts == before.attempts  # a lost Attempt never changes (I-5)
    assert after.attempts[:-1] == before.attempts[:-1]
    for lease in before.leases:
        now_lease = after.lease(lease.attempt_id, lease.lease_generation)
        assert now_lease is not None
        if lease.status is LeaseStatus.LEASED:
            assert now_lease.status is LeaseStatus.RELEASED
            assert now_lease.release_reason is ReleaseReason.CANCELLED
            assert now_lease.version == lease.version + 1
            assert now_lease.released_at_ms == now
        else:
            assert now_lease == lease
    if before.policy is not None:
        assert after.policy is not None
        assert after.policy.next_attempt_at_ms is None
        moved = 1 if before.policy.next_attempt_at_ms is not None else 0
        assert after.policy.version == before.policy.version + moved
    assert check_invariants(after, flow.events) == []
    # Terminal now: every further step is a replay or a race and writes nothing.
    assert flow.step(ConvergeCancel(run_id=RUN_ID), now + 1) == Replayed(Code.ALREADY_TERMINAL)
    assert flow.step(RequestCancel(run_id=RUN_ID, reason=reason), now + 1) == Replayed(
        Code.ALREADY_TERMINAL
    )
    assert flow.step(LostRetryStep(run_id=RUN_ID, new_attempt_id="a9"), now + 10**9) == Raced(
        Code.NOT_ELIGIBLE
    )
    assert flow.aggregate == after


@pytest.mark.spec("RETRY-11")
@pytest.mark.parametrize("state", LIVE)
@pytest.mark.parametrize("reason", [CancelReason.USER, CancelReason.TIMEOUT])
def test_converge_cancel_with_live_execution_is_rejected(state: str, reason: CancelReason) -> None:
    """§1.9: a `starting` or `running` Attempt is a live execution, which the execution control
    path must stop first: `converge_cancel` is `Rejected(LIVE_EXECUTION)` and writes nothing."""
    flow = reach(state)
    flow.must(RequestCancel(run_id=RUN_ID, reason=reason))
    before = flow.aggregate
    assert flow.step(ConvergeCancel(run_id=RUN_ID), flow.now + 5) == Rejected(Code.LIVE_EXECUTION)
    assert flow.aggregate == before


# -- E-1: cancellation after revoked remote authority ------------------------------------------
def revoked(state: str, reason: CancelReason, profile: Profile) -> tuple[Flow, Fence]:
    """Cancel while `state` (starting or running), then the lease expires (T9 on either
    profile: only the old authority is revoked). Returns the flow and the old Worker's fence."""
    flow = reach(state)
    flow.must(RequestCancel(run_id=RUN_ID, reason=reason))
    old = flow.fence()
    latest = flow.aggregate.latest_attempt
    assert latest is not None
    assert latest.lease_generation is not None
    before = flow.aggregate
    expired = flow.must(
        ExpireWithLease(RUN_ID, latest.attempt_id, latest.lease_generation, profile),
        flow.now + LEASE_MS + 1,
    )
    assert expired.code is Code.RELEASED
    after = flow.aggregate
    assert after.run.status is before.run.status
    assert [a.status for a in after.attempts] == [a.status for a in before.attempts]
    return flow, old


@pytest.mark.spec("E-1", "RUN-03", "RUN-08")
@settings(max_examples=60)
@given(
    st.sampled_from(LIVE),
    st.sampled_from(CancelReason),
    st.sampled_from([Profile.EDGE, Profile.STANDALONE, Profile.CLUSTER]),
    st.integers(0, 10**7),
)
def test_converge_cancel_ends_a_run_whose_remote_authority_was_revoked(
    state: str, reason: CancelReason, profile: Profile, gap: int
) -> None:
    """E-1: with an intent, a `starting`/`running` remote Attempt whose lease T9 released
    (`lease_expired`) has no live authority: `converge_cancel` applies in one transaction:
    Attempt and Run `cancelled` (`timed_out` for a timeout intent) with `finished_at_ms = now`,
    the released lease untouched, the policy cursor untouched (there is none), no Attempt
    created; Events `run.<final>` with `stop_unverified: true`, then `attempt.<final>`, both by
    the scheduler. The old Worker's completion that arrives later is refused by the fence
    (`LEASE_NOT_LEASED`), as are its renewal and acknowledgements; every further convergence,
    expiry, recovery or retry writes nothing."""
    flow, old = revoked(state, reason, profile)
    before = flow.aggregate
    latest = before.latest_attempt
    assert latest is not None
    now = flow.now + gap
    outcome = flow.step(ConvergeCancel(run_id=RUN_ID), now)
    assert isinstance(outcome, Applied)
    assert outcome.code is Code.CONVERGED
    after = outcome.aggregate
    final = final_status(reason)
    assert after.run.status is final
    assert after.run.finished_at_ms == now
    assert after.run.version == before.run.version + 1
    assert len(after.attempts) == len(before.attempts)  # no Attempt is ever created
    ended = after.attempts[-1]
    assert ended == dataclasses.replace(
        latest, status=AttemptStatus(final.value), finished_at_ms=now
    )
    assert after.leases == before.leases  # released (lease_expired) stays as it is (I-5)
    assert after.policy == before.policy
    assert [(e.type, e.actor, e.attempt_id, e.payload) for e in outcome.events] == [
        (f"run.{final}", Actor.SCHEDULER, None, (("stop_unverified", True),)),
        (f"attempt.{final}", Actor.SCHEDULER, latest.attempt_id, ()),
    ]
    assert check_invariants(after, flow.events) == []
    late = now + 1
    outcome_value = (
        CompletionOutcome.TIMED_OUT
        if reason is CancelReason.TIMEOUT
        else CompletionOutcome.CANCELLED
    )
    completion = CompleteWithLease(RUN_ID, latest.attempt_id, old, WORKER, 1, outcome_value, 0)
    assert flow.step(completion, late) == Rejected(Code.LEASE_NOT_LEASED)
    assert flow.step(RenewLease(RUN_ID, latest.attempt_id, old, WORKER, LEASE_MS), late) == (
        Rejected(Code.LEASE_NOT_LEASED)
    )
    assert flow.step(ConvergeCancel(run_id=RUN_ID), late) == Replayed(Code.ALREADY_TERMINAL)
    assert flow.step(
        ExpireWithLease(RUN_ID, latest.attempt_id, old.lease_generation, profile), late
    ) == Replayed(Code.ALREADY_FINAL)
    assert flow.step(
        RecoverRuntime(RUN_ID, latest.attempt_id, NotRunningEvidence()), late
    ) == Raced(Code.NOT_ELIGIBLE)
    assert flow.step(LostRetryStep(RUN_ID, "a9"), late) == Raced(Code.NOT_ELIGIBLE)
    assert flow.aggregate == after


@pytest.mark.spec("E-1", "RETRY-11")
@pytest.mark.parametrize("state", LIVE)
def test_an_expired_lease_not_yet_released_is_still_a_live_execution(state: str) -> None:
    """E-1 starts at the release (T9), not at the expiry instant: with an intent, a started
    Attempt whose lease has run out but is still `leased` (nobody expired it yet) is refused
    with `LIVE_EXECUTION`; so is one whose lease is live, and nothing is written."""
    flow = reach(state)
    flow.must(RequestCancel(run_id=RUN_ID, reason=CancelReason.USER))
    before = flow.aggregate
    latest = before.latest_attempt
    assert latest is not None
    lease = before.leased_lease(latest.attempt_id)
    assert lease is not None
    for at in (flow.now + 1, lease.expires_at_ms, lease.expires_at_ms + 10**6):
        assert flow.step(ConvergeCancel(run_id=RUN_ID), at) == Rejected(Code.LIVE_EXECUTION)
    assert flow.aggregate == before


@pytest.mark.spec("E-1", "RUN-04")
@given(st.sampled_from(LIVE), st.integers(1, 10**6))
def test_e1_convergence_before_the_release_time_is_a_clock_regression(
    state: str, back: int
) -> None:
    """V-5: convergence observed before T9's release (the Run's last change) is
    `Rejected(CLOCK_REGRESSION)` and writes nothing."""
    flow, _old = revoked(state, CancelReason.USER, Profile.EDGE)
    agg = flow.aggregate
    at = max(0, agg.run.updated_at_ms - back)
    assert converge_cancel(agg, ConvergeCancel(run_id=RUN_ID), at) == Rejected(
        Code.CLOCK_REGRESSION
    )


@pytest.mark.spec("RETRY-11")
@pytest.mark.parametrize("state", NON_TERMINAL)
def test_converge_cancel_without_intent_is_rejected(state: str) -> None:
    """§1.9: no intent, nothing to converge: `Rejected(NO_CANCEL_INTENT)`, nothing written."""
    flow = reach(state)
    before = flow.aggregate
    assert flow.step(ConvergeCancel(run_id=RUN_ID), flow.now + 5) == Rejected(Code.NO_CANCEL_INTENT)
    assert flow.aggregate == before


@pytest.mark.spec("RUN-04")
@given(st.sampled_from(NON_TERMINAL), st.integers(1, 10**6), st.sampled_from(CancelReason))
def test_cancellation_before_the_last_durable_time_is_a_clock_regression(
    state: str, back: int, reason: CancelReason
) -> None:
    """RUN-04 / V-5: `request_cancel` or `converge_cancel` observed before the Run's last
    committed change is `Rejected(CLOCK_REGRESSION)` and the state is unchanged."""
    flow = reach(state)
    agg = flow.aggregate
    at = max(0, agg.run.updated_at_ms - back)
    command = RequestCancel(run_id=RUN_ID, reason=reason)
    assert request_cancel(agg, command, at) == Rejected(Code.CLOCK_REGRESSION)
    if state in CONVERGEABLE:
        flow.must(command)
        with_intent = flow.aggregate
        at = max(0, with_intent.run.updated_at_ms - back)
        assert converge_cancel(with_intent, ConvergeCancel(run_id=RUN_ID), at) == Rejected(
            Code.CLOCK_REGRESSION
        )
        assert flow.aggregate == with_intent


# -- RETRY-11: intent beats retry --------------------------------------------------------------
INTENT_POINTS = ("queued", "dispatching", "starting", "running", "lost", "retry_wait", "due")


def _latest_lease_live(agg: RunAggregate) -> bool:
    latest = agg.latest_attempt
    return latest is not None and agg.leased_lease(latest.attempt_id) is not None


def _expire(flow: Flow, profile: Profile) -> None:
    latest = flow.aggregate.latest_attempt
    assert latest is not None
    assert latest.lease_generation is not None
    flow.must(
        ExpireWithLease(
            run_id=RUN_ID,
            attempt_id=latest.attempt_id,
            lease_generation=latest.lease_generation,
            profile=profile,
        ),
        flow.now + LEASE_MS + 1,
    )


@pytest.mark.spec("RETRY-11", "RETRY-09")
@settings(max_examples=150)
@given(
    safe_enabled_policies(max_attempts=st.integers(2, 5)),
    st.sampled_from(INTENT_POINTS),
    st.sampled_from(CancelReason),
    st.data(),
)
def test_intent_before_requeue_prevents_attempt_n_plus_1(
    provider_policy: PolicyDefinition,
    point: str,
    reason: CancelReason,
    data: st.DataObject,
) -> None:
    """RETRY-11: a cancellation intent set at any point before the requeue commits (while
    Attempt N is queued, dispatching, starting or running, once it is lost, while the Run waits
    for its retry, or when the retry is already due) prevents Attempt N+1: every later
    lost-retry step, at any time and with any new id, is `Raced(NOT_ELIGIBLE)`; a requeue
    computed from the pre-intent aggregate cannot be persisted over the intent (CAS); the Run
    finally converges to `cancelled` (`timed_out` for reason `timeout`) with Attempts 1..N
    only. A live execution's lease first runs out (edge T8 is replaced by T9 under an intent);
    then recovery with trusted not-running evidence makes it lost (§2.3), or convergence ends it
    at once (E-1)."""
    flow = Flow()
    flow.admit(provider_policy)
    stale_requeue: Applied | None = None
    if point != "queued":
        flow.grant()
    if point in ("starting", "running", "lost", "retry_wait", "due"):
        flow.starting()
    if point == "running":
        running(flow)
    if point in ("lost", "retry_wait", "due"):
        flow.expire_lost()
    if point in ("retry_wait", "due"):
        flow.must(LostRetryStep(run_id=RUN_ID, new_attempt_id="a2"))
        policy_row = flow.aggregate.policy
        assert policy_row is not None
        assert policy_row.next_attempt_at_ms is not None
        if point == "due":
            flow.now = max(flow.now, policy_row.next_attempt_at_ms)
            computed = lost_retry_step(
                flow.aggregate, LostRetryStep(run_id=RUN_ID, new_attempt_id="a2"), flow.now
            )
            assert isinstance(computed, Applied)
            assert computed.code is Code.REQUEUED
            stale_requeue = computed
    attempts_at_intent = flow.aggregate.attempts
    assert isinstance(flow.request_cancel(reason), Applied)
    assert flow.aggregate.run.cancel_reason is reason
    ids_at_intent = [(a.number, a.attempt_id) for a in attempts_at_intent]
    if stale_requeue is not None:
        with pytest.raises(EffectConflict):
            apply_effects(flow.aggregate, stale_requeue.effects)

    for _ in range(data.draw(st.integers(0, 6))):
        action = data.draw(st.sampled_from(["retry", "retry", "time", "expire"]))
        if action == "time":
            flow.now += data.draw(st.sampled_from([1, 1_000, 60_000, 10**6]))
        elif action == "expire" and _latest_lease_live(flow.aggregate):
            _expire(flow, data.draw(st.sampled_from([Profile.EDGE, Profile.CLUSTER])))
        else:
            new_id = data.draw(st.sampled_from(["a2", "a3", "a9"]))
            at = flow.now + data.draw(st.sampled_from([0, 1, 10**6, 10**9]))
            outcome = flow.step(LostRetryStep(run_id=RUN_ID, new_attempt_id=new_id), at)
            assert outcome == Raced(Code.NOT_ELIGIBLE)
        assert [(a.number, a.attempt_id) for a in flow.aggregate.attempts] == ids_at_intent

    # Settle a live execution the way the records do, then converge: T9 revokes the old
    # authority; then either recovery with trusted not-running evidence makes it lost (§2.3),
    # or convergence ends it at once (E-1).
    latest = flow.aggregate.latest_attempt
    assert latest is not None
    if latest.status in (AttemptStatus.STARTING, AttemptStatus.RUNNING):
        if _latest_lease_live(flow.aggregate):
            assert flow.step(ConvergeCancel(run_id=RUN_ID), flow.now) == Rejected(
                Code.LIVE_EXECUTION
            )
            _expire(flow, Profile.EDGE)  # T9: only the old authority is revoked
            assert flow.aggregate.run.status in (RunStatus.DISPATCHING, RunStatus.RUNNING)
        if data.draw(st.booleans()):
            flow.must(
                RecoverRuntime(
                    run_id=RUN_ID, attempt_id=latest.attempt_id, evidence=NotRunningEvidence()
                ),
                flow.now + 1,
            )
            assert flow.aggregate.run.status is RunStatus.LOST
        assert flow.step(LostRetryStep(run_id=RUN_ID, new_attempt_id="a9"), flow.now + 1) == Raced(
            Code.NOT_ELIGIBLE
        )
    outcome = flow.converge(flow.now + 1)
    assert isinstance(outcome, Applied)
    final = final_status(reason)
    assert flow.aggregate.run.status is final
    assert [(a.number, a.attempt_id) for a in flow.aggregate.attempts] == ids_at_intent
    assert flow.aggregate.latest_attempt is not None
    assert flow.aggregate.latest_attempt.status in (AttemptStatus.LOST, AttemptStatus(final.value))
    policy_row = flow.aggregate.policy
    assert policy_row is not None
    assert policy_row.next_attempt_at_ms is None
    assert check_invariants(flow.aggregate, flow.events) == []
