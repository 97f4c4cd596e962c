"""A dead owner's journal lock is reclaimed at once (SPEC Appendix E-2) and a lock that changed
while it was being reclaimed is put back (D-10).

Real directories under `tmp_path`, real child processes killed with a real SIGKILL, the real
`/proc` of this host. No assertion is about elapsed time: every contender's wall clock is pinned
(`PinnedClock`) at the lock's own mtime or at the edge of the stale window, so a reclaim can only
come from the rule under test, and the outcome is read from the lock itself.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kernel.specs.codes import Code
from kernel.specs.journal_ownership import LockOwnerIdentity, OwnershipState
from runners.worker.journal.lock import (
    DEFAULT_STALE_WINDOW_MS,
    IDENTITY_FILE_NAME,
    LOCK_DIR_NAME,
    OWNER_FILE_NAME,
    STALE_LOCK_PREFIX,
    JournalOwnership,
    JournalOwnershipError,
    ProcHost,
    decode_identity,
    encode_identity,
)
from tests.runners.worker.journal.journal_lock_workers import hold_until_killed

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="E-2's observations read Linux /proc"
)

WINDOW_NS = DEFAULT_STALE_WINDOW_MS * 1_000_000
CHILD_DEADLINE_S = 120.0  # generous: a spawned interpreter on a loaded machine


class PinnedClock:
    """Both ownership clocks, fixed unless moved; `before_wall` runs once at the first wall read."""

    def __init__(self, wall_ns: int, before_wall: Callable[[], None] | None = None) -> None:
        self.wall = wall_ns
        self._before_wall = before_wall

    def monotonic_ns(self) -> int:
        return 10**12

    def time_ns(self) -> int:
        hook, self._before_wall = self._before_wall, None
        if hook is not None:
            hook()
        return self.wall


class NoTimer:
    def __init__(self, interval_s: float, tick: Callable[[], bool]) -> None:
        del interval_s, tick

    def start(self) -> None:
        return None

    def cancel(self) -> None:
        return None

    def join(self, timeout_s: float) -> None:
        del timeout_s


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "journal"


@pytest.fixture
def make() -> Iterator[Callable[..., JournalOwnership]]:
    made: list[JournalOwnership] = []

    def make(root: Path, **kwargs: object) -> JournalOwnership:
        kwargs.setdefault("timer_factory", NoTimer)
        owner = JournalOwnership(root, **kwargs)  # type: ignore[arg-type]
        made.append(owner)
        return owner

    yield make
    for owner in made:
        if owner.state is OwnershipState.OWNED:
            with contextlib.suppress(JournalOwnershipError):
                owner.release()


@pytest.fixture
def child(root: Path) -> Iterator[Callable[[], tuple[multiprocessing.process.BaseProcess, int]]]:
    """Start a real child that takes the lock and waits; every child is SIGKILLed and reaped."""
    ctx = multiprocessing.get_context("spawn")
    started: list[multiprocessing.process.BaseProcess] = []

    def start() -> tuple[multiprocessing.process.BaseProcess, int]:
        ready: multiprocessing.Queue[int] = ctx.Queue()
        proc = ctx.Process(target=hold_until_killed, args=(str(root), ready))
        proc.start()
        started.append(proc)
        pid = ready.get(timeout=CHILD_DEADLINE_S)  # the child owns the lock
        return proc, pid

    yield start
    for proc in started:
        if proc.is_alive():
            proc.kill()
        proc.join(CHILD_DEADLINE_S)


def _lock_identity(root: Path) -> LockOwnerIdentity | None:
    return decode_identity((root / LOCK_DIR_NAME / IDENTITY_FILE_NAME).read_bytes())


def _owner_id(root: Path) -> bytes:
    return (root / LOCK_DIR_NAME / OWNER_FILE_NAME).read_bytes()


def _rewrite_identity(root: Path, **changes: object) -> None:
    """Rewrite the recorded identity in place (the lock directory's mtime does not change)."""
    path = root / LOCK_DIR_NAME / IDENTITY_FILE_NAME
    document = json.loads(path.read_bytes())
    document.update(changes)
    path.write_bytes(json.dumps(document).encode("ascii"))


def _code(action: Callable[[], object]) -> Code:
    with pytest.raises(JournalOwnershipError) as caught:
        action()
    return caught.value.code


def _lock_mtime(root: Path) -> int:
    return (root / LOCK_DIR_NAME).stat().st_mtime_ns


# -- the identity a lock records --------------------------------------------------------------


@pytest.mark.spec("E-2")
def test_the_lock_records_boot_id_pid_start_time_beside_the_owner_id(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    make(root).acquire()
    recorded = _lock_identity(root)
    assert recorded is not None
    own = ProcHost().own_identity()
    assert recorded == own
    assert recorded.pid == os.getpid()
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    assert recorded.boot_id == boot_id
    assert (root / LOCK_DIR_NAME / IDENTITY_FILE_NAME).stat().st_mode & 0o777 == 0o600
    assert decode_identity(encode_identity(recorded)) == recorded


@pytest.mark.spec("E-2")
@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{",
        b"[]",
        b'{"boot_id":"b","pid":1,"start_time":1}',
        b'{"boot_id":"b","pid":true,"start_time":1,"pid_namespace":"n"}',
        b'{"boot_id":"","pid":1,"start_time":1,"pid_namespace":"n"}',
        "é".encode(),
    ],
)
def test_an_identity_that_is_not_exactly_ours_decodes_to_nothing(data: bytes) -> None:
    assert decode_identity(data) is None


# -- a dead owner: reclaimed at once ----------------------------------------------------------


@pytest.mark.spec("E-2", "INBOX-23")
def test_a_sigkilled_owner_process_is_reclaimed_at_once_without_the_stale_window(
    root: Path,
    make: Callable[..., JournalOwnership],
    child: Callable[[], tuple[multiprocessing.process.BaseProcess, int]],
) -> None:
    proc, pid = child()
    recorded = _lock_identity(root)
    assert recorded is not None
    assert recorded.pid == pid
    old_owner, old_mtime = _owner_id(root), _lock_mtime(root)

    # While the child lives, a contender at the lock's own mtime is locked out.
    assert _code(make(root, clock=PinnedClock(old_mtime)).acquire) is Code.JOURNAL_LOCKED

    os.kill(pid, signal.SIGKILL)
    proc.join(CHILD_DEADLINE_S)
    assert proc.exitcode == -signal.SIGKILL
    assert _owner_id(root) == old_owner  # the killed owner released nothing

    # Started at once: its wall clock says the lock is 0 ns old, so only E-2 can let it in.
    successor = make(root, clock=PinnedClock(old_mtime))
    successor.acquire()
    successor.require_owned()
    assert _owner_id(root) != old_owner
    now = _lock_identity(root)
    assert now is not None
    assert now.pid == os.getpid()
    assert not [p for p in root.iterdir() if p.name.startswith(STALE_LOCK_PREFIX)]


@pytest.mark.spec("E-2")
def test_a_lock_recorded_under_another_boot_is_reclaimed_at_once(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    holder = make(root)
    holder.acquire()
    mtime = _lock_mtime(root)
    _rewrite_identity(root, boot_id="00000000-0000-0000-0000-000000000000")
    assert _lock_mtime(root) == mtime

    contender = make(root, clock=PinnedClock(mtime))
    contender.acquire()
    contender.require_owned()
    assert _code(holder.require_owned) is Code.JOURNAL_COMPROMISED


@pytest.mark.spec("E-2")
def test_a_reused_pid_with_another_start_time_counts_as_dead(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    """This process's PID exists, but the recorded start time is not its start time."""
    holder = make(root)
    holder.acquire()
    recorded = _lock_identity(root)
    assert recorded is not None
    mtime = _lock_mtime(root)
    _rewrite_identity(root, pid=os.getpid(), start_time=recorded.start_time + 1)

    contender = make(root, clock=PinnedClock(mtime))
    contender.acquire()
    contender.require_owned()


@pytest.mark.spec("E-2")
def test_a_pid_seen_from_another_pid_namespace_proves_nothing(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    holder = make(root)
    holder.acquire()
    mtime = _lock_mtime(root)
    _rewrite_identity(root, pid_namespace="pid:[1]", start_time=0)
    assert _code(make(root, clock=PinnedClock(mtime + WINDOW_NS)).acquire) is Code.JOURNAL_LOCKED
    holder.require_owned()


# -- a live owner, or one not proven dead: the stale window applies ---------------------------


@pytest.mark.spec("E-2", "INBOX-23")
def test_a_live_child_owner_is_not_reclaimed_before_the_window(
    root: Path,
    make: Callable[..., JournalOwnership],
    child: Callable[[], tuple[multiprocessing.process.BaseProcess, int]],
) -> None:
    proc, _ = child()
    mtime = _lock_mtime(root)
    owner = _owner_id(root)
    for age_ns in (0, WINDOW_NS // 2, WINDOW_NS):  # "older than the window" is strict (J-2)
        assert _code(make(root, clock=PinnedClock(mtime + age_ns)).acquire) is Code.JOURNAL_LOCKED
    assert proc.is_alive()
    assert _owner_id(root) == owner  # untouched

    late = make(root, clock=PinnedClock(mtime + WINDOW_NS + 1))
    late.acquire()  # W-3: past the window even a live owner's lock is stale
    late.require_owned()


@pytest.mark.spec("E-2", "INBOX-23")
def test_a_live_owner_in_this_process_is_not_reclaimed_before_the_window(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    holder = make(root)
    holder.acquire()
    mtime = _lock_mtime(root)
    for age_ns in (0, WINDOW_NS):
        assert _code(make(root, clock=PinnedClock(mtime + age_ns)).acquire) is Code.JOURNAL_LOCKED
    holder.require_owned()


@pytest.mark.spec("E-2")
@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_a_lock_without_a_readable_identity_waits_out_the_window(
    damage: str, root: Path, make: Callable[..., JournalOwnership]
) -> None:
    holder = make(root)
    holder.acquire()
    path = root / LOCK_DIR_NAME / IDENTITY_FILE_NAME
    if damage == "missing":
        path.unlink()  # as a lock written before E-2 (or on a host without /proc) looks
    else:
        path.write_bytes(b"not json")
    mtime = _lock_mtime(root)
    assert _code(make(root, clock=PinnedClock(mtime + WINDOW_NS)).acquire) is Code.JOURNAL_LOCKED
    late = make(root, clock=PinnedClock(mtime + WINDOW_NS + 1))
    late.acquire()
    late.require_owned()


# -- D-10: the moved lock is deleted only if it is the lock judged ----------------------------


@pytest.mark.spec("E-2", "INBOX-23")
def test_a_lock_replaced_between_judgment_and_rename_is_put_back(
    root: Path, make: Callable[..., JournalOwnership]
) -> None:
    """C judges the dead owner's lock stale; before C renames it, B reclaims it and acquires its
    own. C's rename then moves B's fresh lock: C must put it back and fail `JOURNAL_LOCKED`, and B
    stays the owner (without D-10's check, B's lock is deleted and B is compromised)."""
    dead = make(root)
    dead.acquire()
    mtime = _lock_mtime(root)
    _rewrite_identity(root, boot_id="00000000-0000-0000-0000-000000000000")  # provably dead
    b = make(root, clock=PinnedClock(mtime))
    c = make(root, clock=PinnedClock(mtime, before_wall=b.acquire))

    with pytest.raises(JournalOwnershipError) as caught:
        c.acquire()
    assert (caught.value.code, caught.value.reason) == (
        Code.JOURNAL_LOCKED,
        "the lock changed while it was being reclaimed",
    )
    assert c.state is OwnershipState.UNOWNED
    b.require_owned()  # same inode, owner id and mtime: B never noticed
    assert not [p for p in root.iterdir() if p.name.startswith(STALE_LOCK_PREFIX)]
