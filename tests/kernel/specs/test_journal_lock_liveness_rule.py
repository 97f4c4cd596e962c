"""The contended journal lock, as the kernel judges it (SPEC Appendix E-2, W-3/B-48, D-10).

Pure functions over observed facts (`kernel/specs/journal_ownership.py`); the adapter's real
processes and SIGKILLs are in `tests/runners/worker/journal/test_journal_lock_liveness.py`.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.specs.codes import Code
from kernel.specs.journal_ownership import (
    HostObservation,
    LockAction,
    LockJudgment,
    LockOwnerIdentity,
    LockReason,
    LockSnapshot,
    MovedLockAction,
    ProcessPresence,
    judge_contended_lock,
    moved_lock_action,
    owner_provably_dead,
)

WINDOW_NS = 30_000 * 1_000_000
BOOT, OTHER_BOOT, NS = "boot-a", "boot-b", "pid:[4026531836]"
OWNER = LockOwnerIdentity(boot_id=BOOT, pid=4242, start_time=1000, pid_namespace=NS)

identities = st.builds(
    LockOwnerIdentity,
    boot_id=st.sampled_from([BOOT, OTHER_BOOT]),
    pid=st.integers(1, 2**22),
    start_time=st.integers(0, 10**9),
    pid_namespace=st.sampled_from([NS, "pid:[1]"]),
)
observations = st.builds(
    HostObservation,
    boot_id=st.sampled_from([BOOT, OTHER_BOOT, None]),
    pid_namespace=st.sampled_from([NS, "pid:[1]", None]),
    presence=st.sampled_from(ProcessPresence),
    start_time=st.one_of(st.none(), st.integers(0, 10**9)),
)
ages = st.integers(-(10**12), 10 * WINDOW_NS)


def _seen(presence: ProcessPresence, start_time: int | None = None) -> HostObservation:
    return HostObservation(BOOT, NS, presence, start_time)


@pytest.mark.spec("E-2")
@pytest.mark.parametrize(
    ("observed", "reason"),
    [
        (
            HostObservation(OTHER_BOOT, NS, ProcessPresence.PRESENT, 1000),
            LockReason.OWNER_OTHER_BOOT,
        ),
        (HostObservation(OTHER_BOOT, None, ProcessPresence.UNKNOWN), LockReason.OWNER_OTHER_BOOT),
        (_seen(ProcessPresence.ABSENT), LockReason.OWNER_PROCESS_GONE),
        (_seen(ProcessPresence.PRESENT, 1001), LockReason.OWNER_PID_REUSED),
        (_seen(ProcessPresence.ZOMBIE, 999), LockReason.OWNER_PID_REUSED),
        (_seen(ProcessPresence.ZOMBIE, 1000), LockReason.OWNER_PROCESS_ZOMBIE),
        (_seen(ProcessPresence.PRESENT, 1000), None),  # the owner itself, alive
        (_seen(ProcessPresence.UNKNOWN), None),  # could not look: nothing proven
        (_seen(ProcessPresence.PRESENT), None),  # no start time seen: nothing proven
        (HostObservation(None, NS, ProcessPresence.ABSENT), None),  # own boot id unknown
        (HostObservation(BOOT, None, ProcessPresence.ABSENT), None),  # own namespace unknown
        (HostObservation(BOOT, "pid:[1]", ProcessPresence.ABSENT), None),  # another namespace
    ],
)
def test_provably_dead_exactly_as_e2_says(
    observed: HostObservation, reason: LockReason | None
) -> None:
    assert owner_provably_dead(OWNER, observed) == reason


@pytest.mark.spec("E-2")
@given(observed=observations)
def test_a_lock_without_a_recorded_identity_is_never_proven_dead(observed: HostObservation) -> None:
    assert owner_provably_dead(None, observed) is None


@pytest.mark.spec("E-2", "INBOX-23")
@given(recorded=st.one_of(st.none(), identities), observed=observations, age_ns=ages)
def test_the_judgment_is_total_and_consistent(
    recorded: LockOwnerIdentity | None, observed: HostObservation, age_ns: int
) -> None:
    judgment = judge_contended_lock(recorded, observed, age_ns=age_ns, window_ns=WINDOW_NS)
    dead = owner_provably_dead(recorded, observed)
    if dead is not None:  # E-2: at once, whatever the age
        assert judgment == LockJudgment(LockAction.RECLAIM, dead, None)
    elif age_ns > WINDOW_NS:  # W-3: strictly older than the window (J-2)
        assert judgment == LockJudgment(LockAction.RECLAIM, LockReason.STALE_WINDOW_PASSED, None)
    else:
        assert judgment == LockJudgment(
            LockAction.REFUSE, LockReason.OWNER_MAY_BE_LIVE, Code.JOURNAL_LOCKED
        )


@pytest.mark.spec("E-2", "INBOX-23")
@given(age_ns=ages)
def test_a_live_owner_is_refused_until_the_window_has_passed(age_ns: int) -> None:
    live = _seen(ProcessPresence.PRESENT, OWNER.start_time)
    judgment = judge_contended_lock(OWNER, live, age_ns=age_ns, window_ns=WINDOW_NS)
    assert (judgment.action is LockAction.RECLAIM) == (age_ns > WINDOW_NS)
    assert (judgment.code is Code.JOURNAL_LOCKED) == (age_ns <= WINDOW_NS)


@pytest.mark.spec("E-2")
@given(age_ns=ages, start_time=st.integers(0, 10**9).filter(lambda t: t != OWNER.start_time))
def test_a_reused_pid_is_reclaimed_at_any_age(age_ns: int, start_time: int) -> None:
    observed = _seen(ProcessPresence.PRESENT, start_time)
    judgment = judge_contended_lock(OWNER, observed, age_ns=age_ns, window_ns=WINDOW_NS)
    assert judgment == LockJudgment(LockAction.RECLAIM, LockReason.OWNER_PID_REUSED, None)


snapshots = st.builds(
    LockSnapshot,
    owner_id=st.one_of(st.none(), st.binary(min_size=1, max_size=8)),
    mtime_ns=st.integers(0, 3),
    device=st.integers(0, 1),
    inode=st.integers(0, 3),
)


@pytest.mark.spec("E-2")
@given(judged=snapshots, moved=snapshots)
def test_d10_the_moved_lock_is_deleted_only_if_it_is_the_lock_judged(
    judged: LockSnapshot, moved: LockSnapshot
) -> None:
    expected = MovedLockAction.DELETE if judged == moved else MovedLockAction.RESTORE
    assert moved_lock_action(judged, moved) is expected
    assert moved_lock_action(judged, judged) is MovedLockAction.DELETE


@pytest.mark.spec("E-2")
@pytest.mark.parametrize(
    "moved",
    [
        LockSnapshot(b"other", 5, 1, 7),  # another owner id
        LockSnapshot(None, 5, 1, 7),  # an unreadable owner id
        LockSnapshot(b"owner", 6, 1, 7),  # another mtime
        LockSnapshot(b"owner", 5, 2, 7),  # another device
        LockSnapshot(b"owner", 5, 1, 8),  # another inode
    ],
)
def test_d10_any_one_difference_restores(moved: LockSnapshot) -> None:
    judged = LockSnapshot(b"owner", 5, 1, 7)
    assert moved_lock_action(judged, moved) is MovedLockAction.RESTORE


def test_the_owner_id_stays_out_of_the_snapshot_repr() -> None:
    assert "secret" not in repr(LockSnapshot(b"secret", 1, 2, 3))
