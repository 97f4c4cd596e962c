"""Appendix E-4: admission limits are invariants, and V-5's clock check includes start times."""

from __future__ import annotations

import icontract
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import (
    Applied,
    CancelReason,
    Code,
    CompletionOutcome,
    ConvergeCancel,
    LostRetryStep,
    RecoverLocalStartup,
    Rejected,
    RequestCancel,
    apply,
    check_invariants,
)
from kernel.commands import Command
from kernel.evidence import NotRunningEvidence
from kernel.specs.limits import BACKOFF_MAX_MS, MAX_ATTEMPTS_MAX, MAX_ATTEMPTS_MIN
from tests.support.recovery_fixtures import (
    T0,
    complete_cmd,
    latest,
    local_running,
    receipt_for,
)
from tests.support.retry_fixtures import lost_flow, policy, with_policy

#: Stored policies A-3 forbids: each field out of range alone.
OUT_OF_LIMITS = [
    {"max_attempts": MAX_ATTEMPTS_MAX + 1},
    {"max_attempts": MAX_ATTEMPTS_MIN - 1},
    {"backoff_base_ms": -1},
    {"backoff_base_ms": 2_000, "backoff_max_ms": 1_000},
    {"backoff_max_ms": BACKOFF_MAX_MS + 1},
]


@pytest.mark.spec("RUN-01")
@pytest.mark.parametrize(
    "changes", OUT_OF_LIMITS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items())
)
def test_a_stored_policy_outside_a3_is_a_broken_aggregate_every_transition_refuses(
    changes: dict[str, int],
) -> None:
    """E-4: a stored policy outside A-3 (for example `max_attempts` 17) breaks an invariant,
    so a transition on it fails closed like on any broken aggregate (the input contract), and
    the same Run with an in-range policy is accepted."""
    flow = lost_flow(policy(backoff_base_ms=0, backoff_max_ms=0))
    agg = flow.aggregate
    assert check_invariants(agg) == []
    assert isinstance(apply(agg, LostRetryStep(agg.run.run_id, "a-next"), flow.now), Applied)
    broken = with_policy(agg, **changes)
    assert [v.invariant for v in check_invariants(broken)] == ["E-4"]
    for command in (
        LostRetryStep(agg.run.run_id, "a-next"),
        RequestCancel(agg.run.run_id, CancelReason.USER),
        ConvergeCancel(agg.run.run_id),
    ):
        with pytest.raises(icontract.ViolationError, match="invariants"):
            apply(broken, command, flow.now + 1)


@pytest.mark.spec("RUN-04")
@given(
    lead=st.integers(1, 60_000),
    back=st.integers(1, 60_000),
    which=st.sampled_from(["receipt", "cancel", "recovery"]),
)
def test_nothing_applies_before_a_recorded_start_time(lead: int, back: int, which: str) -> None:
    """V-5 with E-4: a start time is a handle fact reported by the executor, so it can be later
    than the transaction that recorded it. A transition observed before the Run's or the latest
    Attempt's start time is `CLOCK_REGRESSION` and writes nothing, though it is after the Run's
    last change; at the start time itself it applies."""
    started = T0 + lead
    agg = local_running("run-1", "a1", T0, started_at_ms=started)
    assert agg.run.updated_at_ms < started
    assert latest(agg).started_at_ms == started
    commands: dict[str, Command] = {
        "receipt": complete_cmd(agg, receipt_for(agg, CompletionOutcome.SUCCEEDED)),
        "cancel": RequestCancel("run-1", CancelReason.USER),
        "recovery": RecoverLocalStartup("run-1", "a1", NotRunningEvidence()),
    }
    command = commands[which]
    before = max(agg.run.updated_at_ms, started - back)
    assert apply(agg, command, before) == Rejected(Code.CLOCK_REGRESSION)
    assert isinstance(apply(agg, command, started), Applied)


def test_the_fixture_policy_is_within_limits() -> None:
    """The base of the E-4 test is a valid aggregate (a broken one would prove nothing)."""
    stored = lost_flow(policy()).aggregate.policy
    assert stored is not None
    assert MAX_ATTEMPTS_MIN <= stored.max_attempts <= MAX_ATTEMPTS_MAX
