"""Admission (SPEC §1.6, A-2..A-5; RETRY-02) and the `created` phase (B-07).

A-1 (a policy member in the Run command) is decided by strict decoding before `admit_run` is
reached; it is tested in `tests/kernel/test_codec.py`.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import (
    Actor,
    AppendEvent,
    Applied,
    AttemptStatus,
    Code,
    CreateRun,
    InsertAttempt,
    InsertPolicy,
    InsertRun,
    PolicyDefinition,
    Rejected,
    Replayed,
    RunStatus,
    Safety,
    admit_run,
    check_invariants,
    create_run,
)
from kernel.transitions.run_recovery import is_pristine
from tests.support.retry_fixtures import (
    EXECUTOR,
    FIRST_ATTEMPT,
    RUN_ID,
    SAFE,
    T0,
    Flow,
    admit_command,
    lost_flow,
    policy,
    valid_policies,
)

DAY_MS = 86_400_000


def _enabled(p: PolicyDefinition) -> bool:
    return p.retry_on_lost and p.max_attempts > 1


def _admissible() -> st.SearchStrategy[PolicyDefinition | None]:
    """Policies that A-3 and A-4 accept (or no policy at all)."""
    return st.none() | valid_policies().filter(
        lambda p: not (_enabled(p) and p.safety is Safety.UNKNOWN)
    )


@pytest.mark.spec("RUN-01", "RUN-03")
@given(_admissible(), st.integers(0, 10**12))
def test_admission_writes_exactly_the_a5_effects(
    provider_policy: PolicyDefinition | None, now: int
) -> None:
    """A-5: one transaction writes, in this order, `InsertRun` (`queued`, version 1),
    `InsertAttempt` (number 1, `claimed`, pristine), `InsertPolicy` (version 1, no cursor) only
    when the provider returned a policy, then the Events `run.queued` and `attempt.claimed`
    (seq 1, 2, at the observation time), and nothing else."""
    command = admit_command(provider_policy)
    outcome = admit_run(None, command, now)
    assert isinstance(outcome, Applied)
    assert outcome.code is Code.ADMITTED
    kinds = [type(e) for e in outcome.effects]
    expected_kinds: list[type] = [InsertRun, InsertAttempt]
    if provider_policy is not None:
        expected_kinds.append(InsertPolicy)
    expected_kinds += [AppendEvent, AppendEvent]
    assert kinds == expected_kinds

    run = outcome.effects[0]
    assert isinstance(run, InsertRun)
    assert run.row.run_id == RUN_ID
    assert run.row.status is RunStatus.QUEUED
    assert run.row.version == 1
    assert run.row.event_seq == 2
    assert run.row.created_at_ms == run.row.queued_at_ms == run.row.updated_at_ms == now
    assert run.row.cancel_requested_at_ms is None
    assert run.row.error_code is None
    assert run.row.retry_of_run_id is None

    attempt = outcome.effects[1]
    assert isinstance(attempt, InsertAttempt)
    assert attempt.row.attempt_id == FIRST_ATTEMPT
    assert attempt.row.number == 1
    assert attempt.row.status is AttemptStatus.CLAIMED
    assert attempt.row.executor_type == EXECUTOR
    assert attempt.row.callback_sequence == 0
    assert attempt.row.created_at_ms == now
    assert attempt.row.is_pristine
    assert is_pristine(outcome.aggregate, attempt.row)

    if provider_policy is not None:
        inserted = outcome.effects[2]
        assert isinstance(inserted, InsertPolicy)
        row = inserted.row
        assert row.version == 1
        assert row.next_attempt_at_ms is None
        assert (
            row.max_attempts,
            row.retry_on_lost,
            row.safety,
            row.backoff_base_ms,
            row.backoff_max_ms,
        ) == dataclasses.astuple(provider_policy)
        assert row.created_at_ms == row.updated_at_ms == now
        assert row.run_id == RUN_ID
    else:
        assert outcome.aggregate.policy is None

    events = outcome.events
    assert [e.type for e in events] == ["run.queued", "attempt.claimed"]
    assert [e.seq for e in events] == [1, 2]
    assert [e.attempt_id for e in events] == [None, FIRST_ATTEMPT]
    assert all(e.at_ms == now and e.actor is Actor.TRIGGER for e in events)
    assert len({e.dedupe_key for e in events}) == 2
    assert check_invariants(outcome.aggregate, events) == []
    assert outcome.aggregate.leases == ()


@pytest.mark.spec("RETRY-02")
@given(
    st.integers(2, 16),
    st.integers(0, DAY_MS),
    st.integers(0, DAY_MS),
    st.integers(0, 10**12),
)
def test_enabled_unknown_safety_refuses_the_whole_admission(
    max_attempts: int, a: int, b: int, now: int
) -> None:
    """RETRY-02 / A-4 / B-15: an enabled, otherwise valid policy with `safety = unknown` is
    `Rejected(RUN_RETRY_POLICY_UNSAFE)`: no `Applied`, no effects, and the Run id stays free
    (the same admission with a safe policy afterwards is a fresh insert, not a replay)."""
    unsafe = policy(
        max_attempts=max_attempts,
        retry_on_lost=True,
        safety=Safety.UNKNOWN,
        backoff_base_ms=min(a, b),
        backoff_max_ms=max(a, b),
    )
    flow = Flow()
    outcome = flow.step(admit_command(unsafe), now)
    assert outcome == Rejected(Code.RUN_RETRY_POLICY_UNSAFE)
    assert flow.agg is None
    assert flow.events == []
    fresh = admit_run(
        None, admit_command(dataclasses.replace(unsafe, safety=Safety.IDEMPOTENT)), now
    )
    assert isinstance(fresh, Applied)
    assert isinstance(fresh.effects[0], InsertRun)


@pytest.mark.spec("RETRY-02", "RETRY-03")
@given(st.sampled_from(Safety), st.integers(1, 16), st.booleans())
def test_unknown_safety_is_admitted_when_retry_is_disabled(
    safety: Safety, max_attempts: int, retry_on_lost: bool
) -> None:
    """A-4: only an *enabled* policy must be safe. A disabled one (`retry_on_lost = false` or
    `max_attempts = 1`) is admitted and stored as given, whatever its safety."""
    p = policy(max_attempts=max_attempts, retry_on_lost=retry_on_lost, safety=safety)
    outcome = admit_run(None, admit_command(p), T0)
    enabled = retry_on_lost and max_attempts > 1
    if enabled and safety is Safety.UNKNOWN:
        assert outcome == Rejected(Code.RUN_RETRY_POLICY_UNSAFE)
    else:
        assert isinstance(outcome, Applied)
        assert outcome.aggregate.policy is not None
        assert outcome.aggregate.policy.safety is safety


_INT_EDGES = st.sampled_from([-(2**63), -2, -1, 0, 1, 2, 15, 16, 17, 18, 2**31, 2**63])
_MS_EDGES = st.sampled_from(
    [-(2**63), -2, -1, 0, 1, 2, DAY_MS - 1, DAY_MS, DAY_MS + 1, DAY_MS + 2, 2**63]
)


@pytest.mark.spec("RETRY-02")
@given(
    _INT_EDGES | st.integers(-3, 19),
    _MS_EDGES | st.integers(-3, 3) | st.integers(DAY_MS - 3, DAY_MS + 3),
    _MS_EDGES | st.integers(-3, 3) | st.integers(DAY_MS - 3, DAY_MS + 3),
    st.booleans(),
    st.sampled_from(Safety),
)
def test_policy_outside_the_a3_limits_is_invalid(
    max_attempts: int, base: int, maximum: int, retry_on_lost: bool, safety: Safety
) -> None:
    """A-3 / B-14: a provider policy with `max_attempts` outside 1..16 or without
    `0 <= backoff_base_ms <= backoff_max_ms <= 86_400_000` is
    `Rejected(INVALID_RUN_RETRY_POLICY)` with nothing written, whatever its safety; a policy
    inside the limits is never refused with that code."""
    p = policy(
        max_attempts=max_attempts,
        retry_on_lost=retry_on_lost,
        safety=safety,
        backoff_base_ms=base,
        backoff_max_ms=maximum,
    )
    outcome = admit_run(None, admit_command(p), T0)
    valid = 1 <= max_attempts <= 16 and 0 <= base <= maximum <= DAY_MS
    if not valid:
        assert outcome == Rejected(Code.INVALID_RUN_RETRY_POLICY)
    elif retry_on_lost and max_attempts > 1 and safety is Safety.UNKNOWN:
        assert outcome == Rejected(Code.RUN_RETRY_POLICY_UNSAFE)
    else:
        assert isinstance(outcome, Applied)


@pytest.mark.spec("RETRY-02")
@pytest.mark.parametrize(
    ("max_attempts", "base", "maximum", "code"),
    [
        (0, 0, 0, Code.INVALID_RUN_RETRY_POLICY),
        (1, 0, 0, None),
        (16, 0, DAY_MS, None),
        (17, 0, 0, Code.INVALID_RUN_RETRY_POLICY),
        (3, -1, 0, Code.INVALID_RUN_RETRY_POLICY),
        (3, 2, 1, Code.INVALID_RUN_RETRY_POLICY),
        (3, DAY_MS, DAY_MS, None),
        (3, 0, DAY_MS + 1, Code.INVALID_RUN_RETRY_POLICY),
    ],
)
def test_policy_limit_examples(
    max_attempts: int, base: int, maximum: int, code: Code | None
) -> None:
    """A-3 at its exact bounds: 1 and 16 attempts, base = max, max = 24 h are valid."""
    p = policy(max_attempts=max_attempts, backoff_base_ms=base, backoff_max_ms=maximum)
    outcome = admit_run(None, admit_command(p), T0)
    if code is None:
        assert isinstance(outcome, Applied)
    else:
        assert outcome == Rejected(code)


@pytest.mark.spec("RUN-03")
@given(_admissible(), st.integers(0, 3), st.integers(0, 10**6))
def test_exact_admission_replay_is_replayed_existing(
    provider_policy: PolicyDefinition | None, progress: int, later: int
) -> None:
    """A replayed admission (a lost response) finds the Run id taken with the same identity and
    returns `Replayed(existing)`, writing nothing, however far the Run has moved on."""
    flow = Flow()
    command = admit_command(provider_policy)
    flow.must(command)
    if progress >= 1:
        flow.grant()
    if progress >= 2:
        flow.starting()
    if progress >= 3:
        flow.expire_lost()
    before = flow.aggregate
    again = flow.step(command, flow.now + later)
    assert again == Replayed(Code.EXISTING)
    assert flow.aggregate == before


@pytest.mark.spec("RUN-03")
@given(
    st.sampled_from(["project_id", "task_id", "task_revision", "executor_type"]),
    _admissible(),
)
def test_same_run_id_with_another_identity_conflicts(
    field: str, provider_policy: PolicyDefinition | None
) -> None:
    """Admitting a Run id that is taken by a Run of another Task-revision identity (project,
    task, revision or executor type) is `Rejected(RUN_ID_CONFLICT)`; nothing is written."""
    existing = admit_run(None, admit_command(policy()), T0)
    assert isinstance(existing, Applied)
    variants = {
        "project_id": admit_command(provider_policy, project_id="proj-2"),
        "task_id": admit_command(provider_policy, task_id="task-2"),
        "task_revision": admit_command(provider_policy, task_revision=2),
        "executor_type": admit_command(provider_policy, executor_type="docker"),
    }
    command = variants[field]
    assert admit_run(existing.aggregate, command, T0 + 1) == Rejected(Code.RUN_ID_CONFLICT)


@pytest.mark.spec("RUN-03")
def test_create_run_is_the_created_phase_without_an_attempt() -> None:
    """B-07: `create_run` writes a `created` Run (version 1) with no Attempt and no policy and
    one `run.created` Event; its exact replay is `Replayed(existing)`; another identity under
    the same id is `RUN_ID_CONFLICT`."""
    command = CreateRun(
        run_id=RUN_ID, project_id="proj", task_id="task", task_revision=1, executor_type=EXECUTOR
    )
    outcome = create_run(None, command, T0)
    assert isinstance(outcome, Applied)
    agg = outcome.aggregate
    assert agg.run.status is RunStatus.CREATED
    assert agg.run.version == 1
    assert agg.attempts == ()
    assert agg.policy is None
    assert [type(e) for e in outcome.effects] == [InsertRun, AppendEvent]
    assert [e.type for e in outcome.events] == ["run.created"]
    assert create_run(agg, command, T0 + 5) == Replayed(Code.EXISTING)
    other = dataclasses.replace(command, task_revision=2)
    assert create_run(agg, other, T0 + 5) == Rejected(Code.RUN_ID_CONFLICT)


@pytest.mark.spec("RETRY-03")
def test_admission_without_a_policy_is_never_retried() -> None:
    """The safe default (A-2, §1.1): a Run admitted without a policy has no policy row, so its
    lost Attempt is never retried (R1)."""
    flow = lost_flow(None)
    assert flow.aggregate.policy is None
    outcome = flow.lost_retry("a2")
    assert isinstance(outcome, Applied)
    assert outcome.code is Code.FAILED_DISABLED
    assert len(flow.aggregate.attempts) == 1


@pytest.mark.spec("RETRY-02")
@given(st.sampled_from(SAFE), st.integers(2, 16))
def test_enabled_safe_policy_is_admitted(safety: Safety, max_attempts: int) -> None:
    """A-4: an enabled policy is admitted when its Task revision declares `idempotent` or
    `deduplicated`."""
    outcome = admit_run(None, admit_command(policy(max_attempts=max_attempts, safety=safety)), T0)
    assert isinstance(outcome, Applied)
    assert outcome.aggregate.policy is not None
    assert outcome.aggregate.policy.max_attempts == max_attempts
