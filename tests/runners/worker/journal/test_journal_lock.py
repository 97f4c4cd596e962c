"""The file journal's ownership lock (SPEC §3.9 W-1..W-7, F-1, F-11, F-12; ADR-0021 §4).

Real directories under `tmp_path`, real separate processes for the "second process" cases. Time is
injected (`FakeClock`, `ManualTimers`) wherever a window would otherwise have to pass; the real
refresh thread is exercised with a short interval of its own.
"""

from __future__ import annotations

import ast
import contextlib
import multiprocessing
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kernel.specs.codes import Code
from kernel.specs.journal_ownership import OwnershipState
from runners.worker.journal.lock import (
    DEFAULT_STALE_WINDOW_MS,
    LOCK_DIR_NAME,
    OWNER_FILE_NAME,
    REFRESH_THREAD_NAME,
    STALE_LOCK_PREFIX,
    DaemonRefreshTimer,
    JournalOwnership,
    JournalOwnershipError,
    is_leftover_temporary,
)
from tests.runners.worker.journal.journal_lock_workers import crash_while_owning, race_worker

ROOT_DIR = Path(__file__).resolve().parents[4]
WINDOW_MS = 30_000
WINDOW_NS = WINDOW_MS * 1_000_000
NOBODY = 65534
OWNER_ID = "0123456789abcdef" * 2  # what the injected owner-id factory hands out


class FakeClock:
    """Both clocks of `OwnershipClock`, moved by hand."""

    def __init__(self, wall_ns: int | None = None) -> None:
        self.mono = 10**12
        self.wall = time.time_ns() if wall_ns is None else wall_ns

    def monotonic_ns(self) -> int:
        return self.mono

    def time_ns(self) -> int:
        return self.wall

    def advance(self, ns: int) -> None:
        self.mono += ns
        self.wall += ns


class ManualTimer:
    """A `RefreshTimer` whose ticks the test runs."""

    def __init__(self, interval_s: float, tick: Callable[[], bool]) -> None:
        self.interval_s = interval_s
        self.tick = tick
        self.started = False
        self.cancelled = False

    def start(self) -> None:
        self.started = True

    def cancel(self) -> None:
        self.cancelled = True

    def join(self, timeout_s: float) -> None:
        pass


class ManualTimers:
    """A `TimerFactory` that records every timer it made."""

    def __init__(self) -> None:
        self.made: list[ManualTimer] = []

    def __call__(self, interval_s: float, tick: Callable[[], bool]) -> ManualTimer:
        timer = ManualTimer(interval_s, tick)
        self.made.append(timer)
        return timer

    @property
    def only(self) -> ManualTimer:
        assert len(self.made) == 1
        return self.made[0]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "journal"  # missing: acquire() creates it


@pytest.fixture
def owners() -> Iterator[list[JournalOwnership]]:
    """Owners made by a test; any still owned are released afterwards (stopping real timers).

    An owner whose lock a test took away finds out only here: its release fails, as it should.
    """
    made: list[JournalOwnership] = []
    yield made
    for owner in made:
        if owner.state is OwnershipState.OWNED:
            with contextlib.suppress(JournalOwnershipError):
                owner.release()


@pytest.fixture
def make(owners: list[JournalOwnership]) -> Callable[..., JournalOwnership]:
    def make(root: Path, **kwargs: object) -> JournalOwnership:
        kwargs.setdefault("timer_factory", ManualTimers())
        owner = JournalOwnership(root, **kwargs)  # type: ignore[arg-type]
        owners.append(owner)
        return owner

    return make


def _state(owner: JournalOwnership) -> OwnershipState:
    """`owner.state`, read afresh (a plain attribute read would stay narrowed for mypy)."""
    return owner.state


def _code(action: Callable[[], object]) -> Code:
    with pytest.raises(JournalOwnershipError) as caught:
        action()
    return caught.value.code


def _every_operation(owner: JournalOwnership) -> dict[str, Code]:
    """The code each operation fails with (every one must fail)."""
    return {
        name: _code(action)
        for name, action in (
            ("require_owned", owner.require_owned),
            ("verify", owner.verify),
            ("refresh", owner.refresh),
            ("acquire", owner.acquire),
            ("release", owner.release),
        )
    }


def _tree(path: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under `path` with (inode, mode, mtime_ns), symlinks not followed."""
    found: dict[str, tuple[int, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            st = full.lstat()
            found[str(full.relative_to(path))] = (st.st_ino, st.st_mode, st.st_mtime_ns)
    return found


# -- INBOX-21: nothing without acquire; one owner at a time; release hands over ---------------


@pytest.mark.spec("INBOX-21")
def test_without_acquire_every_operation_fails_and_nothing_is_touched(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    owner = make(root)
    assert _state(owner) is OwnershipState.UNOWNED
    codes = _every_operation_but_acquire(owner)
    assert set(codes.values()) == {Code.JOURNAL_NOT_OWNED}, codes
    assert _state(owner) is OwnershipState.UNOWNED
    assert not root.exists()  # constructing and refusing did no I/O


def _every_operation_but_acquire(owner: JournalOwnership) -> dict[str, Code]:
    return {
        name: _code(action)
        for name, action in (
            ("require_owned", owner.require_owned),
            ("verify", owner.verify),
            ("refresh", owner.refresh),
            ("release", owner.release),
        )
    }


@pytest.mark.spec("INBOX-21")
def test_a_second_owner_is_locked_out_until_the_first_releases(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    first, second = make(root), make(root)
    first.acquire()
    assert _state(first) is OwnershipState.OWNED
    first.require_owned()

    assert _code(second.acquire) is Code.JOURNAL_LOCKED
    assert _state(second) is OwnershipState.UNOWNED
    assert _code(second.require_owned) is Code.JOURNAL_NOT_OWNED
    first.require_owned()  # the failed contender changed nothing

    first.release()
    assert _state(first) is OwnershipState.RELEASED
    assert not (root / LOCK_DIR_NAME).exists()
    assert _code(first.require_owned) is Code.JOURNAL_NOT_OWNED
    first.release()  # a second release does nothing

    second.acquire()
    second.require_owned()
    assert _code(first.acquire) is Code.JOURNAL_LOCKED


@pytest.mark.spec("INBOX-21")
def test_two_processes_racing_for_one_root_exactly_one_acquires_each_round(root: Path) -> None:
    """Two spawned processes race `acquire()` at a barrier 20 times; each round exactly one
    wins, the other gets JOURNAL_LOCKED, and after the winner's release the loser acquires."""
    rounds = 20
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(3)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=race_worker, args=(str(root), i, rounds, barrier, results))
        for i in range(2)
    ]
    for proc in procs:
        proc.start()
    winners: list[int] = []
    try:
        for round_no in range(rounds):
            barrier.wait(30)  # 1: go
            race = sorted(results.get(timeout=30) for _ in range(2))
            outcomes = sorted(outcome for _, _, outcome in race)
            assert {r for r, _, _ in race} == {round_no}
            assert outcomes == ["JOURNAL_LOCKED", "acquired"], (round_no, race)
            winners.extend(i for _, i, outcome in race if outcome == "acquired")
            barrier.wait(30)  # 2
            barrier.wait(30)  # 3: released
            after = results.get(timeout=30)
            assert after[0] == round_no
            assert after[2] == "after:acquired", (round_no, after)
            barrier.wait(30)  # 4
    except BaseException:
        barrier.abort()  # the children stop waiting at once
        raise
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    assert [proc.exitcode for proc in procs] == [0, 0]
    assert len(winners) == rounds
    assert not (root / LOCK_DIR_NAME).exists()


@pytest.mark.spec("INBOX-21")
def test_a_released_owner_may_acquire_again_with_a_new_owner_id(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    ids = iter(["a" * 32, "b" * 32])
    owner = make(root, owner_id_factory=lambda: next(ids))
    owner.acquire()
    assert (root / LOCK_DIR_NAME / OWNER_FILE_NAME).read_text() == "a" * 32
    owner.release()
    owner.acquire()
    assert (root / LOCK_DIR_NAME / OWNER_FILE_NAME).read_text() == "b" * 32
    owner.require_owned()


# -- INBOX-22: a removed, changed, replaced or stale lock compromises the owner for good -----


def _delete_lock(lock: Path, clock: FakeClock) -> None:
    shutil.rmtree(lock)


def _change_mtime(lock: Path, clock: FakeClock) -> None:
    mtime = lock.stat().st_mtime_ns + 1_000
    os.utime(lock, ns=(mtime, mtime))


def _keeping_mtime(change: Callable[[Path], None]) -> Callable[[Path, FakeClock], None]:
    """Apply `change` to the lock, then put the lock directory's mtime back as it was, so that
    only the check under test can notice."""

    def tamper(lock: Path, clock: FakeClock) -> None:
        mtime = lock.stat().st_mtime_ns
        change(lock)
        os.utime(lock, ns=(mtime, mtime))

    return tamper


def _replace_owner_file(lock: Path) -> None:
    (lock / "new").write_text("f" * 32)
    os.replace(lock / "new", lock / OWNER_FILE_NAME)


def _rewrite_owner_id_in_place(lock: Path) -> None:
    with open(lock / OWNER_FILE_NAME, "r+") as f:
        f.write("e" * 32)


def _copy_owner_file(lock: Path) -> None:
    # The copy is written before the original goes, so it cannot reuse the original's inode.
    (lock / "copy").write_bytes((lock / OWNER_FILE_NAME).read_bytes())
    os.replace(lock / "copy", lock / OWNER_FILE_NAME)


def _recreate_identical_lock(lock: Path) -> None:
    # Built beside the original before it goes, so no inode of the original can be reused.
    twin = lock.parent / ".twin"
    twin.mkdir(0o700)
    (twin / OWNER_FILE_NAME).write_bytes((lock / OWNER_FILE_NAME).read_bytes())
    shutil.rmtree(lock)
    os.rename(twin, lock)


def _delay_refresh(lock: Path, clock: FakeClock) -> None:
    clock.mono += WINDOW_NS + 1  # no refresh for longer than the window; the lock is untouched


TAMPERINGS: dict[str, tuple[Callable[[Path, FakeClock], None], str]] = {
    "lock directory deleted": (_delete_lock, "the lock directory is missing"),
    "mtime changed": (_change_mtime, "the lock directory mtime changed"),
    "owner file replaced": (
        _keeping_mtime(_replace_owner_file),
        "the lock directory holds another owner id",
    ),
    "owner id rewritten in place": (
        _keeping_mtime(_rewrite_owner_id_in_place),
        "the lock directory holds another owner id",
    ),
    "owner file replaced by a copy": (
        _keeping_mtime(_copy_owner_file),
        "the owner file was replaced",
    ),
    "lock directory recreated identically": (
        _keeping_mtime(_recreate_identical_lock),
        "the lock directory was replaced",
    ),
    "refresh delayed beyond the window": (
        _delay_refresh,
        "the last successful refresh is older than the stale window",
    ),
}


@pytest.mark.spec("INBOX-22")
@pytest.mark.parametrize("tampering", list(TAMPERINGS))
def test_tampering_compromises_the_owner_and_every_later_operation_fails(
    tampering: str, root: Path, make: Callable[..., JournalOwnership]
) -> None:
    tamper, reason = TAMPERINGS[tampering]
    clock, timers = FakeClock(), ManualTimers()
    owner = make(root, clock=clock, timer_factory=timers, owner_id_factory=lambda: OWNER_ID)
    owner.acquire()
    owner.require_owned()
    lock = root / LOCK_DIR_NAME
    tamper(lock, clock)
    before = _tree(root)

    with pytest.raises(JournalOwnershipError) as caught:
        owner.require_owned()
    assert caught.value.code is Code.JOURNAL_COMPROMISED
    assert caught.value.reason == f"ownership is compromised: {reason}"
    assert _state(owner) is OwnershipState.COMPROMISED
    assert timers.only.cancelled  # the refresh timer stops at once

    codes = _every_operation(owner)
    assert set(codes.values()) == {Code.JOURNAL_COMPROMISED}, codes
    assert timers.only.tick() is False  # a late tick refreshes nothing
    clock.advance(10 * WINDOW_NS)
    assert _code(owner.acquire) is Code.JOURNAL_COMPROMISED  # never re-acquired
    assert _state(owner) is OwnershipState.COMPROMISED
    assert _tree(root) == before  # neither re-acquire nor release touched the root
    assert len(timers.made) == 1


@pytest.mark.spec("INBOX-22")
def test_refresh_due_exactly_at_the_window_is_still_owned_one_nanosecond_later_is_not(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    clock = FakeClock()
    owner = make(root, clock=clock)
    owner.acquire()
    clock.mono += WINDOW_NS
    owner.require_owned()
    clock.mono += 1
    assert _code(owner.require_owned) is Code.JOURNAL_COMPROMISED


@pytest.mark.spec("INBOX-22")
def test_a_timer_refresh_that_fails_compromises_the_owner_and_stops_the_timer(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    timers = ManualTimers()
    owner = make(root, timer_factory=timers)
    owner.acquire()
    assert timers.only.tick() is True
    shutil.rmtree(root / LOCK_DIR_NAME)
    assert timers.only.tick() is False  # False ends the timer's loop
    assert _state(owner) is OwnershipState.COMPROMISED
    assert timers.only.cancelled
    assert set(_every_operation(owner).values()) == {Code.JOURNAL_COMPROMISED}
    assert not (root / LOCK_DIR_NAME).exists()


@pytest.mark.spec("INBOX-22")
def test_release_when_compromised_leaves_the_lock_untouched(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    owner = make(root)
    owner.acquire()
    _change_mtime(root / LOCK_DIR_NAME, FakeClock())
    before = _tree(root)
    # release() verifies first (W-7): the change is noticed there, and nothing is removed.
    assert _code(owner.release) is Code.JOURNAL_COMPROMISED
    assert _state(owner) is OwnershipState.COMPROMISED
    assert _code(owner.release) is Code.JOURNAL_COMPROMISED
    assert _tree(root) == before
    assert (root / LOCK_DIR_NAME / OWNER_FILE_NAME).exists()


@pytest.mark.spec("INBOX-22", "INBOX-23")
def test_a_stale_takeover_compromises_the_old_owner(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    old_clock = FakeClock()
    old = make(root, clock=old_clock)
    old.acquire()
    new = make(root, clock=FakeClock(wall_ns=old_clock.wall + WINDOW_NS + 1))
    new.acquire()
    assert _state(new) is OwnershipState.OWNED
    assert _code(old.require_owned) is Code.JOURNAL_COMPROMISED
    assert set(_every_operation(old).values()) == {Code.JOURNAL_COMPROMISED}
    new.require_owned()  # the old owner's failures did not touch the new lock


# -- INBOX-23: the window's range, refresh at half window, stale reclaim ----------------------


@pytest.mark.spec("INBOX-23")
@pytest.mark.parametrize("window_ms", [4_999, 300_001, 0, -1, 10**9])
def test_a_stale_window_outside_5s_to_5min_is_rejected(window_ms: int, root: Path) -> None:
    with pytest.raises(ValueError, match=r"stale_window_ms: .* is outside 5000\.\.300000"):
        JournalOwnership(root, stale_window_ms=window_ms)


@pytest.mark.spec("INBOX-23")
@pytest.mark.parametrize("window", [5_000.0, True, "30000", None])
def test_a_stale_window_that_is_not_an_integer_is_rejected(window: object, root: Path) -> None:
    with pytest.raises(ValueError, match="stale_window_ms: must be an integer"):
        JournalOwnership(root, stale_window_ms=window)  # type: ignore[arg-type]


@pytest.mark.spec("INBOX-23")
def test_the_default_stale_window_is_30s_and_the_bounds_are_accepted(root: Path) -> None:
    assert DEFAULT_STALE_WINDOW_MS == 30_000
    assert JournalOwnership(root).stale_window_ms == 30_000
    assert JournalOwnership(root, stale_window_ms=5_000).refresh_interval_s == 2.5
    assert JournalOwnership(root, stale_window_ms=300_000).refresh_interval_s == 150.0


@pytest.mark.spec("INBOX-23")
@pytest.mark.parametrize("window_ms", [5_000, 30_000, 300_000])
def test_the_timer_refreshes_every_half_window(
    window_ms: int, root: Path, make: Callable[..., JournalOwnership]
) -> None:
    clock, timers = FakeClock(), ManualTimers()
    owner = make(root, clock=clock, timer_factory=timers, stale_window_ms=window_ms)
    owner.acquire()
    timer = timers.only
    assert timer.started
    assert timer.interval_s == window_ms / 2 / 1000
    lock = root / LOCK_DIR_NAME
    half_ns = window_ms * 1_000_000 // 2
    for _ in range(8):  # four windows' worth of time, always owned thanks to the refreshes
        clock.advance(half_ns)
        assert timer.tick() is True
        assert lock.stat().st_mtime_ns == clock.wall  # the refresh stamped "now"
        owner.require_owned()
    clock.advance(window_ms * 1_000_000 + 1)  # a refresh missed for longer than the window
    assert timer.tick() is False
    assert _state(owner) is OwnershipState.COMPROMISED


@pytest.mark.spec("INBOX-23")
def test_the_real_refresh_thread_stamps_the_lock_repeatedly(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    """The production timer class on the real clock; only its interval is shortened."""
    owner = make(root, timer_factory=lambda _interval, tick: DaemonRefreshTimer(0.01, tick))
    owner.acquire()
    lock = root / LOCK_DIR_NAME
    seen = {lock.stat().st_mtime_ns}
    deadline = time.monotonic() + 30  # generous: four 10 ms stamps, on a loaded machine too
    while len(seen) < 4 and time.monotonic() < deadline:
        time.sleep(0.005)
        owner.require_owned()  # every stamp is the owner's own: verification keeps passing
        seen.add(lock.stat().st_mtime_ns)
    assert len(seen) >= 4, f"deadline: {len(seen)} distinct stamps within 30 s"
    owner.release()
    assert not lock.exists()


def test_the_daemon_timer_waits_its_interval_between_ticks_and_stops() -> None:
    ticks: list[float] = []
    stop_after = 3

    def tick() -> bool:
        ticks.append(time.monotonic())
        return len(ticks) < stop_after

    timer = DaemonRefreshTimer(0.02, tick)
    assert not any(t.name == REFRESH_THREAD_NAME for t in threading.enumerate())  # L-1
    started = time.monotonic()
    timer.start()
    timer.join(30)  # generous: three 20 ms intervals
    assert len(ticks) == stop_after  # a False tick ends the thread
    gaps = [b - a for a, b in zip([started, *ticks], ticks, strict=False)]
    assert all(gap >= 0.019 for gap in gaps), gaps

    cancelled = DaemonRefreshTimer(0.01, lambda: True)
    cancelled.start()
    cancelled.cancel()
    cancelled.join(5)
    assert not any(t.name == REFRESH_THREAD_NAME for t in threading.enumerate())


@pytest.mark.spec("INBOX-23")
def test_a_lock_older_than_the_window_is_reclaimed_and_a_younger_one_is_not(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    holder_clock = FakeClock()
    holder = make(root, clock=holder_clock)
    holder.acquire()
    stamped = holder_clock.wall
    for age_ns in (0, WINDOW_NS // 2, WINDOW_NS):  # "older than the window" is strict
        contender = make(root, clock=FakeClock(wall_ns=stamped + age_ns))
        assert _code(contender.acquire) is Code.JOURNAL_LOCKED, age_ns
    holder.require_owned()

    contender = make(root, clock=FakeClock(wall_ns=stamped + WINDOW_NS + 1))
    contender.acquire()
    contender.require_owned()
    assert sorted(p.name for p in root.iterdir()) == [LOCK_DIR_NAME]  # the stale lock is gone
    assert _code(holder.require_owned) is Code.JOURNAL_COMPROMISED


@pytest.mark.spec("INBOX-23", "E-2")
def test_a_crashed_owner_process_is_reclaimed_at_once(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    """E-2 (amends the W-3 wait): the process that held the lock exited, so it is provably dead."""
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=crash_while_owning, args=(str(root),))
    proc.start()
    proc.join(30)
    assert proc.exitcode == 0
    lock = root / LOCK_DIR_NAME
    assert (lock / OWNER_FILE_NAME).exists()  # died owning: nothing released

    # The contender's wall clock says the lock is not a nanosecond old: only E-2 can reclaim it.
    reclaimer = make(root, clock=FakeClock(wall_ns=lock.stat().st_mtime_ns))
    reclaimer.acquire()
    reclaimer.require_owned()


def _race_rename_first(lock: Path) -> Callable[[str | Path, str | Path], None]:
    """os.rename, except that another contender renames the stale lock away first."""
    real = os.rename

    def rename(src: str | Path, dst: str | Path) -> None:
        if Path(src) == lock:
            real(lock, lock.parent / f"{STALE_LOCK_PREFIX}other")
        real(src, dst)

    return rename


def _race_mkdir_after_rename(lock: Path) -> Callable[[str | Path, str | Path], None]:
    """os.rename, after which another contender's mkdir wins the freed name."""
    real = os.rename

    def rename(src: str | Path, dst: str | Path) -> None:
        real(src, dst)
        if Path(src) == lock:
            lock.mkdir(0o700)

    return rename


def _race_replace_before_rename(lock: Path) -> Callable[[str | Path, str | Path], None]:
    """os.rename, but between the stale judgment and the rename another contender replaced the
    stale lock with its own fresh one (so this rename moves the fresh one)."""
    real = os.rename

    def rename(src: str | Path, dst: str | Path) -> None:
        if Path(src) == lock:
            real(lock, lock.parent / f"{STALE_LOCK_PREFIX}other")
            lock.mkdir(0o700)
        real(src, dst)

    return rename


@pytest.mark.spec("INBOX-23")
@pytest.mark.parametrize(
    ("race", "reason"),
    [
        (_race_rename_first, "another contender reclaimed the stale lock first"),
        (_race_mkdir_after_rename, "another owner took the lock first"),
        (_race_replace_before_rename, "the lock changed while it was being reclaimed"),
    ],
)
def test_losing_the_race_for_a_stale_lock_is_locked(
    race: Callable[[Path], Callable[[str | Path, str | Path], None]],
    reason: str,
    root: Path,
    make: Callable[..., JournalOwnership],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    holder_clock = FakeClock()
    make(root, clock=holder_clock).acquire()
    contender = make(root, clock=FakeClock(wall_ns=holder_clock.wall + WINDOW_NS + 1))
    monkeypatch.setattr(os, "rename", race(root / LOCK_DIR_NAME))
    with pytest.raises(JournalOwnershipError) as caught:
        contender.acquire()
    assert (caught.value.code, caught.value.reason) == (Code.JOURNAL_LOCKED, reason)
    assert _state(contender) is OwnershipState.UNOWNED
    if race is _race_replace_before_rename:  # D-10: the other contender's lock was put back
        assert (root / LOCK_DIR_NAME).is_dir()
        assert not any(
            p.name.startswith(STALE_LOCK_PREFIX) and p.name != f"{STALE_LOCK_PREFIX}other"
            for p in root.iterdir()
        )


def _symlink_to_private_dir(lock: Path) -> None:
    target = lock.parent.parent / "elsewhere"
    target.mkdir(0o700)
    lock.symlink_to(target)


def _regular_file(lock: Path) -> None:
    lock.write_text("not a lock")


def _mode_0755(lock: Path) -> None:
    lock.mkdir()
    lock.chmod(0o755)


def _owned_by_nobody(lock: Path) -> None:
    lock.mkdir(0o700)
    os.chown(lock, NOBODY, NOBODY)


FOREIGN_LOCKS: dict[str, tuple[Callable[[Path], None], str]] = {
    "symlink": (_symlink_to_private_dir, "the lock is a symlink"),
    "regular file": (_regular_file, "the lock is not a directory"),
    "mode 0755": (_mode_0755, "the lock directory mode is not 0700"),
    "another owner": (_owned_by_nobody, "the lock is not owned by the effective uid"),
}


@pytest.mark.spec("INBOX-16", "INBOX-23")
@pytest.mark.parametrize("form", list(FOREIGN_LOCKS))
def test_a_foreign_lock_entry_is_refused_and_never_reclaimed(
    form: str, root: Path, make: Callable[..., JournalOwnership]
) -> None:
    if form == "another owner" and os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    create, reason = FOREIGN_LOCKS[form]
    root.mkdir(0o700)
    lock = root / LOCK_DIR_NAME
    create(lock)
    os.utime(lock, ns=(1, 1), follow_symlinks=False)  # ancient: it would be stale if it were ours
    before = _tree(root)
    with pytest.raises(JournalOwnershipError) as caught:
        make(root).acquire()
    assert (caught.value.code, caught.value.reason) == (Code.JOURNAL_PERMISSIONS, reason)
    assert _tree(root) == before


# -- INBOX-24: one timer thread, no connection, no watcher ------------------------------------


def _open_fds() -> list[str]:
    found: list[str] = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the descriptor listdir itself used
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
    return sorted(found)


@pytest.mark.spec("INBOX-24")
def test_owning_starts_exactly_one_daemon_timer_thread_and_keeps_no_descriptor_open(
    root: Path, owners: list[JournalOwnership]
) -> None:
    threads_before = set(threading.enumerate())
    fds_before = _open_fds()
    owner = JournalOwnership(root)  # the production timer
    owners.append(owner)
    assert set(threading.enumerate()) == threads_before  # construction starts nothing (L-1)
    owner.acquire()
    owner.require_owned()
    owner.refresh()
    new = set(threading.enumerate()) - threads_before
    assert len(new) == 1
    (thread,) = new
    assert thread.name == REFRESH_THREAD_NAME
    assert thread.daemon  # L-3: never holds the process
    # No database connection, watcher (inotify/fanotify), socket or file is left open.
    fds_after = [fd for fd in _open_fds() if not fd.startswith("/proc/")]
    assert fds_after == [fd for fd in fds_before if not fd.startswith("/proc/")]
    owner.release()
    assert not thread.is_alive()
    assert set(threading.enumerate()) == threads_before


@pytest.mark.spec("INBOX-24")
def test_the_lock_module_imports_no_database_watcher_or_process_machinery() -> None:
    path = ROOT_DIR / "runners" / "worker" / "journal" / "lock.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= {
        "__future__",
        "collections",
        "contextlib",
        "dataclasses",
        "errno",
        "json",
        "kernel",
        "os",
        "pathlib",
        "secrets",
        "stat",
        "threading",
        "time",
        "typing",
    }, imported


@pytest.mark.spec("INBOX-24")
def test_an_owning_process_exits_without_release(root: Path) -> None:
    """L-3: the refresh thread does not keep the interpreter alive."""
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from runners.worker.journal.lock import JournalOwnership
        owner = JournalOwnership(Path({str(root)!r}))
        owner.acquire()
        print(owner.state)
        """
    )
    # A non-daemon refresh thread would never end: the deadline tells that apart from a slow
    # machine (a wall-time assertion would not).
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT_DIR,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("deadline: the owning process had not exited 120 s after its start (L-3)")
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "owned", "")
    assert (root / LOCK_DIR_NAME).is_dir()


# -- INBOX-16 (the root part) and F-1 -------------------------------------------------------


@pytest.mark.spec("INBOX-16")
@pytest.mark.parametrize("umask", [0o000, 0o022, 0o277])
def test_a_missing_root_is_created_0700_with_a_0700_lock_and_a_0600_owner_file(
    umask: int, root: Path, make: Callable[..., JournalOwnership]
) -> None:
    previous = os.umask(umask)
    try:
        make(root).acquire()
    finally:
        os.umask(previous)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE((root / LOCK_DIR_NAME).stat().st_mode) == 0o700
    assert stat.S_IMODE((root / LOCK_DIR_NAME / OWNER_FILE_NAME).stat().st_mode) == 0o600


@pytest.mark.spec("INBOX-16")
@pytest.mark.parametrize("mode", [0o755, 0o750, 0o710, 0o701, 0o702, 0o720, 0o777])
def test_a_root_with_group_or_other_bits_is_refused(
    mode: int, root: Path, make: Callable[..., JournalOwnership]
) -> None:
    root.mkdir()
    root.chmod(mode)
    with pytest.raises(JournalOwnershipError) as caught:
        make(root).acquire()
    assert caught.value.code is Code.JOURNAL_PERMISSIONS
    assert caught.value.reason == "the root has group or other permission bits"
    assert list(root.iterdir()) == []  # refused before any lock
    assert stat.S_IMODE(root.stat().st_mode) == mode  # and not "fixed" either


@pytest.mark.spec("INBOX-16")
def test_a_symlinked_root_is_refused(
    tmp_path: Path, root: Path, make: Callable[..., JournalOwnership]
) -> None:
    target = tmp_path / "real"
    target.mkdir(0o700)
    root.symlink_to(target)
    with pytest.raises(JournalOwnershipError) as caught:
        make(root).acquire()
    assert (caught.value.code, caught.value.reason) == (
        Code.JOURNAL_PERMISSIONS,
        "the root is a symlink",
    )
    assert list(target.iterdir()) == []


@pytest.mark.spec("INBOX-16")
@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_root_owned_by_another_user_is_refused(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    root.mkdir(0o700)
    os.chown(root, NOBODY, NOBODY)
    with pytest.raises(JournalOwnershipError) as caught:
        make(root).acquire()
    assert (caught.value.code, caught.value.reason) == (
        Code.JOURNAL_PERMISSIONS,
        "the root is not owned by the effective uid",
    )
    assert list(root.iterdir()) == []


@pytest.mark.spec("INBOX-16")
def test_a_root_that_is_not_a_directory_or_cannot_be_created_is_refused(
    tmp_path: Path, root: Path, make: Callable[..., JournalOwnership]
) -> None:
    root.write_text("")
    assert _reason(make(root).acquire) == "the root is not a directory"
    orphan = tmp_path / "missing-parent" / "journal"
    assert _reason(make(orphan).acquire) == "the root cannot be created or inspected (ENOENT)"


def _reason(action: Callable[[], object]) -> str:
    with pytest.raises(JournalOwnershipError) as caught:
        action()
    assert caught.value.code is Code.JOURNAL_PERMISSIONS
    return caught.value.reason


def test_a_relative_root_is_rejected_at_construction() -> None:
    with pytest.raises(ValueError, match="absolute path"):
        JournalOwnership(Path("journal"))


# -- F-12: leftover temporaries -------------------------------------------------------------


def test_acquiring_deletes_leftover_temporaries_and_stale_locks_only(
    tmp_path: Path, root: Path, make: Callable[..., JournalOwnership]
) -> None:
    root.mkdir(0o700)
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    (root / ".tmp-0001").write_text("half a record")
    (root / ".tmp-link").symlink_to(outside)
    (root / f"{STALE_LOCK_PREFIX}dead").mkdir(0o700)
    (root / f"{STALE_LOCK_PREFIX}dead" / OWNER_FILE_NAME).write_text("x" * 32)
    (root / "offer-1.json").write_text("{}")
    (root / ".a-directory").mkdir()
    make(root).acquire()
    assert sorted(p.name for p in root.iterdir()) == [".a-directory", LOCK_DIR_NAME, "offer-1.json"]
    assert outside.read_text() == "keep"  # the symlink went, not its target


def test_a_contender_that_is_locked_out_deletes_nothing(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    make(root).acquire()
    in_flight = root / ".tmp-in-flight"
    in_flight.write_text("the owner is writing this")
    assert _code(make(root).acquire) is Code.JOURNAL_LOCKED
    assert in_flight.exists()


def test_the_temporary_name_pattern() -> None:
    assert is_leftover_temporary(".tmp-abc")
    assert is_leftover_temporary(".anything")
    assert not is_leftover_temporary(LOCK_DIR_NAME)
    assert not is_leftover_temporary(f"{STALE_LOCK_PREFIX}abc")
    assert not is_leftover_temporary("offer-1.json")


# -- the owner id stays out of reprs and messages -------------------------------------------


def test_the_owner_id_never_appears_in_a_repr_or_an_error(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    owner = make(root, owner_id_factory=lambda: OWNER_ID)
    owner.acquire()
    texts = [repr(owner), str(owner), repr(owner._tenure)]
    second = make(root)
    with pytest.raises(JournalOwnershipError) as locked:
        second.acquire()
    texts += [str(locked.value), repr(locked.value)]
    _replace_owner_file(root / LOCK_DIR_NAME)
    with pytest.raises(JournalOwnershipError) as compromised:
        owner.verify()
    texts += [str(compromised.value), repr(compromised.value), repr(owner)]
    assert not [t for t in texts if OWNER_ID in t]
    assert (root / LOCK_DIR_NAME / OWNER_FILE_NAME).read_text() != OWNER_ID


@pytest.mark.parametrize("bad", ["", "x" * 257, "caf\u00e9", "a\nb"])
def test_an_unusable_owner_id_factory_is_refused_before_any_lock(
    bad: str, root: Path, make: Callable[..., JournalOwnership]
) -> None:
    with pytest.raises(ValueError, match="owner_id_factory"):
        make(root, owner_id_factory=lambda: bad).acquire()
    assert not root.exists()
