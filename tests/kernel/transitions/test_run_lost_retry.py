"""Lost retry, one decision per candidate (SPEC §1.8.1, B-23, B-24, D-14; RETRY-03..RETRY-09,
RETRY-19, RUN-04, RUN-07).

States are reached through the kernel (admission, T1, T2, edge expiry T8, earlier retry steps).
The precedence tests also store policies that admission refuses (`with_policy`, documented in
`tests/support/retry_fixtures.py`): a `safety = unknown` policy with retry enabled can never be
admitted (A-4) and a policy never changes after admission apart from its cursor, so R2 and the
DISABLED > UNSAFE > EXHAUSTED precedence can only be exercised on such constructed aggregates.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import (
    TRANSITIONS,
    Actor,
    AppendEvent,
    Applied,
    Attempt,
    AttemptStatus,
    Code,
    EffectConflict,
    InsertAttempt,
    LostRetryStep,
    Outcome,
    PolicyDefinition,
    Raced,
    RecoverRuntime,
    Rejected,
    RunAggregate,
    RunKind,
    RunOwner,
    RunStatus,
    Safety,
    UpdateAttempt,
    UpdatePolicy,
    UpdateRun,
    apply_effects,
    check_invariants,
    lost_retry_step,
)
from kernel import aliases as kernel_aliases
from kernel import selection as kernel_selection
from kernel import transitions as kernel_transitions
from kernel.specs.states import LostRetryDisposition
from kernel.transitions import run_lost_retry, run_recovery
from kernel.transitions.run_lost_retry import decide, is_lost_retry_eligible, retry_base_ms
from kernel.transitions.run_recovery import is_pristine
from tests.support.retry_fixtures import (
    RUN_ID,
    SAFE,
    T0,
    Flow,
    lost_flow,
    policy,
    safe_enabled_policies,
    valid_policies,
    with_policy,
)
from tests.support.sim import Sim, advance_clock, draw_command

REPO_ROOT = Path(__file__).resolve().parents[3]
RETRY_POLICY = policy(max_attempts=16, backoff_base_ms=1_000, backoff_max_ms=60_000)
FAILURE_CODES = {
    LostRetryDisposition.FAILED_DISABLED: Code.RUN_LOST_RETRY_DISABLED,
    LostRetryDisposition.FAILED_UNSAFE: Code.RUN_LOST_RETRY_UNSAFE,
    LostRetryDisposition.FAILED_EXHAUSTED: Code.RUN_LOST_RETRY_EXHAUSTED,
}


# -- helpers -----------------------------------------------------------------------------------
def step_command(new_attempt_id: str = "a-new") -> LostRetryStep:
    return LostRetryStep(run_id=RUN_ID, new_attempt_id=new_attempt_id)


def due_at(agg: RunAggregate) -> int:
    assert agg.policy is not None
    assert agg.policy.next_attempt_at_ms is not None
    return agg.policy.next_attempt_at_ms


def durable_max(agg: RunAggregate) -> int:
    """The latest durable time a lost-retry step depends on (V-5)."""
    latest = agg.latest_attempt
    assert latest is not None
    times = [agg.run.updated_at_ms, latest.created_at_ms, latest.finished_at_ms or 0]
    if agg.policy is not None:
        times.append(agg.policy.updated_at_ms)
    return max(times)


def schedule(flow: Flow, gap_ms: int = 0) -> Applied:
    latest = flow.aggregate.latest_attempt
    assert latest is not None
    return flow.must(step_command(f"a{latest.number + 1}"), flow.now + gap_ms)


def requeue(flow: Flow, late_ms: int = 0) -> Applied:
    latest = flow.aggregate.latest_attempt
    assert latest is not None
    return flow.must(
        step_command(f"a{latest.number + 1}"), max(due_at(flow.aggregate), flow.now) + late_ms
    )


def cycle(flow: Flow) -> None:
    """lost Attempt N -> retry_wait -> queued with Attempt N+1 -> Attempt N+1 lost."""
    schedule(flow)
    requeue(flow)
    flow.to_lost()


def lost_at(n: int, provider_policy: PolicyDefinition = RETRY_POLICY) -> Flow:
    """A `lost` Run whose latest Attempt N = `n` is lost."""
    flow = lost_flow(provider_policy)
    for _ in range(n - 1):
        cycle(flow)
    latest = flow.aggregate.latest_attempt
    assert latest is not None
    assert latest.number == n
    return flow


def retry_wait_at(n: int, provider_policy: PolicyDefinition = RETRY_POLICY) -> Flow:
    flow = lost_at(n, provider_policy)
    schedule(flow)
    return flow


LOST = {n: lost_at(n).aggregate for n in (1, 2, 3)}
WAITING = {n: retry_wait_at(n).aggregate for n in (1, 2, 3)}


def expected_disposition(agg: RunAggregate, now: int) -> LostRetryDisposition | None:
    """The decision table R1..R6 of §1.8.1, written out from the SPEC (None is R6)."""
    p = agg.policy
    latest = agg.latest_attempt
    assert latest is not None
    if p is None or not p.retry_on_lost or p.max_attempts <= 1:
        return LostRetryDisposition.FAILED_DISABLED
    if p.safety is Safety.UNKNOWN:
        return LostRetryDisposition.FAILED_UNSAFE
    if latest.number >= p.max_attempts:
        return LostRetryDisposition.FAILED_EXHAUSTED
    if agg.run.status is RunStatus.LOST:
        return LostRetryDisposition.SCHEDULED
    if due_at(agg) <= now:
        return LostRetryDisposition.REQUEUED
    return None


def assert_failed(before: RunAggregate, outcome: Outcome, code: Code, now: int) -> None:
    """R1..R3: Run `failed` with the code, `run.failed` by the reconciler, no Attempt change,
    a pending cursor cleared (policy version+1)."""
    assert isinstance(outcome, Applied)
    after = outcome.aggregate
    assert after.run.status is RunStatus.FAILED
    assert after.run.error_code == code.value
    assert after.run.finished_at_ms == now
    assert after.run.version == before.run.version + 1
    assert after.attempts == before.attempts
    assert [(e.type, e.actor, e.code) for e in outcome.events] == [
        ("run.failed", Actor.RECONCILER, code.value)
    ]
    had_cursor = before.policy is not None and before.policy.next_attempt_at_ms is not None
    if had_cursor:
        assert after.policy is not None
        assert before.policy is not None
        assert after.policy.next_attempt_at_ms is None
        assert after.policy.version == before.policy.version + 1
        assert [type(e) for e in outcome.effects] == [UpdateRun, UpdatePolicy, AppendEvent]
    else:
        assert after.policy == before.policy
        assert [type(e) for e in outcome.effects] == [UpdateRun, AppendEvent]


# -- R1..R3 ------------------------------------------------------------------------------------
def _disabled_policies() -> st.SearchStrategy[PolicyDefinition | None]:
    return st.none() | valid_policies().filter(lambda p: not p.retry_on_lost or p.max_attempts <= 1)


@pytest.mark.spec("RETRY-03")
@settings(max_examples=60)
@given(_disabled_policies(), st.integers(0, 10**7))
def test_lost_run_without_enabled_policy_fails_disabled(
    provider_policy: PolicyDefinition | None, gap: int
) -> None:
    """RETRY-03 / R1: a lost Run with no policy, `retry_on_lost = false` or
    `max_attempts <= 1` (any safety, any backoff) becomes `failed` with
    `RUN_LOST_RETRY_DISABLED`; no Attempt is created or changed."""
    flow = lost_flow(provider_policy)
    before = flow.aggregate
    now = flow.now + gap
    outcome = flow.lost_retry("a2", now)
    assert isinstance(outcome, Applied)
    assert outcome.code is Code.FAILED_DISABLED
    assert_failed(before, outcome, Code.RUN_LOST_RETRY_DISABLED, now)


@pytest.mark.spec("RETRY-04")
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("waiting", [False, True])
def test_stored_unknown_safety_fails_unsafe(n: int, waiting: bool) -> None:
    """RETRY-04 / R2: a lost (or `retry_wait`) Run whose stored, enabled policy has
    `safety = unknown` becomes `failed` with `RUN_LOST_RETRY_UNSAFE`, due or not; a pending
    cursor is cleared. (The policy is constructed: admission refuses it, see module doc.)"""
    base = WAITING[n] if waiting else LOST[n]
    agg = with_policy(base, safety=Safety.UNKNOWN)
    assert check_invariants(agg) == []
    now = durable_max(agg)
    outcome = lost_retry_step(agg, step_command(), now)
    assert isinstance(outcome, Applied)
    assert outcome.code is Code.FAILED_UNSAFE
    assert_failed(agg, outcome, Code.RUN_LOST_RETRY_UNSAFE, now)


@pytest.mark.spec("RETRY-03", "RETRY-04", "RETRY-05")
@given(
    st.sampled_from([(False, 1), (False, 2), (False, 3), (True, 1), (True, 2), (True, 3)]),
    st.booleans(),
    st.tuples(st.integers(1, 16), st.booleans(), st.sampled_from(Safety)),
    st.sampled_from([0, 1, 999, 1_000, 10**6]),
)
def test_decision_precedence_disabled_unsafe_exhausted(
    start: tuple[bool, int],
    no_policy: bool,
    stored: tuple[int, bool, Safety],
    offset: int,
) -> None:
    """RETRY-04 / B-23: with policies that violate several rules at once the first rule in
    the order DISABLED, UNSAFE, EXHAUSTED decides; only a policy that passes all three
    schedules (`lost`) or requeues (`retry_wait`, due) or is `Rejected(NOT_DUE)`. A failure
    from `retry_wait` clears the cursor. (Stored policies constructed, see module doc.)"""
    waiting, n = start
    max_attempts, retry_on_lost, safety = stored
    base = WAITING[n] if waiting else LOST[n]
    if no_policy and not waiting:
        agg = dataclasses.replace(base, policy=None)
    else:
        agg = with_policy(
            base, max_attempts=max_attempts, retry_on_lost=retry_on_lost, safety=safety
        )
    now = durable_max(agg) + offset
    expected = expected_disposition(agg, now)
    assert decide(agg, now) == expected
    outcome = lost_retry_step(agg, step_command(), now)
    if expected is None:
        assert outcome == Rejected(Code.NOT_DUE)
        return
    assert isinstance(outcome, Applied)
    assert outcome.code == Code(expected.value)
    if expected in FAILURE_CODES:
        assert_failed(agg, outcome, FAILURE_CODES[expected], now)
    elif expected is LostRetryDisposition.SCHEDULED:
        assert outcome.aggregate.run.status is RunStatus.RETRY_WAIT
    else:
        assert outcome.aggregate.run.status is RunStatus.QUEUED
        assert len(outcome.aggregate.attempts) == n + 1


@pytest.mark.spec("RETRY-04")
def test_precedence_examples() -> None:
    """RETRY-04 worked examples on a lost Attempt 2: disabled + unknown + exhausted is DISABLED;
    unknown + exhausted is UNSAFE; a merely exhausted policy is EXHAUSTED."""
    agg = LOST[2]
    now = durable_max(agg)
    cases = [
        ({"retry_on_lost": False, "safety": Safety.UNKNOWN, "max_attempts": 2}, "DISABLED"),
        ({"max_attempts": 1, "safety": Safety.UNKNOWN}, "DISABLED"),
        ({"max_attempts": 2, "safety": Safety.UNKNOWN}, "UNSAFE"),
        ({"max_attempts": 16, "safety": Safety.UNKNOWN}, "UNSAFE"),
        ({"max_attempts": 2, "safety": Safety.DEDUPLICATED}, "EXHAUSTED"),
    ]
    for changes, suffix in cases:
        outcome = lost_retry_step(with_policy(agg, **changes), step_command(), now)
        assert isinstance(outcome, Applied), changes
        assert outcome.aggregate.run.error_code == f"RUN_LOST_RETRY_{suffix}", changes


@pytest.mark.spec("RETRY-05", "RETRY-06", "RETRY-08")
@settings(max_examples=40)
@given(st.integers(2, 4), st.sampled_from(SAFE), st.sampled_from([0, 1, 1_000]))
def test_retries_stop_exactly_at_max_attempts(max_attempts: int, safety: Safety, base: int) -> None:
    """RETRY-05: each lost Attempt N < max_attempts is scheduled then requeued as Attempt N+1;
    when Attempt number `max_attempts` is lost the Run becomes `failed` with
    `RUN_LOST_RETRY_EXHAUSTED`, and no Attempt beyond `max_attempts` ever exists."""
    p = policy(
        max_attempts=max_attempts, safety=safety, backoff_base_ms=base, backoff_max_ms=10_000
    )
    flow = lost_flow(p)
    for n in range(1, max_attempts):
        assert schedule(flow).code is Code.SCHEDULED
        assert requeue(flow).code is Code.REQUEUED
        assert len(flow.aggregate.attempts) == n + 1
        flow.to_lost()
    before = flow.aggregate
    outcome = flow.lost_retry("a-extra", flow.now)
    assert isinstance(outcome, Applied)
    assert outcome.code is Code.FAILED_EXHAUSTED
    assert_failed(before, outcome, Code.RUN_LOST_RETRY_EXHAUSTED, flow.now)
    assert [a.number for a in flow.aggregate.attempts] == list(range(1, max_attempts + 1))


# -- R4 ----------------------------------------------------------------------------------------
@pytest.mark.spec("RETRY-06", "RUN-03")
@settings(max_examples=60)
@given(
    safe_enabled_policies(max_attempts=st.integers(4, 16)),
    st.integers(0, 2),
    st.integers(0, 10**8),
)
def test_schedule_sets_next_attempt_at_base_plus_delay(
    provider_policy: PolicyDefinition, cycles: int, gap: int
) -> None:
    """RETRY-06 / R4: a safe, enabled, non-exhausted lost Run becomes `retry_wait` with
    `next_attempt_at_ms = base + delay` where `base = max(run.created, latest.created,
    latest.finished)` and `delay = 0` if `backoff_base_ms = 0` else
    `min(max, base_ms * 2 ** min(n - 1, 15))`; the policy version moves by one and the cursor is
    the only policy change; exactly one `run.retry_wait` Event (reconciler); no Attempt is
    inserted or updated. The value does not depend on the observation time (no jitter)."""
    flow = lost_flow(provider_policy)
    for _ in range(cycles):
        cycle(flow)
    before = flow.aggregate
    latest = before.latest_attempt
    assert latest is not None
    assert latest.finished_at_ms is not None
    assert before.policy is not None
    n = latest.number
    base = max(before.run.created_at_ms, latest.created_at_ms, latest.finished_at_ms)
    assert retry_base_ms(before, latest) == base
    bms, mms = provider_policy.backoff_base_ms, provider_policy.backoff_max_ms
    delay = 0 if bms == 0 else min(mms, bms * 2 ** min(n - 1, 15))
    now = flow.now + gap
    outcome = flow.lost_retry("a-never", now)
    assert isinstance(outcome, Applied)
    assert outcome.code is Code.SCHEDULED
    after = outcome.aggregate
    assert after.run.status is RunStatus.RETRY_WAIT
    assert after.run.version == before.run.version + 1
    assert after.policy == dataclasses.replace(
        before.policy,
        next_attempt_at_ms=base + delay,
        version=before.policy.version + 1,
        updated_at_ms=now,
    )
    assert after.attempts == before.attempts
    assert [type(e) for e in outcome.effects] == [UpdateRun, UpdatePolicy, AppendEvent]
    assert [(e.type, e.actor) for e in outcome.events] == [("run.retry_wait", Actor.RECONCILER)]
    # No jitter: another observation time gives the same cursor.
    other = lost_retry_step(before, step_command("a-other"), now + 12_345)
    assert isinstance(other, Applied)
    assert other.aggregate.policy == dataclasses.replace(after.policy, updated_at_ms=now + 12_345)


# -- R5 / R6 -----------------------------------------------------------------------------------
@pytest.mark.spec("RETRY-08", "RUN-03", "RUN-08")
@settings(max_examples=60)
@given(
    safe_enabled_policies(max_attempts=st.integers(4, 16)),
    st.integers(0, 2),
    st.integers(0, 10**8),
    st.integers(0, 10**7),
)
def test_due_retry_wait_requeues_exactly_attempt_n_plus_1(
    provider_policy: PolicyDefinition, cycles: int, schedule_gap: int, late: int
) -> None:
    """RETRY-08 / R5: a due `retry_wait` Run gets exactly Attempt N+1 (`claimed`, same
    executor type, callback sequence 0, no worker, session, lease, offer, handle, start time or
    callback fields, no lease row), Run `queued` (`queued_at_ms` set, `error_code` cleared),
    the cursor cleared with policy version+1, Events `run.queued` then `attempt.claimed` by the
    reconciler, and Attempt N unchanged (no update effect touches it)."""
    flow = lost_flow(provider_policy)
    for _ in range(cycles):
        cycle(flow)
    schedule(flow, schedule_gap)
    before = flow.aggregate
    lost = before.latest_attempt
    assert lost is not None
    assert before.policy is not None
    now = max(due_at(before), durable_max(before)) + late
    outcome = flow.lost_retry("retry-x", now)
    assert isinstance(outcome, Applied)
    assert outcome.code is Code.REQUEUED
    after = outcome.aggregate
    assert after.run.status is RunStatus.QUEUED
    assert after.run.queued_at_ms == now
    assert after.run.error_code is None
    assert after.run.retry_of_run_id is None
    assert after.policy == dataclasses.replace(
        before.policy, next_attempt_at_ms=None, version=before.policy.version + 1, updated_at_ms=now
    )
    assert after.attempts[:-1] == before.attempts
    new = after.attempts[-1]
    assert new.attempt_id == "retry-x"
    assert new.number == lost.number + 1
    assert new.status is AttemptStatus.CLAIMED
    assert new.executor_type == lost.executor_type
    assert new.created_at_ms == now
    assert new.callback_sequence == 0
    assert (
        new.worker_id,
        new.worker_session_id,
        new.worker_generation,
        new.offer_id,
        new.lease_generation,
        new.lease_version,
        new.executor_handle,
        new.started_at_ms,
        new.callback_token_sha256,
        new.finished_at_ms,
        new.exit_code,
        new.error_code,
        new.step_run_id,
        new.log_artifact_id,
    ) == (None,) * 14
    assert new.is_pristine
    assert is_pristine(after, new)
    assert after.leases == before.leases
    assert [type(e) for e in outcome.effects] == [
        UpdateRun,
        InsertAttempt,
        UpdatePolicy,
        AppendEvent,
        AppendEvent,
    ]
    assert not any(isinstance(e, UpdateAttempt) for e in outcome.effects)
    assert [(e.type, e.actor, e.attempt_id) for e in outcome.events] == [
        ("run.queued", Actor.RECONCILER, None),
        ("attempt.claimed", Actor.RECONCILER, "retry-x"),
    ]
    assert [e.seq for e in outcome.events] == [before.run.event_seq + 1, before.run.event_seq + 2]
    assert check_invariants(after, flow.events) == []
    # The dispatcher treats it as any pristine claimed Attempt (§1.8.3).
    flow.grant()
    assert flow.aggregate.run.status is RunStatus.DISPATCHING


@pytest.mark.spec("RETRY-08")
def test_requeue_clears_a_run_error_code() -> None:
    """R5: the requeue clears `Run.error_code`. No kernel transition sets a Run error code
    before `lost`, so the stored code (as a runner or an older version may have written it) is
    put on the reached `retry_wait` aggregate with `dataclasses.replace`."""
    agg = WAITING[1]
    marked = dataclasses.replace(agg, run=dataclasses.replace(agg.run, error_code="LEASE_EXPIRED"))
    assert check_invariants(marked) == []
    outcome = lost_retry_step(marked, step_command(), due_at(marked))
    assert isinstance(outcome, Applied)
    assert outcome.code is Code.REQUEUED
    assert outcome.aggregate.run.error_code is None


@pytest.mark.spec("RETRY-07", "RETRY-08")
@settings(max_examples=60)
@given(
    st.sampled_from([1, 2, 3]),
    st.integers(1, 60_000),
    st.integers(0, 10**9),
)
def test_retry_wait_before_its_time_is_not_due(n: int, base_ms: int, fraction: int) -> None:
    """R6: a `retry_wait` Run observed at any time in `[latest durable time, next_attempt_at)`
    is `Rejected(NOT_DUE)` and nothing changes; at `next_attempt_at_ms` it requeues."""
    flow = retry_wait_at(n, policy(max_attempts=16, backoff_base_ms=base_ms, backoff_max_ms=60_000))
    agg = flow.aggregate
    low, due = durable_max(agg), due_at(agg)
    assert low < due
    now = low + fraction % (due - low)
    outcome = lost_retry_step(agg, step_command(), now)
    assert outcome == Rejected(Code.NOT_DUE)
    assert decide(agg, now) is None
    assert flow.aggregate == agg
    at_due = lost_retry_step(agg, step_command(), due)
    assert isinstance(at_due, Applied)
    assert at_due.code is Code.REQUEUED


@pytest.mark.spec("RUN-04")
@settings(max_examples=80)
@given(
    st.sampled_from([(False, 1), (False, 2), (True, 1), (True, 2)]),
    st.integers(1, 10**7),
    st.integers(0, 10**7),
)
def test_clock_regression_is_rejected_and_changes_nothing(
    start: tuple[bool, int], back: int, schedule_gap: int
) -> None:
    """RUN-04 / V-5: a lost-retry step observed before any durable time it depends on (Run
    update, latest Attempt creation or finish, policy update) is `Rejected(CLOCK_REGRESSION)`
    and writes nothing, even when the observation time is past `next_attempt_at_ms` (a
    schedule committed late, after its due time)."""
    waiting, n = start
    flow = lost_at(n)
    if waiting:
        schedule(flow, schedule_gap)
    agg = flow.aggregate
    now = max(0, durable_max(agg) - back)
    outcome = lost_retry_step(agg, step_command(), now)
    assert outcome == Rejected(Code.CLOCK_REGRESSION)
    assert flow.aggregate == agg


@pytest.mark.spec("RUN-04", "RETRY-09")
def test_late_schedule_then_step_between_due_and_update_is_a_regression() -> None:
    """V-5 takes precedence over R5: a Run scheduled long after its due time and observed
    between its due time and that schedule is `CLOCK_REGRESSION`, not a requeue."""
    flow = lost_at(1)
    schedule(flow, 10**6)
    agg = flow.aggregate
    assert due_at(agg) < agg.run.updated_at_ms
    outcome = lost_retry_step(agg, step_command(), due_at(agg))
    assert outcome == Rejected(Code.CLOCK_REGRESSION)


# -- eligibility (D-14) ------------------------------------------------------------------------
def durable_max_or_run(agg: RunAggregate) -> int:
    latest = agg.latest_attempt
    return durable_max(agg) if latest is not None else agg.run.updated_at_ms


def _ineligible() -> list[tuple[str, RunAggregate]]:
    out: list[tuple[str, RunAggregate]] = []
    queued = Flow()
    queued.admit(RETRY_POLICY)
    out.append(("queued", queued.aggregate))
    queued.grant()
    out.append(("dispatching", queued.aggregate))
    queued.starting()
    out.append(("starting", queued.aggregate))
    requeued = retry_wait_at(1)
    requeue(requeued)
    out.append(("requeued", requeued.aggregate))
    failed = lost_flow(None)
    failed.lost_retry("a2")
    out.append(("failed", failed.aggregate))
    workflow = lost_flow(RETRY_POLICY, kind=RunKind.WORKFLOW)
    out.append(("workflow", workflow.aggregate))
    legacy_run = dataclasses.replace(LOST[1].run, owner=RunOwner.LEGACY)
    out.append(("legacy", dataclasses.replace(LOST[1], run=legacy_run)))
    for label, base in (("lost+intent", LOST[1]), ("retry_wait+intent", WAITING[1])):
        flow = Flow(agg=base, now=durable_max(base))
        flow.request_cancel()
        out.append((label, flow.aggregate))
    return out


INELIGIBLE = _ineligible()


@pytest.mark.spec("RETRY-09", "RETRY-11", "RETRY-12")
@pytest.mark.parametrize(("label", "agg"), INELIGIBLE, ids=[x[0] for x in INELIGIBLE])
def test_ineligible_candidates_are_raced_not_eligible(label: str, agg: RunAggregate) -> None:
    """D-14 / §1.8.1 eligibility: a Run that is not runtime-owned, is a Workflow Run, has a
    cancellation intent, is not `lost`/`retry_wait`, or whose latest Attempt is not `lost`, is
    `Raced(NOT_ELIGIBLE)` at any observation time and nothing is written."""
    assert not is_lost_retry_eligible(agg)
    for now in (durable_max_or_run(agg), durable_max_or_run(agg) + 10**9):
        assert lost_retry_step(agg, step_command(), now) == Raced(Code.NOT_ELIGIBLE), label


@pytest.mark.spec("RETRY-09")
def test_missing_or_foreign_run_is_raced() -> None:
    """D-14: no aggregate, or an aggregate of another Run, is `Raced(NOT_ELIGIBLE)`."""
    assert lost_retry_step(None, step_command(), T0) == Raced(Code.NOT_ELIGIBLE)
    other = LostRetryStep(run_id="run-other", new_attempt_id="a2")
    assert lost_retry_step(LOST[1], other, durable_max(LOST[1])) == Raced(Code.NOT_ELIGIBLE)


@pytest.mark.spec("RUN-02")
def test_requeue_with_an_existing_attempt_id_is_refused() -> None:
    """I-1 / RUN-02: a requeue whose new Attempt id is already taken writes nothing."""
    agg = WAITING[2]
    for taken in ("a1", "a2"):
        assert lost_retry_step(agg, step_command(taken), due_at(agg) + 10**6) == Rejected(
            Code.ATTEMPT_ID_CONFLICT
        )


# -- replays (RETRY-09) ------------------------------------------------------------------------
@pytest.mark.spec("RETRY-09", "RUN-02")
@settings(max_examples=120)
@given(safe_enabled_policies(max_attempts=st.integers(2, 5)), st.data())
def test_replayed_retry_steps_never_create_attempt_n_plus_2(
    provider_policy: PolicyDefinition, data: st.DataObject
) -> None:
    """RETRY-09: from a lost Attempt N, any mix of fresh steps, duplicates of the last command
    (a lost response), steps computed on stale pre-step aggregates (a stale candidate), and
    clock moves never yields more than Attempt N+1. A duplicate after a requeue or a failure
    is `Raced(NOT_ELIGIBLE)`; an `Applied` computed on a stale aggregate cannot be persisted
    (its CAS guards conflict with the current state, which a runner reports as `Raced`)."""
    flow = lost_flow(provider_policy)
    lost = flow.aggregate.latest_attempt
    assert lost is not None
    snapshots = [flow.aggregate]
    last: tuple[LostRetryStep, Outcome] | None = None
    new_attempt: Attempt | None = None
    for _ in range(14):
        action = data.draw(st.sampled_from(["step", "step", "dup", "stale", "stale", "time"]))
        if action == "time":
            flow.now += data.draw(st.sampled_from([0, 1, 999, 1_000, 60_000, 10**6]))
            continue
        if action == "dup" and last is not None:
            command, previous = last
            outcome = flow.step(command)
            if isinstance(previous, Applied) and previous.code is not Code.SCHEDULED:
                assert outcome == Raced(Code.NOT_ELIGIBLE)
        elif action == "stale":
            snapshot = data.draw(st.sampled_from(snapshots))
            command = step_command(data.draw(st.sampled_from(["a2", "a3", "a4"])))
            outcome = lost_retry_step(snapshot, command, max(flow.now, durable_max(snapshot)))
            if isinstance(outcome, Applied) and snapshot != flow.aggregate:
                with pytest.raises(EffectConflict):
                    apply_effects(flow.aggregate, outcome.effects)
            continue
        else:
            command = step_command(data.draw(st.sampled_from(["a2", "a3", "a4"])))
            outcome = flow.step(command)
            last = (command, outcome)
        if isinstance(outcome, Applied):
            snapshots.append(flow.aggregate)
        attempts = flow.aggregate.attempts
        assert len(attempts) <= lost.number + 1
        assert attempts[lost.number - 1] == lost
        if len(attempts) == lost.number + 1:
            if new_attempt is None:
                new_attempt = attempts[-1]
            assert attempts[-1] == new_attempt


def seeded_sim(data: st.DataObject) -> Sim:
    """A simulator that starts empty, or (more often) from a `lost` or `retry_wait` Run with a
    safe enabled policy reached through the kernel, so that walks spend their steps on retry."""
    sim = Sim()
    start = data.draw(st.sampled_from(["empty", "lost", "lost", "retry_wait"]))
    if start == "empty":
        return sim
    flow = lost_flow(data.draw(safe_enabled_policies(max_attempts=st.integers(2, 4))))
    if start == "retry_wait":
        schedule(flow)
    sim.agg, sim.events, sim.now = flow.aggregate, list(flow.events), flow.now
    return sim


@pytest.mark.spec("RETRY-09", "RETRY-19", "RUN-02")
@settings(max_examples=100)
@given(st.data())
def test_random_walk_replays_and_stale_candidates_of_retry_steps(data: st.DataObject) -> None:
    """RETRY-09 over random command sequences (the simulator: grants, starts, expiry, crashes
    as replays, cancellations, clock skew): after every applied lost-retry step, delivering the
    same command again never creates an Attempt numbered above N+1 (N = the lost Attempt
    before the step) and is `Raced`/`Rejected` unless it is the legitimate next decision
    (a schedule followed by a due requeue); the same step computed on the pre-step aggregate
    cannot be persisted over the new state. RETRY-19: every Event it appends is by the
    reconciler."""
    sim = seeded_sim(data)
    for _ in range(30):
        advance_clock(data, sim)
        command = draw_command(data, sim)
        if command is None:
            continue
        before = sim.agg
        outcome = sim.step(command)
        if not isinstance(command, LostRetryStep) or not isinstance(outcome, Applied):
            continue
        assert before is not None
        assert sim.agg is not None
        lost = before.latest_attempt
        assert lost is not None
        assert lost.status is AttemptStatus.LOST
        assert all(e.actor is Actor.RECONCILER for e in outcome.events)
        at = sim.log[-1][1]
        again = lost_retry_step(sim.agg, command, at)
        if isinstance(again, Applied):
            assert outcome.code is Code.SCHEDULED
            assert again.code is Code.REQUEUED
        else:
            assert isinstance(again, Raced | Rejected)
        candidate = again.aggregate if isinstance(again, Applied) else sim.agg
        assert max(a.number for a in candidate.attempts) <= lost.number + 1
        stale = lost_retry_step(before, command, at)
        assert stale == outcome
        with pytest.raises(EffectConflict):
            apply_effects(sim.agg, outcome.effects)


# -- RETRY-19 ----------------------------------------------------------------------------------
def _all_dispositions() -> list[tuple[RunAggregate, int]]:
    return [
        (LOST[1], durable_max(LOST[1])),  # scheduled
        (WAITING[1], due_at(WAITING[1])),  # requeued
        (dataclasses.replace(LOST[1], policy=None), durable_max(LOST[1])),  # disabled
        (with_policy(LOST[1], safety=Safety.UNKNOWN), durable_max(LOST[1])),  # unsafe
        (with_policy(WAITING[2], max_attempts=2), durable_max(WAITING[2])),  # exhausted
    ]


def _mentions_manual(value: object) -> bool:
    text = repr(value).lower()
    return "manual" in text or "retry_of" in text


@pytest.mark.spec("RETRY-19")
def test_lost_retry_events_are_reconciler_events_never_manual() -> None:
    """RETRY-19 / ADR-0380 §4: every Event `lost_retry_step` appends, for every disposition,
    has actor `reconciler`; no Event type, code, dedupe key or payload, and no result code,
    mentions a manual retry or a manual recovery; no automatic step sets `retry_of_run_id`."""
    codes = set()
    for agg, now in _all_dispositions():
        outcome = lost_retry_step(agg, step_command(), now)
        assert isinstance(outcome, Applied)
        codes.add(outcome.code)
        assert outcome.events
        for event in outcome.events:
            assert event.actor is Actor.RECONCILER
            for part in (event.type, event.code, event.dedupe_key, event.payload):
                assert not _mentions_manual(part), part
        assert not _mentions_manual(outcome.code)
        assert outcome.aggregate.run.retry_of_run_id is None
    assert codes == {
        Code.SCHEDULED,
        Code.REQUEUED,
        Code.FAILED_DISABLED,
        Code.FAILED_UNSAFE,
        Code.FAILED_EXHAUSTED,
    }
    assert not any("manual" in c.value.lower() for c in Code)


# -- RUN-07 ------------------------------------------------------------------------------------
@pytest.mark.spec("RUN-07")
def test_every_alias_is_the_canonical_function_object() -> None:
    """RUN-07 / ADR-0380 §1: each profile alias *is* the canonical, profile-neutral function
    (identity, not a copy), the alias table and the module attributes agree, and every
    dispatch path (`TRANSITIONS`, the package exports, selection) uses the same objects."""
    canonical = {
        "cluster_lost_retry_step": run_lost_retry.lost_retry_step,
        "cluster_lost_retry_decide": run_lost_retry.decide,
        "cluster_is_lost_retry_eligible": run_lost_retry.is_lost_retry_eligible,
        "cluster_recover_runtime": run_recovery.recover_runtime,
    }
    assert set(kernel_aliases.ALIASES) == set(canonical)
    module_aliases = {n for n in vars(kernel_aliases) if n.startswith("cluster_")}
    assert module_aliases == set(canonical)
    for name, fn in canonical.items():
        assert kernel_aliases.ALIASES[name] is fn, name
        assert getattr(kernel_aliases, name) is fn, name
    assert TRANSITIONS[LostRetryStep] is run_lost_retry.lost_retry_step
    assert TRANSITIONS[RecoverRuntime] is run_recovery.recover_runtime
    assert kernel_transitions.lost_retry_step is run_lost_retry.lost_retry_step
    assert lost_retry_step is run_lost_retry.lost_retry_step
    assert vars(kernel_selection)["is_lost_retry_eligible"] is run_lost_retry.is_lost_retry_eligible


def _forbidden_names() -> set[str]:
    names = set(kernel_aliases.ALIASES)
    names |= {"cluster_" + fn.__name__ for fn in kernel_aliases.ALIASES.values()}
    return names


@pytest.mark.spec("RUN-07")
def test_no_module_but_the_alias_shim_names_a_cluster_alias() -> None:
    """RUN-07 / D-16: no module under `kernel/`, `runners/` or `conformance/` other than the
    alias shim `kernel/aliases.py` references a `cluster_*` alias name (new code depends only
    on profile-neutral names)."""
    forbidden = _forbidden_names()
    shim = REPO_ROOT / "kernel" / "aliases.py"
    shim_text = shim.read_text(encoding="utf-8")
    assert all(name in shim_text for name in kernel_aliases.ALIASES)  # the detector works
    scanned: list[str] = []
    offenders: list[str] = []
    for top in ("kernel", "runners", "conformance"):
        root = REPO_ROOT / top
        assert root.is_dir(), root
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(REPO_ROOT).as_posix()
            scanned.append(rel)
            if rel == "kernel/aliases.py":
                continue
            text = path.read_text(encoding="utf-8")
            offenders += [f"{rel}: {name}" for name in sorted(forbidden) if name in text]
    assert "kernel/selection.py" in scanned
    assert "kernel/transitions/run_lost_retry.py" in scanned
    assert offenders == []
