"""The Worker host's decisions (kernel.worker_host; decisions WS-1, WH-1, WH-3, WH-5)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import (
    RegisterSession,
    ResumeSession,
    SavedSession,
    delivery_kind,
    drain_finished,
    heartbeat_due,
    retention_due,
    session_requests,
)
from kernel.specs import REPLAY, DeliveryKind, JournalState, ReplayAction

KEY = bytes(range(32))


def _register(worker_id: str = "w1") -> RegisterSession:
    return RegisterSession(worker_id, "s-new", ("local.posix",), 4, KEY, 30_000)


def test_a_saved_session_of_the_same_worker_is_resumed_first_then_a_new_one_registered() -> None:
    saved = SavedSession("w1", "s-old", 7)
    first, second = session_requests(saved, _register())
    assert isinstance(first, ResumeSession)
    assert (first.worker_id, first.session_id, first.generation) == ("w1", "s-old", 7)
    assert first.public_key == KEY
    assert second == _register()


@pytest.mark.parametrize("saved", [None, SavedSession("other", "s-old", 7)])
def test_no_saved_session_of_this_worker_registers_only(saved: SavedSession | None) -> None:
    assert session_requests(saved, _register()) == (_register(),)


def test_the_saved_session_repr_is_ids_only() -> None:
    assert repr(SavedSession("w1", "s-1", 2)) == (
        "SavedSession(worker_id='w1', session_id='s-1', generation=2)"
    )


@pytest.mark.spec("INBOX-11")
@given(st.integers(0, 10**9), st.integers(0, 10**6), st.integers(5_000, 600_000))
def test_a_heartbeat_is_due_once_a_third_of_the_lease_passed(last: int, gap: int, ttl: int) -> None:
    assert heartbeat_due(last, last + gap, ttl) == (gap >= ttl // 3)


def test_retention_runs_on_slow_cycles_only_when_configured() -> None:
    assert [n for n in range(1, 20) if retention_due(n, True)] == [4, 8, 12, 16]
    assert not any(retention_due(n, False) for n in range(1, 20))


def test_drain_waits_for_progressing_records_only() -> None:
    """WH-3: final and `recovery_required` records, and records whose Run lease expired, do not
    hold a drain; any other record does while its lease is live."""
    now = 1_000_000
    assert drain_finished([], now)
    waiting = [(JournalState.COMPLETION_ACKNOWLEDGED, now + 1), (JournalState.RECOVERY_REQUIRED, 0)]
    assert drain_finished(waiting, now)
    for state in JournalState:
        settled = state in {
            JournalState.COMPLETION_ACKNOWLEDGED,
            JournalState.START_FAILURE_ACKNOWLEDGED,
            JournalState.RECOVERY_REQUIRED,
        }
        assert drain_finished([*waiting, (state, now + 1)], now) == settled, state
        assert drain_finished([*waiting, (state, now)], now), state  # expired at its instant


def test_an_unknown_offer_is_a_new_claim() -> None:
    assert delivery_kind(None, 1) is DeliveryKind.NEW_CLAIM


@pytest.mark.spec("INBOX-10", "INBOX-12")
@given(st.sampled_from(list(JournalState)), st.integers(1, 50), st.integers(1, 50))
def test_a_known_offer_is_redelivered_only_to_merge_or_to_replay(
    state: JournalState, stored: int, offered: int
) -> None:
    """WH-5: a newer lease version is merged (C-1) whatever the state; otherwise only the states
    whose §3.7 replay acknowledges or starts are redelivered, always as `lease_recovery` (a
    draining Worker accepts it, D-8)."""
    replays = REPLAY[state] in {
        ReplayAction.REPLAY_STARTING_ACK,
        ReplayAction.CONTINUE_FIRST_START,
        ReplayAction.REPLAY_RUNNING_ACK,
        ReplayAction.REPLAY_FAIL_START,
    }
    expected = DeliveryKind.LEASE_RECOVERY if offered > stored or replays else None
    assert delivery_kind((state, stored), offered) is expected
