"""Ownership of a file journal root (SPEC §3.9 W-1..W-7, F-1, F-11, F-12; ADR-0021 §4).

One `JournalOwnership` is one would-be owner of one journal root. Every journal operation calls
`require_owned()` first (W-1); it fails unless this owner holds the lock and the lock checks out.

The lock (W-2, Appendix E-2)
    `<root>/.owner.lock`, a directory created atomically with `mkdir` (mode `0700`), holding the
    file `owner` (`0600`, `O_CREAT | O_EXCL`) with a random owner id and, beside it, the file
    `identity` (`0600`, `O_CREAT | O_EXCL`): the owner's boot id, PID, process start time and PID
    namespace as JSON (E-2; written only where the host reports them). The owner then sets the
    directory's mtime to a wall-clock value of its choosing (`os.utime`, nanoseconds) and
    remembers the value the file system stored, so that verification compares exactly.

Verification (W-5), before every operation and on every refresh
    The lock directory exists (and is the directory this owner created: same device and inode),
    its owner file holds this owner's id (and is the file this owner wrote), its mtime equals the
    value this owner last wrote, and the last successful refresh is no older than the stale window
    (by the monotonic clock). Any failure moves the owner to `compromised` at once. `compromised`
    is absorbing (W-6): every operation, `acquire()` and `release()` included, fails
    `JOURNAL_COMPROMISED`, and this owner never touches the lock again.

Contention (W-3, amended by E-2 and D-10)
    The contender observes the lock (its owner id, mtime and inode, the recorded identity) and
    the host (its own boot id and PID namespace; whether the recorded PID exists now and its start
    time), and the kernel judges (`judge_contended_lock`): a provably dead owner's lock is stale at
    once, any other is stale only when older than the stale window (by the wall clock); a lock
    that is not stale is `JOURNAL_LOCKED`. A stale lock is renamed atomically to a unique
    `.owner.lock.stale-<hex>` name inside the root; then (D-10, `moved_lock_action`) it is removed
    only if what was moved is the lock judged (same owner id, mtime and inode), otherwise it is
    renamed back and the contender fails `JOURNAL_LOCKED`; after a removal `mkdir` is retried
    once, and losing that race is `JOURNAL_LOCKED`. A lock entry that this code cannot have made
    (a symlink, not a directory, another uid, a mode other than `0700`) is never reclaimed, live
    or stale: `JOURNAL_PERMISSIONS` (docs/decisions.md J-3).

Refresh (W-4, F-11)
    One timer per tenure: a single daemon thread (`DaemonRefreshTimer`) that waits on an Event
    and refreshes every `stale window / journal_refresh_divisor` (half the window). It never keeps
    the interpreter alive (L-3) and stops at the first failed refresh (the owner is then
    `compromised`) or at `release()`. The adapter has no other timer, thread, watcher or
    connection.

Root checks (F-1) happen on `acquire()`: a missing root is created with `0700` (independent of
the umask); a root that is a symlink, not a directory, not owned by the effective uid, or has any
group/other permission bit is refused with `JOURNAL_PERMISSIONS`. After acquiring, leftover
temporaries are deleted (F-12, `is_leftover_temporary`).

No message, repr or error carries the owner id (it is not a capability, but S-1 costs nothing).
The states and transitions are the kernel's data: `kernel/specs/journal_ownership.py`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from kernel.specs import (
    HARD_LIMITS,
    REFUSAL_CODES,
    Code,
    HostObservation,
    LockAction,
    LockOwnerIdentity,
    LockSnapshot,
    MovedLockAction,
    OwnershipState,
    OwnershipTrigger,
    ProcessPresence,
    Profile,
    budget_for,
    check_in_range,
    judge_contended_lock,
    moved_lock_action,
    next_ownership_state,
)

__all__ = [
    "DEFAULT_STALE_WINDOW_MS",
    "DIR_MODE",
    "FILE_MODE",
    "IDENTITY_FILE_NAME",
    "LOCK_DIR_NAME",
    "OWNER_FILE_NAME",
    "REFRESH_THREAD_NAME",
    "STALE_LOCK_PREFIX",
    "TEMPORARY_PREFIX",
    "DaemonRefreshTimer",
    "HostProbe",
    "JournalOwnership",
    "JournalOwnershipError",
    "OwnershipClock",
    "ProcHost",
    "RefreshTimer",
    "SystemClock",
    "TimerFactory",
    "decode_identity",
    "encode_identity",
    "is_leftover_temporary",
    "is_stale_lock_name",
    "new_owner_id",
]

LOCK_DIR_NAME: Final = ".owner.lock"
OWNER_FILE_NAME: Final = "owner"
#: E-2: the owner's boot id, PID, start time and PID namespace, beside the owner id.
IDENTITY_FILE_NAME: Final = "identity"
_IDENTITY_MAX_BYTES: Final = 1024
#: A stale lock is renamed to this prefix plus random hex before it is removed (W-3).
STALE_LOCK_PREFIX: Final = ".owner.lock.stale-"
#: F-12: every root entry whose name starts with this prefix is a temporary (F-8: never listed),
#: except `LOCK_DIR_NAME` and the `STALE_LOCK_PREFIX` names. After acquiring, the owner unlinks
#: the temporaries that are files or symlinks (e.g. `.tmp-*`: never published, so no state is
#: lost); a dot-directory is not a temporary file and is left alone. Leftover stale-lock
#: directories (a contender died mid-reclaim) are removed too.
TEMPORARY_PREFIX: Final = "."
DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600
REFRESH_THREAD_NAME: Final = "ql3-journal-refresh"
OWNER_ID_BYTES: Final = 16
_OWNER_ID_MAX_CHARS: Final = 256
_GROUP_OTHER_BITS: Final = 0o077
_NS_PER_MS: Final = 1_000_000
_DIR_OPEN_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _default_stale_window_ms() -> int:
    ownership = budget_for(Profile.EDGE).journal_ownership
    if ownership is None:  # pragma: no cover - §6.3 gives edge a journal
        raise RuntimeError("the edge budget has no journal ownership row")
    return ownership.stale_window_ms


#: W-4: 30 s, read from the §6.3 budget table (`kernel/specs/budgets.py`).
DEFAULT_STALE_WINDOW_MS: Final = _default_stale_window_ms()
#: How long `release()` waits for an in-flight refresh: the lifecycle stop timeout (B-72).
_TIMER_JOIN_TIMEOUT_S: Final = budget_for(Profile.EDGE).lifecycle_stop_timeout_ms / 1000


def is_leftover_temporary(name: str) -> bool:
    """F-12: `name` (an entry of the root) is a temporary, never a record or the lock."""
    return (
        name.startswith(TEMPORARY_PREFIX)
        and name != LOCK_DIR_NAME
        and not name.startswith(STALE_LOCK_PREFIX)
    )


def is_stale_lock_name(name: str) -> bool:
    """`name` is a lock renamed away by a contender (W-3)."""
    return name.startswith(STALE_LOCK_PREFIX)


def new_owner_id() -> str:
    """A random owner id (W-2): 32 hex characters."""
    return secrets.token_hex(OWNER_ID_BYTES)


def encode_identity(identity: LockOwnerIdentity) -> bytes:
    """E-2: the `identity` file's bytes (canonical JSON)."""
    document = {
        "boot_id": identity.boot_id,
        "pid": identity.pid,
        "pid_namespace": identity.pid_namespace,
        "start_time": identity.start_time,
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode("ascii")


def decode_identity(data: bytes) -> LockOwnerIdentity | None:
    """The identity in an `identity` file, or None when it is not exactly what
    `encode_identity` writes (then nothing is proven and the stale window applies, E-2)."""
    try:
        document = json.loads(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(document, dict) or set(document) != {
        "boot_id",
        "pid",
        "pid_namespace",
        "start_time",
    }:
        return None
    boot_id, pid = document["boot_id"], document["pid"]
    namespace, start_time = document["pid_namespace"], document["start_time"]
    if not (isinstance(boot_id, str) and boot_id and isinstance(namespace, str) and namespace):
        return None
    if type(pid) is not int or type(start_time) is not int or pid <= 0 or start_time < 0:
        return None
    return LockOwnerIdentity(boot_id, pid, start_time, namespace)


class HostProbe(Protocol):
    """What ownership observes about processes on this host (E-2); the kernel decides."""

    def own_identity(self) -> LockOwnerIdentity | None: ...

    def observe(self, pid: int) -> HostObservation: ...


def _read_small(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(4096).decode("ascii", "replace")
    except OSError:
        return None


class ProcHost:
    """Linux `/proc`: boot id `/proc/sys/kernel/random/boot_id`, PID namespace
    `/proc/self/ns/pid`, a process's state and start time `/proc/<pid>/stat` fields 3 and 22.
    Anything unreadable is reported as unknown, never as dead."""

    def _boot_id(self) -> str | None:
        text = _read_small("/proc/sys/kernel/random/boot_id")
        if text is None or not text.strip():
            return None
        return text.strip()

    def _pid_namespace(self) -> str | None:
        try:
            return os.readlink("/proc/self/ns/pid")
        except OSError:
            return None

    def _stat(self, pid: int) -> tuple[ProcessPresence, int | None]:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                text = handle.read(4096).decode("ascii", "replace")
        except FileNotFoundError:
            return ProcessPresence.ABSENT, None
        except OSError:
            return ProcessPresence.UNKNOWN, None
        # Field 2 (comm) is parenthesised and may hold anything: split after its last ')'.
        fields = text[text.rfind(")") + 1 :].split()
        if len(fields) < 20 or not fields[19].isdigit():
            return ProcessPresence.UNKNOWN, None
        state, start_time = fields[0], int(fields[19])  # fields 3 and 22
        if state in ("Z", "X"):  # exited: it never runs (or refreshes a lock) again
            return ProcessPresence.ZOMBIE, start_time
        return ProcessPresence.PRESENT, start_time

    def own_identity(self) -> LockOwnerIdentity | None:
        boot_id, namespace = self._boot_id(), self._pid_namespace()
        pid = os.getpid()
        presence, start_time = self._stat(pid)
        if boot_id is None or namespace is None or start_time is None:
            return None
        if presence is not ProcessPresence.PRESENT:  # pragma: no cover - we are running
            return None
        return LockOwnerIdentity(boot_id, pid, start_time, namespace)

    def observe(self, pid: int) -> HostObservation:
        presence, start_time = self._stat(pid)
        return HostObservation(self._boot_id(), self._pid_namespace(), presence, start_time)


class JournalOwnershipError(Exception):
    """An ownership failure with its stable code.

    `code` is one of JOURNAL_NOT_OWNED, JOURNAL_LOCKED, JOURNAL_COMPROMISED, JOURNAL_PERMISSIONS;
    `reason` is a fixed phrase naming the check that failed (never the owner id).
    """

    def __init__(self, code: Code, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


class OwnershipClock(Protocol):
    """The two clocks ownership reads: wall time for lock mtimes, monotonic time for refresh age."""

    def monotonic_ns(self) -> int: ...

    def time_ns(self) -> int: ...


class SystemClock:
    """`time.monotonic_ns` and `time.time_ns`."""

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()

    def time_ns(self) -> int:
        return time.time_ns()


class RefreshTimer(Protocol):
    """The refresh timer of one tenure: calls its tick every interval until the tick says stop.

    `cancel()` never blocks (it may be called while the owner's mutex is held); `join()` waits at
    most `timeout_s` for an in-flight tick.
    """

    def start(self) -> None: ...

    def cancel(self) -> None: ...

    def join(self, timeout_s: float) -> None: ...


#: `(interval_s, tick) -> RefreshTimer`, not started yet.
TimerFactory = Callable[[float, Callable[[], bool]], RefreshTimer]


class DaemonRefreshTimer:
    """One daemon thread that waits `interval_s` on an Event, then ticks, until stopped (W-4, L-3).

    The next wait starts only after a tick settled (L-4). Constructing it starts nothing (L-1).
    """

    def __init__(self, interval_s: float, tick: Callable[[], bool]) -> None:
        self._interval_s = interval_s
        self._tick = tick
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._run, name=REFRESH_THREAD_NAME, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        self._cancelled.set()

    def join(self, timeout_s: float) -> None:
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._cancelled.wait(self._interval_s):
            if not self._tick():
                return


@dataclass(slots=True)
class _Tenure:
    """What this owner holds: the lock it created and the last mtime it wrote."""

    owner_id: bytes = field(repr=False)
    lock_dev: int
    lock_ino: int
    owner_ino: int
    mtime_ns: int  # the lock directory mtime as stored after our last write
    refreshed_mono_ns: int  # monotonic time of the last successful refresh (or the acquire)


def _errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, "OSError")


def _permissions(reason: str, exc: OSError | None = None) -> JournalOwnershipError:
    detail = f"{reason} ({_errno_name(exc)})" if exc is not None else reason
    return JournalOwnershipError(Code.JOURNAL_PERMISSIONS, detail)


def _locked(reason: str) -> JournalOwnershipError:
    return JournalOwnershipError(Code.JOURNAL_LOCKED, reason)


def _write_private_file(dir_fd: int, name: str, data: bytes) -> None:
    """Create `name` in the directory `dir_fd` with `0600` (F-1, whatever the umask) and `data`."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, FILE_MODE, dir_fd=dir_fd)
    try:
        os.fchmod(fd, FILE_MODE)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _read_lock_file(lock_fd: int, name: str, limit: int) -> bytes | None:
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=lock_fd
        )
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_lock_contents(lock: Path) -> tuple[bytes | None, LockOwnerIdentity | None]:
    """A contender's look into a lock: its owner id and recorded identity (None: unreadable)."""
    try:
        lock_fd = os.open(lock, _DIR_OPEN_FLAGS)
    except OSError:
        return None, None
    try:
        owner_id = _read_lock_file(lock_fd, OWNER_FILE_NAME, _OWNER_ID_MAX_CHARS)
        raw = _read_lock_file(lock_fd, IDENTITY_FILE_NAME, _IDENTITY_MAX_BYTES)
    finally:
        os.close(lock_fd)
    identity = decode_identity(raw) if raw is not None and len(raw) <= _IDENTITY_MAX_BYTES else None
    return owner_id, identity


def _rename_back(moved: Path, lock: Path) -> None:
    """D-10: put a moved lock back, never over an entry that took its name meanwhile (a plain
    `rename` would silently replace an empty directory another contender just made)."""
    if os.path.lexists(lock):
        raise FileExistsError(errno.EEXIST, "the lock name is taken")
    os.rename(moved, lock)


def _remove_lock_tree(path: Path) -> None:
    """Best effort: unlink the non-directory entries of a lock directory, then the directory.

    Failures are ignored: a stale-lock leftover is removed by the next owner's F-12 pass.
    """
    with contextlib.suppress(OSError):
        with os.scandir(path) as entries:
            names = [e.name for e in entries if not e.is_dir(follow_symlinks=False)]
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path / name)
        os.rmdir(path)


class JournalOwnership:
    """One owner of a journal root: `acquire()`, `verify()` / `require_owned()`, `refresh()`,
    `release()`; see the module docstring. Thread-safe; constructing it does no I/O (L-1)."""

    def __init__(
        self,
        root: Path,
        *,
        stale_window_ms: int = DEFAULT_STALE_WINDOW_MS,
        clock: OwnershipClock | None = None,
        owner_id_factory: Callable[[], str] = new_owner_id,
        timer_factory: TimerFactory = DaemonRefreshTimer,
        host: HostProbe | None = None,
    ) -> None:
        root = Path(root)
        if not root.is_absolute():
            raise ValueError("journal root: must be an absolute path (F-1)")
        self._window_ms = check_in_range(
            stale_window_ms, HARD_LIMITS.journal_stale_window_ms, field="stale_window_ms"
        )
        self._root = root
        self._lock_path = root / LOCK_DIR_NAME
        self._window_ns = self._window_ms * _NS_PER_MS
        self._clock: OwnershipClock = clock if clock is not None else SystemClock()
        self._owner_id_factory = owner_id_factory
        self._timer_factory = timer_factory
        self._host: HostProbe = host if host is not None else ProcHost()
        self._mutex = threading.Lock()
        self._state = OwnershipState.UNOWNED
        self._tenure: _Tenure | None = None
        self._timer: RefreshTimer | None = None
        self._compromise_reason = ""

    # -- read-only views ---------------------------------------------------------------------

    @property
    def root(self) -> Path:
        return self._root

    @property
    def lock_path(self) -> Path:
        return self._lock_path

    @property
    def stale_window_ms(self) -> int:
        return self._window_ms

    @property
    def refresh_interval_s(self) -> float:
        """W-4: the stale window divided by `journal_refresh_divisor` (half the window)."""
        return self._window_ms / HARD_LIMITS.journal_refresh_divisor / 1000

    @property
    def state(self) -> OwnershipState:
        return self._state

    def __repr__(self) -> str:
        return (
            f"JournalOwnership(root={str(self._root)!r}, state={self._state.value}, "
            f"stale_window_ms={self._window_ms})"
        )

    # -- operations --------------------------------------------------------------------------

    def acquire(self) -> None:
        """W-2/W-3, F-1, F-12: take the lock or fail (`JOURNAL_LOCKED`, `JOURNAL_PERMISSIONS`).

        A failed acquire leaves the state as it was. In `owned` this is a verification; in
        `compromised` it fails `JOURNAL_COMPROMISED` (no re-acquire, W-6).
        """
        with self._mutex:
            if self._state is OwnershipState.OWNED:
                self._verify_locked()
                return
            if self._state is OwnershipState.COMPROMISED:
                raise self._refusal()
            owner_id = self._new_owner_id()
            self._check_root()
            tenure = self._create_lock(owner_id)
            try:
                self._remove_leftovers()
            except OSError as exc:
                _remove_lock_tree(self._lock_path)
                raise _permissions("cannot clean leftover temporaries", exc) from None
            self._tenure = tenure
            self._transition(OwnershipTrigger.ACQUIRED)
            timer = self._timer_factory(self.refresh_interval_s, self._tick)
            try:
                timer.start()
            except BaseException:
                self._remove_own_lock()
                self._tenure = None
                self._transition(OwnershipTrigger.RELEASED)
                raise
            self._timer = timer

    def verify(self) -> None:
        """W-5: check the lock now; any failure moves to `compromised` and raises."""
        with self._mutex:
            self._verify_locked()

    def require_owned(self) -> None:
        """W-1: what every journal operation calls first (a W-5 verification)."""
        self.verify()

    def refresh(self) -> None:
        """W-4: verify, then set the lock directory mtime to now. The timer calls this."""
        with self._mutex:
            self._verify_locked(stamp=True)

    def release(self) -> None:
        """W-7: stop the timer, verify, remove the owner file and the lock directory.

        In `released` it does nothing; in `unowned` it fails `JOURNAL_NOT_OWNED`; in `compromised`
        (or when the verification fails now) it fails `JOURNAL_COMPROMISED` and leaves the lock as
        it is (W-6).
        """
        with self._mutex:
            if self._state is OwnershipState.RELEASED:
                return
            if self._state is not OwnershipState.OWNED:
                raise self._refusal()
            timer, self._timer = self._timer, None
            if timer is not None:
                timer.cancel()
        if timer is not None:
            timer.join(_TIMER_JOIN_TIMEOUT_S)  # outside the mutex: an in-flight tick needs it
        with self._mutex:
            if self.state is OwnershipState.RELEASED:  # a concurrent release() finished first
                return
            self._verify_locked()
            try:
                with contextlib.suppress(FileNotFoundError):  # E-2: absent where unknown
                    os.unlink(self._lock_path / IDENTITY_FILE_NAME)
                os.unlink(self._lock_path / OWNER_FILE_NAME)
                os.rmdir(self._lock_path)
            except OSError:
                self._compromise("the lock could not be removed")
                raise self._refusal() from None
            self._tenure = None
            self._transition(OwnershipTrigger.RELEASED)

    # -- state -------------------------------------------------------------------------------

    def _transition(self, trigger: OwnershipTrigger) -> None:
        after = next_ownership_state(self._state, trigger)
        if after is None:  # pragma: no cover - every call site checks the state first
            raise RuntimeError(f"ownership: {trigger} is not allowed in {self._state}")
        self._state = after

    def _refusal(self) -> JournalOwnershipError:
        state = self._state
        if state is OwnershipState.COMPROMISED:
            reason = f"ownership is compromised: {self._compromise_reason}"
        elif state is OwnershipState.RELEASED:
            reason = "ownership was released"
        else:
            reason = "ownership was not acquired"
        return JournalOwnershipError(REFUSAL_CODES[state], reason)

    def _compromise(self, reason: str) -> None:
        self._transition(OwnershipTrigger.VERIFICATION_FAILED)
        self._compromise_reason = reason
        if self._timer is not None:
            self._timer.cancel()  # W-6: a compromised owner refreshes nothing

    def _verify_locked(self, *, stamp: bool = False) -> None:
        if self._state is not OwnershipState.OWNED or self._tenure is None:
            raise self._refusal()
        reason = self._check(self._tenure, stamp=stamp)
        if reason is not None:
            self._compromise(reason)
            raise self._refusal()
        self._transition(OwnershipTrigger.VERIFIED)

    def _tick(self) -> bool:
        """One timer refresh; False stops the timer (the owner is no longer `owned`)."""
        try:
            self.refresh()
        except JournalOwnershipError:
            return False
        except Exception:  # fail closed whatever broke
            with self._mutex:
                if self._state is OwnershipState.OWNED:
                    self._compromise("the refresh failed")
            return False
        return True

    # -- W-5 ---------------------------------------------------------------------------------

    def _check(self, tenure: _Tenure, *, stamp: bool) -> str | None:
        """None if the lock is still ours (and, with `stamp`, its mtime was set); else why not."""
        if self._clock.monotonic_ns() - tenure.refreshed_mono_ns > self._window_ns:
            return "the last successful refresh is older than the stale window"
        try:
            lock_fd = os.open(self._lock_path, _DIR_OPEN_FLAGS)
        except FileNotFoundError:
            return "the lock directory is missing"
        except OSError:
            return "the lock directory cannot be opened"
        try:
            st = os.fstat(lock_fd)
            if (st.st_dev, st.st_ino) != (tenure.lock_dev, tenure.lock_ino):
                return "the lock directory was replaced"
            if st.st_mtime_ns != tenure.mtime_ns:
                return "the lock directory mtime changed"
            try:
                owner_fd = os.open(OWNER_FILE_NAME, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=lock_fd)
            except OSError:
                return "the owner file is missing"
            try:
                owner_ino = os.fstat(owner_fd).st_ino
                content = os.read(owner_fd, len(tenure.owner_id) + 1)
            finally:
                os.close(owner_fd)
            if not secrets.compare_digest(content, tenure.owner_id):
                return "the lock directory holds another owner id"
            if owner_ino != tenure.owner_ino:
                return "the owner file was replaced"
            if stamp:
                mtime_ns = self._clock.time_ns()
                os.utime(lock_fd, ns=(mtime_ns, mtime_ns))
                tenure.mtime_ns = os.fstat(lock_fd).st_mtime_ns
                tenure.refreshed_mono_ns = self._clock.monotonic_ns()
        except OSError:
            return "the lock directory cannot be read or stamped"
        finally:
            os.close(lock_fd)
        return None

    # -- acquire steps -----------------------------------------------------------------------

    def _new_owner_id(self) -> bytes:
        value = self._owner_id_factory()
        if (
            not isinstance(value, str)
            or not 1 <= len(value) <= _OWNER_ID_MAX_CHARS
            or not value.isascii()
            or not value.isprintable()
        ):
            raise ValueError(
                f"owner_id_factory: must return 1..{_OWNER_ID_MAX_CHARS} printable ASCII characters"
            )
        return value.encode("ascii")

    def _check_root(self) -> None:
        """F-1: the root exists (created `0700` if missing) and is a private directory of ours."""
        root = self._root
        try:
            try:
                st = os.lstat(root)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):  # a concurrent creator: checked below
                    os.mkdir(root, DIR_MODE)
                    fd = os.open(root, _DIR_OPEN_FLAGS)
                    try:
                        os.fchmod(fd, DIR_MODE)  # whatever the umask took away
                    finally:
                        os.close(fd)
                st = os.lstat(root)
        except OSError as exc:
            raise _permissions("the root cannot be created or inspected", exc) from None
        if stat.S_ISLNK(st.st_mode):
            raise _permissions("the root is a symlink")
        if not stat.S_ISDIR(st.st_mode):
            raise _permissions("the root is not a directory")
        if st.st_uid != os.geteuid():
            raise _permissions("the root is not owned by the effective uid")
        if stat.S_IMODE(st.st_mode) & _GROUP_OTHER_BITS:
            raise _permissions("the root has group or other permission bits")

    def _create_lock(self, owner_id: bytes) -> _Tenure:
        """W-2/W-3: mkdir the lock; if it exists, reclaim it when stale and retry once."""
        for retry in (False, True):
            try:
                os.mkdir(self._lock_path, DIR_MODE)
            except FileExistsError:
                if retry:
                    raise _locked("another owner took the lock first") from None
                self._reclaim_if_stale()
                continue
            except OSError as exc:
                raise _permissions("the lock directory cannot be created", exc) from None
            return self._initialise_lock(owner_id)
        raise AssertionError("unreachable")  # pragma: no cover

    def _check_lock_shape(self, st: os.stat_result) -> None:
        """J-3: a lock entry this code cannot have made is foreign, never reclaimed."""
        if stat.S_ISLNK(st.st_mode):
            raise _permissions("the lock is a symlink")
        if not stat.S_ISDIR(st.st_mode):
            raise _permissions("the lock is not a directory")
        if st.st_uid != os.geteuid():
            raise _permissions("the lock is not owned by the effective uid")
        if stat.S_IMODE(st.st_mode) != DIR_MODE:
            raise _permissions("the lock directory mode is not 0700")

    def _reclaim_if_stale(self) -> None:
        """W-3, E-2, D-10: raise `JOURNAL_LOCKED` unless the kernel judges the lock stale; move a
        stale one away and remove it only if it is the lock judged, else put it back."""
        lock = self._lock_path
        try:
            st = os.lstat(lock)
        except FileNotFoundError:
            return  # released meanwhile: the one retry of mkdir decides
        except OSError as exc:
            raise _permissions("the lock cannot be inspected", exc) from None
        self._check_lock_shape(st)
        owner_id, recorded = _read_lock_contents(lock)
        judged = LockSnapshot(owner_id, st.st_mtime_ns, st.st_dev, st.st_ino)
        observed = (
            self._host.observe(recorded.pid)
            if recorded is not None
            else HostObservation(None, None, ProcessPresence.UNKNOWN)
        )
        judgment = judge_contended_lock(
            recorded,
            observed,
            age_ns=self._clock.time_ns() - st.st_mtime_ns,
            window_ns=self._window_ns,
        )
        if judgment.action is not LockAction.RECLAIM:
            raise _locked("the lock is held by a live owner")
        moved = self._root / f"{STALE_LOCK_PREFIX}{secrets.token_hex(8)}"
        try:
            os.rename(lock, moved)
        except FileNotFoundError:
            raise _locked("another contender reclaimed the stale lock first") from None
        except OSError as exc:
            raise _permissions("the stale lock cannot be moved away", exc) from None
        try:
            after = os.lstat(moved)
            moved_owner_id, _ = _read_lock_contents(moved)
            seen = LockSnapshot(moved_owner_id, after.st_mtime_ns, after.st_dev, after.st_ino)
        except OSError:
            seen = None  # unreadable: it cannot be shown to be the lock judged
        if seen is not None and moved_lock_action(judged, seen) is MovedLockAction.DELETE:
            _remove_lock_tree(moved)
            return
        # D-10: between the look and the rename another contender replaced the stale lock with
        # its own. Put it back (its owner stays owned: same inode, owner id and mtime); if the
        # name was taken meanwhile, the moved lock stays for the next owner's F-12 pass.
        with contextlib.suppress(OSError):
            _rename_back(moved, lock)
        raise _locked("the lock changed while it was being reclaimed")

    def _initialise_lock(self, owner_id: bytes) -> _Tenure:
        """Write the owner file into the lock directory just created, then stamp its mtime."""
        try:
            lock_fd = os.open(self._lock_path, _DIR_OPEN_FLAGS)
            try:
                os.fchmod(lock_fd, DIR_MODE)
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                owner_fd = os.open(OWNER_FILE_NAME, flags, FILE_MODE, dir_fd=lock_fd)
                try:
                    os.fchmod(owner_fd, FILE_MODE)  # independent of the umask (F-1)
                    view = memoryview(owner_id)
                    while view:
                        view = view[os.write(owner_fd, view) :]
                    owner_ino = os.fstat(owner_fd).st_ino
                finally:
                    os.close(owner_fd)
                identity = self._host.own_identity()
                if identity is not None:  # E-2: without it the stale window applies
                    _write_private_file(lock_fd, IDENTITY_FILE_NAME, encode_identity(identity))
                mtime_ns = self._clock.time_ns()
                os.utime(lock_fd, ns=(mtime_ns, mtime_ns))
                st = os.fstat(lock_fd)
            finally:
                os.close(lock_fd)
        except OSError as exc:
            _remove_lock_tree(self._lock_path)
            raise _permissions("the lock directory cannot be initialised", exc) from None
        return _Tenure(
            owner_id=owner_id,
            lock_dev=st.st_dev,
            lock_ino=st.st_ino,
            owner_ino=owner_ino,
            mtime_ns=st.st_mtime_ns,
            refreshed_mono_ns=self._clock.monotonic_ns(),
        )

    def _remove_leftovers(self) -> None:
        """F-12: unlink leftover temporaries and remove leftover stale locks."""
        with os.scandir(self._root) as entries:
            found = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        for name, is_dir in found:
            path = self._root / name
            if is_stale_lock_name(name) and is_dir:
                _remove_lock_tree(path)
            elif (is_stale_lock_name(name) or is_leftover_temporary(name)) and not is_dir:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)

    def _remove_own_lock(self) -> None:
        with contextlib.suppress(OSError):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._lock_path / IDENTITY_FILE_NAME)
            os.unlink(self._lock_path / OWNER_FILE_NAME)
            os.rmdir(self._lock_path)
