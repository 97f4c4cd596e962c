"""The log retention rule of `kernel.local_control` (SPEC CAD-02: "only on slow cycles, receipt
and log cleanup"; Appendix D-1, O-2 step 4; decision LR-13).

- `log_cleanup_allowed` over its whole input domain (every Attempt status, no Attempt, no end
  time, any times and retentions) against an oracle written out here from the decision, and at
  the retention boundary;
- the same rule over Attempts reached through the kernel's transitions: a live local Attempt
  keeps its log whatever the clock says; once L3 (or recovery, or cancellation) settled it, the
  log may go exactly the retention after its end;
- its contracts (a negative retention is refused) and its data in `kernel/specs` (default 7 days,
  page 16 within P-1's 64, the accepted retention range).
"""

from __future__ import annotations

import icontract
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import (
    AttemptStatus,
    CompletionOutcome,
    RunAggregate,
    apply,
    log_cleanup_allowed,
)
from kernel.specs import (
    HARD_LIMITS,
    LOG_CLEANUP_PAGE,
    LOG_RETENTION_DEFAULT_MS,
    LOG_RETENTION_MS,
)
from tests.support.recovery_fixtures import (
    T0,
    aggregate_sets,
    complete_cmd,
    latest,
    local_running,
    local_starting,
    not_running_cmd,
    ok,
    receipt_for,
)

MINUTE = 60_000
DAY = 86_400_000

#: I-5: the statuses an Attempt never leaves (`lost` included), written out from the SPEC.
SETTLED_ATTEMPTS = frozenset(
    {
        AttemptStatus.SUCCEEDED,
        AttemptStatus.FAILED,
        AttemptStatus.CANCELLED,
        AttemptStatus.TIMED_OUT,
        AttemptStatus.LOST,
    }
)
#: The statuses whose process may still be (or become) alive and write its log.
LIVE_ATTEMPTS = frozenset(AttemptStatus) - SETTLED_ATTEMPTS

TIMES = st.integers(0, 400 * DAY)
RETENTIONS = st.one_of(
    st.sampled_from([0, 1, MINUTE, LOG_RETENTION_DEFAULT_MS, LOG_RETENTION_MS.maximum]),
    st.integers(0, 400 * DAY),
)


def _oracle(status: AttemptStatus | None, finished: int | None, now: int, retention: int) -> bool:
    """LR-13 as written: a settled Attempt that ended at least `retention` before `now`."""
    return status in SETTLED_ATTEMPTS and finished is not None and finished + retention <= now


# -- the whole domain ------------------------------------------------------------------------------
@pytest.mark.spec("CAD-02")
@given(st.none() | st.sampled_from(AttemptStatus), st.none() | TIMES, TIMES, RETENTIONS)
def test_a_log_goes_only_when_its_attempt_is_settled_and_ended_the_retention_ago(
    status: AttemptStatus | None, finished: int | None, now: int, retention: int
) -> None:
    """D-1, LR-13: deleted only when the Attempt is terminal (I-5) and ended at least the
    retention before now; a live Attempt's log, one the database does not know and a terminal
    one without an end time are kept (fail closed)."""
    allowed = log_cleanup_allowed(status, finished, now, retention)
    assert allowed == _oracle(status, finished, now, retention)
    if status is None or not status.terminal or finished is None:
        assert not allowed


@pytest.mark.spec("CAD-02")
@given(st.sampled_from(sorted(LIVE_ATTEMPTS)), st.none() | TIMES, TIMES, RETENTIONS)
def test_a_live_attempts_log_is_kept_whatever_its_age(
    status: AttemptStatus, finished: int | None, now: int, retention: int
) -> None:
    """`claimed`, `starting`, `running`: its process may be writing the log (`qlk logs --follow`
    may be reading it), however old the times say it is."""
    assert log_cleanup_allowed(status, finished, now, retention) is False
    assert log_cleanup_allowed(status, 0, 10**15, 0) is False


@pytest.mark.spec("CAD-02")
@given(st.none() | TIMES, TIMES, RETENTIONS)
def test_a_log_of_no_attempt_in_the_database_is_kept(
    finished: int | None, now: int, retention: int
) -> None:
    """An orphan log (the database does not know its Attempt) is kept: nothing proves it is
    settled, as for a receipt (`receipt_cleanup_allowed`)."""
    assert log_cleanup_allowed(None, finished, now, retention) is False


@pytest.mark.spec("CAD-02")
@pytest.mark.parametrize("status", sorted(AttemptStatus))
def test_every_status_at_the_retention_boundary(status: AttemptStatus) -> None:
    ended = T0
    retention = LOG_RETENTION_DEFAULT_MS
    settled = status in SETTLED_ATTEMPTS
    assert log_cleanup_allowed(status, ended, ended + retention, retention) is settled
    assert log_cleanup_allowed(status, ended, ended + retention + 1, retention) is settled
    assert log_cleanup_allowed(status, ended, ended + retention - 1, retention) is False
    assert log_cleanup_allowed(status, None, ended + 10 * retention, retention) is False
    assert log_cleanup_allowed(status, ended, ended - 1, 0) is False  # a clock that went back


# -- over reached Attempts -------------------------------------------------------------------------
@pytest.mark.spec("CAD-02")
def test_a_running_local_attempt_keeps_its_log_until_settled_then_for_the_retention() -> None:
    """L2 `running` keeps its log a year later; after L3 applied its receipt the log may go
    exactly the retention after the Attempt's end, not before."""
    retention = 2 * DAY
    starting = latest(local_starting("run-1", "a1", T0))
    assert log_cleanup_allowed(starting.status, starting.finished_at_ms, T0 + 400 * DAY, 0) is False
    running = local_running("run-1", "a1", T0)
    attempt = latest(running)
    assert attempt.status is AttemptStatus.RUNNING
    assert not log_cleanup_allowed(attempt.status, attempt.finished_at_ms, T0 + 365 * DAY, 0)
    receipt = receipt_for(running, CompletionOutcome.FAILED, exit_code=3)
    done = latest(ok(apply(running, complete_cmd(running, receipt), T0 + 10)))
    assert done.status is AttemptStatus.FAILED
    assert done.finished_at_ms is not None
    end = done.finished_at_ms
    assert not log_cleanup_allowed(done.status, end, end + retention - 1, retention)
    assert log_cleanup_allowed(done.status, end, end + retention, retention)


@pytest.mark.spec("CAD-02")
def test_a_lost_attempt_is_settled_for_log_cleanup() -> None:
    """`lost` is terminal (trusted not-running evidence, §2.1): no process writes its log again;
    its end is the recovery's time."""
    running = local_running("run-1", "a1", T0)
    lost = latest(ok(apply(running, not_running_cmd(running), T0 + 10)))
    assert lost.status is AttemptStatus.LOST
    assert lost.finished_at_ms == T0 + 10
    assert not log_cleanup_allowed(lost.status, lost.finished_at_ms, T0 + 9 + MINUTE, MINUTE)
    assert log_cleanup_allowed(lost.status, lost.finished_at_ms, T0 + 10 + MINUTE, MINUTE)


@pytest.mark.spec("CAD-02")
@given(aggregate_sets(max_size=8), TIMES, RETENTIONS)
def test_over_reached_attempts_only_settled_ones_ended_long_enough_ago_go(
    aggregates: list[RunAggregate], now: int, retention: int
) -> None:
    """Over Attempts the kernel can reach: the rule is the oracle, a live Attempt's log is never
    deleted, and every settled Attempt has an end time, so its log is deleted eventually."""
    for agg in aggregates:
        for attempt in agg.attempts:
            status, finished = attempt.status, attempt.finished_at_ms
            allowed = log_cleanup_allowed(status, finished, now, retention)
            assert allowed == _oracle(status, finished, now, retention)
            if status in LIVE_ATTEMPTS:
                assert not allowed
            else:
                assert finished is not None
                assert log_cleanup_allowed(status, finished, finished + retention, retention)


# -- contracts and data ----------------------------------------------------------------------------
def test_a_negative_retention_is_refused_by_the_precondition() -> None:
    with pytest.raises(icontract.ViolationError):
        log_cleanup_allowed(AttemptStatus.SUCCEEDED, T0, T0 + DAY, -1)


@pytest.mark.spec("CAD-02")
def test_the_log_cleanup_data() -> None:
    """LR-13: 7 days by default, inside the accepted 1 min..365 days; one page of 16 logs per
    slow cycle, within P-1's hard page maximum (64), like the receipt page."""
    assert LOG_RETENTION_DEFAULT_MS == 7 * DAY
    assert (LOG_RETENTION_MS.minimum, LOG_RETENTION_MS.maximum) == (MINUTE, 365 * DAY)
    assert LOG_RETENTION_DEFAULT_MS in LOG_RETENTION_MS
    assert LOG_CLEANUP_PAGE == 16
    assert LOG_CLEANUP_PAGE in HARD_LIMITS.page_size
    assert HARD_LIMITS.page_size.maximum == 64
