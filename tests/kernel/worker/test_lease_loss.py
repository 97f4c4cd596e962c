"""The lease-loss coordinator's decisions and retention eligibility (SPEC §3.14, §3.15)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import Secret
from kernel.specs.journal import FINAL_STATES, JournalState, RecoveryReason
from kernel.specs.states import StopResult
from kernel.worker.journal import (
    FailStartAcknowledged,
    JournalApplied,
    JournalEvent,
    LaunchOutcomeUnknown,
    LeaseLost,
    PrepareFailed,
    StartRefused,
    journal_step,
)
from kernel.worker.lease_loss import (
    FinishLeaseLoss,
    LeaseLossResult,
    StopHandle,
    WriteUnverified,
    after_stop,
    decide_lease_loss,
    quiet_after_conflict,
    result_of,
)
from kernel.worker.record import JournalRecord
from kernel.worker.retention import check_retention_ms, retention_eligible
from tests.support.journal_fixtures import PIPELINE, T0, accepted, events, lease

MINUTE = 60_000


def _apply(record: JournalRecord, *sequence: JournalEvent) -> JournalRecord:
    for i, event in enumerate(sequence):
        outcome = journal_step(record, event, record.updated_at_ms + i + 1)
        assert isinstance(outcome, JournalApplied), (event, outcome)
        assert outcome.record is not None
        record = outcome.record
    return record


def _at(n: int) -> JournalRecord:
    return _apply(accepted(), *PIPELINE[:n])


@pytest.mark.spec("INBOX-40")
def test_the_coordinator_stops_only_a_matching_authority_with_a_handle() -> None:
    """INBOX-40: a stop is asked only when the full authority matches and a durable handle
    exists; never after `completion_acknowledged`; no handle -> `_unverified` at once."""
    snapshot = lease(version=9)  # the lifecycle's version may be ahead of the record's
    assert decide_lease_loss(None, snapshot) == FinishLeaseLoss(LeaseLossResult.NOT_FOUND)
    started = _at(3)
    assert decide_lease_loss(started, snapshot) == StopHandle("posix:v1:boot:4242:99")
    other = lease(token=Secret.of("some-other-lease-token-0123456789abcdefgh", "lease_token"))
    assert decide_lease_loss(started, other) == FinishLeaseLoss(LeaseLossResult.AUTHORITY_MISMATCH)
    for changed in ({"worker_session_id": "s2"}, {"lease_generation": 2}, {"run_id": "r9"}):
        mismatch = lease(**changed)
        assert decide_lease_loss(started, mismatch) == FinishLeaseLoss(
            LeaseLossResult.AUTHORITY_MISMATCH
        )
    done = _at(len(PIPELINE))
    assert decide_lease_loss(done, snapshot) == FinishLeaseLoss(LeaseLossResult.ALREADY_COMPLETED)
    launching = _at(2)
    assert isinstance(decide_lease_loss(launching, snapshot), WriteUnverified)
    for state_record in (accepted(), _at(1), _apply(_at(1), PrepareFailed())):
        assert decide_lease_loss(state_record, snapshot) == FinishLeaseLoss(
            LeaseLossResult.NO_LOCAL_EXECUTION
        )


@pytest.mark.spec("INBOX-40")
@pytest.mark.parametrize(
    ("answer", "stopped"),
    [
        (StopResult.TERMINATION_REQUESTED, True),
        (StopResult.ALREADY_EXITED, True),
        ("identity_mismatch", False),
        ("handle_missing", False),
        ("unsupported", False),
        ("invalid", False),
    ],
)
def test_the_controllers_answer_decides_stopped_or_unverified(answer: str, stopped: bool) -> None:
    event = after_stop(answer)
    assert event == LeaseLost(stopped=stopped)
    assert result_of(event) is (
        LeaseLossResult.STOP_ACKNOWLEDGED if stopped else LeaseLossResult.STOP_UNVERIFIED
    )


@pytest.mark.spec("INBOX-40")
def test_a_raising_controller_writes_nothing() -> None:
    assert after_stop(None) is None


def test_an_already_lease_lost_record_is_not_stopped_again() -> None:
    stopped = _apply(_at(3), LeaseLost(stopped=True))
    unverified = _apply(_at(2), LeaseLost(stopped=False))
    assert decide_lease_loss(stopped, lease()) == FinishLeaseLoss(LeaseLossResult.ALREADY_STOPPED)
    assert decide_lease_loss(unverified, lease()) == FinishLeaseLoss(
        LeaseLossResult.ALREADY_UNVERIFIED
    )
    assert quiet_after_conflict(stopped)
    assert quiet_after_conflict(_at(len(PIPELINE)))
    assert not quiet_after_conflict(_at(3))
    assert not quiet_after_conflict(None)


@pytest.mark.spec("INBOX-39", "INBOX-41")
@given(st.lists(events(), max_size=20), st.integers(0, 40 * 24 * 60 * MINUTE))
def test_only_old_final_records_are_ever_retention_eligible(
    sequence: list[JournalEvent], age: int
) -> None:
    """INBOX-39/41: from any reachable record, retention selects only
    `completion_acknowledged` and `start_failure_acknowledged` records older than the
    retention; never an active, `running_acknowledged` or lease-lost one."""
    record = accepted()
    for i, event in enumerate(sequence):
        outcome = journal_step(record, event, T0 + i + 1)
        if isinstance(outcome, JournalApplied) and outcome.record is not None:
            record = outcome.record
    retention = 10 * MINUTE
    eligible = retention_eligible(record, record.updated_at_ms + age, retention)
    assert eligible == (record.state in FINAL_STATES and age > retention)
    if record.recovery_reason in {
        RecoveryReason.LEASE_LOST_LOCAL_EXECUTION_STOPPED,
        RecoveryReason.LEASE_LOST_LOCAL_EXECUTION_UNVERIFIED,
    }:
        assert not eligible


def test_a_start_failure_ages_from_its_last_update() -> None:
    failed = _apply(_at(2), StartRefused("ENOENT"))
    settled = _apply(failed, FailStartAcknowledged())
    assert settled.state is JournalState.START_FAILURE_ACKNOWLEDGED
    assert not retention_eligible(settled, settled.updated_at_ms + MINUTE, MINUTE)
    assert retention_eligible(settled, settled.updated_at_ms + MINUTE + 1, MINUTE)
    unknown = _apply(_at(2), LaunchOutcomeUnknown())
    assert not retention_eligible(unknown, unknown.updated_at_ms + 10**12, MINUTE)
    running = _at(4)
    assert running.state is JournalState.RUNNING_ACKNOWLEDGED
    assert not retention_eligible(running, running.updated_at_ms + 10**12, MINUTE)


@pytest.mark.spec("INBOX-39")
def test_retention_outside_one_minute_to_thirty_days_is_rejected() -> None:
    check_retention_ms(MINUTE)
    check_retention_ms(30 * 24 * 60 * MINUTE)
    for bad in (MINUTE - 1, 30 * 24 * 60 * MINUTE + 1, 0):
        with pytest.raises(ValueError, match="retention"):
            check_retention_ms(bad)
