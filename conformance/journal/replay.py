"""Replay journal traces against a journal adapter and report the first divergence (SPEC §7).

A journal adapter joins the suite through a `JournalBinding`: it opens an unowned adapter
instance on a root with an armable fault seam, reads the stored bytes through a backdoor that
bypasses the adapter (the file adapter's directory, the SQLite adapter's database file opened
read-only) and writes damaged bytes through it. Two bindings are built in:

    file     runners/worker/journal/file.py `FileJournal` on a real temporary directory; faults
             through its `_Os` seam (FJ-9): a crash is a non-`OSError` exception at a step, an
             I/O error an `OSError(errno)` raised by the step.
    sqlite   runners/worker/journal/sqlite.py `SqliteJournal` on a real database file; faults
             through its `fault_hook` (SJ-7): a crash at `checked`, `written` or `committed`, an
             I/O error a `sqlite3.OperationalError` with SQLite's code for the errno.

Adapter-neutral fault points map to the seams like this (`conformance.journal.trace.CRASH_POINTS`):

    point     file create        file replace       file remove        sqlite
    start     open_temporary <   open_temporary <   unlink <           checked
    write     write >            write >            -                  written
    sync      link <             rename <           -                  written
    publish   link >             rename >           unlink >           committed
    finish    fsync_directory >  fsync_directory >  fsync_directory >  committed
    (< before the call, > after it; SQLite has no point between its write and COMMIT)

and `io_error` at `write` / `fsync` / `publish` raises before `write` / `fsync` / `link`, `rename`
or `unlink` (file: reason `<step>:<ERRNO>`), or at `written` with SQLITE_FULL (ENOSPC),
SQLITE_IOERR_WRITE (EIO), SQLITE_READONLY (EACCES) or, at `fsync`, SQLITE_IOERR_FSYNC; the
replayer checks the adapter reports that reason.

A `JournalWorld` is what a trace runs against: the `main` instance, a `rival` owner of the same
root (a second real process for the adapters), restarts and the backdoor. A binding with the
`retention` capability also gets a receipt store: a real `CompletionReceiptStore` in a private
directory beside the root (`<root>-receipts`, created at the first `receipt`, `retention` or
receipts `tamper` step), and a `retention` step runs the Worker runtime's own
`runners.worker.retention.TerminalRetention` over the main instance and that store, both
wrapped so that every call it makes is logged in order (`LoggedJournal`, `LoggedReceipts`).
`replay(trace,
make_world)` performs every step, compares outcome, result, the untouched claim and the full
projection, and reports the first divergence with a field-level diff.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import importlib
import multiprocessing
import os
import shutil
import sqlite3
import stat
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar, cast

from conformance.journal.reference import ReferenceWorld
from conformance.journal.trace import (
    JOURNAL_CORPUS,
    RECEIPT_TAMPERS,
    RECEIPTS_MODE_STRAY,
    ROOT_MODE_STRAY,
    TAMPERS,
    Effects,
    JournalCommand,
    JournalConfig,
    JournalFault,
    JournalProjection,
    JournalStep,
    JournalTrace,
    LoggedJournal,
    LoggedReceipts,
    Operation,
    OpResult,
    RetentionCall,
    SimulatedCrash,
    TraceJournal,
    call_store,
    damaged,
    decode_operation,
    journal_diff,
    loads,
    outcome_vector,
    projection,
    retention_result,
    step_label,
)
from conformance.report import Outcome, Summary
from conformance.run.corpus import read_text, spec_id_of, trace_paths
from conformance.run.replay import Divergence, TraceResult
from conformance.run.trace import canonical
from runners.worker.journal.file import FileJournal, SteppedOs
from runners.worker.journal.lock import (
    DEFAULT_STALE_WINDOW_MS,
    DIR_MODE,
    LOCK_DIR_NAME,
    JournalOwnership,
)
from runners.worker.journal.port import JournalError
from runners.worker.journal.sqlite import DATABASE_NAME, SqliteJournal
from runners.worker.posix.receipts import CompletionReceiptStore, Receipt, ReceiptStoreError
from runners.worker.retention import TerminalRetention

__all__ = [
    "ADAPTERS",
    "FileBinding",
    "JournalBinding",
    "JournalDivergence",
    "JournalTraceResult",
    "JournalWorld",
    "ManualTimers",
    "OwnershipBinding",
    "OwnershipEnv",
    "Performed",
    "RealWorld",
    "SqliteBinding",
    "TraceClock",
    "journal_trace_paths",
    "perform",
    "read_journal_trace",
    "replay",
    "run_journal_corpus",
    "world_factory",
]

#: The adapters `qlk conform --component journal --journal-adapter all` replays against.
ADAPTERS: Final = ("file", "sqlite")
WAIT_S: Final = 30.0
_RECORD_NAME_LENGTH: Final = 64 + len(".json")
_HEX: Final = frozenset("0123456789abcdef")


# -- the world a trace runs against ----------------------------------------------------------
class JournalWorld(Protocol):
    name: str
    capabilities: frozenset[str]

    def call(self, actor: str, command: JournalCommand, fault: JournalFault | None) -> OpResult: ...

    def concurrent(self, commands: Sequence[JournalCommand]) -> list[OpResult]: ...

    def race_acquire(self) -> tuple[OpResult, OpResult]: ...

    def reopen(self, stale_window_ms: int | None = None) -> OpResult: ...

    def corrupt(self, offer_id: str, damage: str) -> OpResult: ...

    def advance(self, ms: int) -> OpResult: ...

    def tamper(self, what: str) -> OpResult: ...

    def refresh(self) -> OpResult: ...

    def timers(self) -> OpResult: ...

    def receipt(self, receipt: Receipt) -> OpResult: ...

    def retention(self, call: RetentionCall) -> OpResult: ...

    def project(self) -> JournalProjection: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Performed:
    """What one step delivered, in the terms of its expectation."""

    kind: str
    code: str | None = None
    result: Any = None
    touched: bool = False
    outcomes: tuple[str, ...] | None = None  # concurrent steps
    reason: str | None = None
    expected_reason: str | None = None


def _performed(result: OpResult) -> Performed:
    return Performed(
        result.kind,
        result.code,
        result.result,
        result.touched,
        None,
        result.reason,
        result.expected_reason,
    )


def perform(
    world: JournalWorld,
    command: JournalCommand | None,
    fault: JournalFault | None,
    aliases: dict[str, str],
) -> Performed:
    """Apply one step to a world: the same function records (on the reference) and replays.
    `aliases` maps `winner`/`loser` to the actors of the last `race_acquire`."""
    if fault is not None and fault.kind == "reopen":
        return _performed(world.reopen(fault.stale_window_ms))
    if fault is not None and fault.kind == "clock":
        assert fault.ms is not None
        return _performed(world.advance(fault.ms))
    if fault is not None and fault.kind == "tamper":
        assert fault.what is not None
        return _performed(world.tamper(fault.what))
    if fault is not None and fault.kind == "corrupt":
        assert fault.offer_id is not None
        assert fault.damage is not None
        return _performed(world.corrupt(fault.offer_id, fault.damage))
    if command is None:
        raise ValueError("a step without a command must be an environment fault")
    if command.name == "refresh":
        return _performed(world.refresh())
    if command.name == "timers":
        return _performed(world.timers())
    if command.name == "receipt":
        receipt = decode_operation(command).receipt
        assert receipt is not None
        return _performed(world.receipt(receipt))
    if command.name == "retention":
        call = decode_operation(command).retention
        assert call is not None
        return _performed(world.retention(call))
    if command.name == "batch":
        results = [world.call("main", c, None) for c in command.operations]
        return Performed(
            "batch", None, list(outcome_vector(results)), any(r.touched for r in results)
        )
    if command.name == "concurrent":
        vector = outcome_vector(world.concurrent(command.operations))
        return Performed("concurrent", outcomes=vector)
    if command.name == "race_acquire":
        main, rival = world.race_acquire()
        aliases.clear()
        if main.kind == "ok" and rival.kind != "ok":
            aliases.update(winner="main", loser="rival")
        elif rival.kind == "ok" and main.kind != "ok":
            aliases.update(winner="rival", loser="main")
        return Performed("concurrent", outcomes=(main.outcome, rival.outcome))
    actor = command.actor
    if actor in ("winner", "loser"):
        if actor not in aliases:
            raise ValueError(f"actor {actor}: no race_acquire had one winner before this step")
        actor = aliases[actor]
    return _performed(world.call(actor, command, fault))


# -- bindings: one per adapter ---------------------------------------------------------------
class Instance(Protocol):
    """One adapter instance (unowned when opened) with its fault seam."""

    @property
    def store(self) -> TraceJournal: ...

    @property
    def touched(self) -> bool:
        """A write point of the adapter was reached since the last `arm`."""
        ...

    @property
    def fired(self) -> bool: ...

    def arm(self, operation: str, fault: JournalFault | None) -> None: ...

    def close(self) -> None: ...


StoredEntries = list[tuple[str, bytes, int | None]]


class JournalBinding(Protocol):
    """How the suite drives one journal adapter: instances, backdoor reads and writes."""

    name: str
    spec: str  # what a rival process passes to `resolve_binding`
    capabilities: frozenset[str]

    def open(self, root: Path, capacity: int) -> Instance: ...

    def stored(self, root: Path) -> tuple[StoredEntries, list[str]]:
        """The stored bytes of every record (with a revision kept beside them, if any) and the
        visible entries that are not records, read without the adapter's code."""
        ...

    def write_raw(self, root: Path, offer_id: str, data: bytes) -> None: ...

    def expected_reason(self, operation: str, fault: JournalFault) -> str | None:
        """The reason the adapter must report for an `io_error` this binding injected."""
        ...


class OwnershipBinding(JournalBinding, Protocol):
    """A binding with the `ownership` capability: its instances take the world's clock, refresh
    timers and stale window (`OwnershipEnv`), and its backdoor can tamper with the root."""

    def open_owned(self, root: Path, capacity: int, env: OwnershipEnv) -> Instance: ...

    def tamper(self, root: Path, what: str) -> None: ...

    def root_private(self, root: Path) -> bool:
        """The root is `0700` (F-1); a missing root counts as private."""
        ...


class TraceClock:
    """The world's clocks (`runners.worker.journal.lock.OwnershipClock`): frozen at the values
    the world was created with, moved only by a trace's `clock` steps (`advance`)."""

    def __init__(self, wall_ns: int, mono_ns: int, offset_ms: int = 0) -> None:
        self.wall_ns = wall_ns
        self.mono_ns = mono_ns
        self.offset_ns = offset_ms * 1_000_000

    def advance(self, ms: int) -> None:
        self.offset_ns += ms * 1_000_000

    def time_ns(self) -> int:
        return self.wall_ns + self.offset_ns

    def monotonic_ns(self) -> int:
        return self.mono_ns + self.offset_ns


class ManualTimer:
    """A refresh timer that fires only when a trace's `refresh` step says so."""

    def __init__(self, interval_s: float, tick: Callable[[], bool]) -> None:
        self.interval_s = interval_s
        self.tick = tick
        self.started = False
        self.stopped = False  # cancelled, or a tick returned False (as the daemon timer stops)

    def start(self) -> None:
        self.started = True

    def cancel(self) -> None:
        self.stopped = True

    def join(self, timeout_s: float) -> None:
        return None

    def fire(self) -> bool:
        running = self.tick()
        if not running:
            self.stopped = True
        return running


class ManualTimers:
    """The timer factory of one adapter instance (`TimerFactory`): every timer it made."""

    def __init__(self) -> None:
        self.made: list[ManualTimer] = []

    def __call__(self, interval_s: float, tick: Callable[[], bool]) -> ManualTimer:
        timer = ManualTimer(interval_s, tick)
        self.made.append(timer)
        return timer

    def live(self) -> ManualTimer | None:
        return next((t for t in reversed(self.made) if t.started and not t.stopped), None)


@dataclass(frozen=True, slots=True)
class OwnershipEnv:
    """What an `ownership` binding builds an instance's `JournalOwnership` from."""

    clock: TraceClock
    timers: ManualTimers
    stale_window_ms: int


def tamper_root(root: Path, what: str) -> None:
    """The `tamper` backdoor of both built-in adapters (they share the W-2 lock layout)."""
    lock = root / LOCK_DIR_NAME
    if what == "lock_removed":
        shutil.rmtree(lock)
    elif what == "lock_mtime_changed":
        mtime = lock.stat().st_mtime_ns - 1_000_000_000
        os.utime(lock, ns=(mtime, mtime))
    elif what == "root_loosened":
        os.chmod(root, 0o750)  # noqa: S103 - the tamper is a root with group bits (F-1)
    elif what == "root_restored":
        os.chmod(root, DIR_MODE)
    else:
        raise ValueError(f"tamper: must be one of {TAMPERS}")


def _root_private(root: Path) -> bool:
    return not root.is_dir() or stat.S_IMODE(root.lstat().st_mode) == DIR_MODE


def _ownership(root: Path, env: OwnershipEnv) -> JournalOwnership:
    return JournalOwnership(
        root, stale_window_ms=env.stale_window_ms, clock=env.clock, timer_factory=env.timers
    )


def _crash() -> BaseException:
    return SimulatedCrash("simulated crash")


def _os_error(name: str | None) -> Callable[[], BaseException]:
    number = getattr(errno, name or "EIO")
    return lambda: OSError(number, os.strerror(number))


_PUBLISH: Final = {"create": "link", "replace": "rename", "remove": "unlink"}


def _file_plan(operation: str, fault: JournalFault) -> tuple[str, str, Callable[[], BaseException]]:
    """(step of `_Os`, before/after, the exception) for a neutral fault (module docstring)."""
    if fault.kind == "io_error":
        step = {"write": "write", "fsync": "fsync", "publish": _PUBLISH[operation]}[str(fault.at)]
        return step, "before", _os_error(fault.errno)
    points = {
        "start": ("unlink" if operation == "remove" else "open_temporary", "before"),
        "write": ("write", "after"),
        "sync": (_PUBLISH[operation], "before"),
        "publish": (_PUBLISH[operation], "after"),
        "finish": ("fsync_directory", "after"),
    }
    step, when = points[str(fault.at)]
    return step, when, _crash


T = TypeVar("T")


class _SeamOs(SteppedOs):
    """The file adapter's real OS calls, recorded; one planned fault fires once."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.plan: tuple[str, str, Callable[[], BaseException]] | None = None
        self.fired = False

    def _at(self, step: str, call: Callable[[], T]) -> T:
        self.calls.append(step)
        plan = self.plan
        hit = plan is not None and plan[0] == step and not self.fired
        if hit and plan is not None and plan[1] == "before":
            self.fired = True
            raise plan[2]()
        result = call()
        if hit and plan is not None and plan[1] == "after":
            self.fired = True
            raise plan[2]()
        return result


class _FileInstance:
    def __init__(self, root: Path, capacity: int, env: OwnershipEnv | None = None) -> None:
        self._seam = _SeamOs()
        ownership = None if env is None else _ownership(root, env)
        self._store = FileJournal(root, ownership, capacity=capacity, _os=self._seam)

    @property
    def store(self) -> TraceJournal:
        return self._store

    @property
    def touched(self) -> bool:
        return bool(self._seam.calls)

    @property
    def fired(self) -> bool:
        return self._seam.fired

    def arm(self, operation: str, fault: JournalFault | None) -> None:
        self._seam.calls.clear()
        self._seam.fired = False
        self._seam.plan = None if fault is None else _file_plan(operation, fault)

    def close(self) -> None:
        return None


def _private_mode(path: Path) -> bool:
    return stat.S_IMODE(path.lstat().st_mode) == 0o600


class FileBinding:
    """The file adapter: `<root>/<offer_id>.json` read and rewritten directly."""

    name = "file"
    spec = "file"
    capabilities = frozenset(
        {"faults", "corruption", "second_process", "concurrency", "ownership", "retention"}
    )

    def open(self, root: Path, capacity: int) -> Instance:
        return _FileInstance(root, capacity)

    def open_owned(self, root: Path, capacity: int, env: OwnershipEnv) -> Instance:
        return _FileInstance(root, capacity, env)

    def tamper(self, root: Path, what: str) -> None:
        tamper_root(root, what)

    def root_private(self, root: Path) -> bool:
        return _root_private(root)

    def stored(self, root: Path) -> tuple[StoredEntries, list[str]]:
        entries: StoredEntries = []
        strays: list[str] = []
        if not root.is_dir():
            return entries, strays
        for entry in sorted(os.scandir(root), key=lambda e: e.name):
            name = entry.name
            if name.startswith("."):  # the lock, stale locks, temporaries: never visible (F-8)
                continue
            is_record = (
                len(name) == _RECORD_NAME_LENGTH
                and name.endswith(".json")
                and set(name[:64]) <= _HEX
            )
            path = root / name
            if not is_record or not entry.is_file(follow_symlinks=False):
                strays.append(name)
                continue
            if not _private_mode(path):
                strays.append(f"{name}:mode")
            entries.append((name[:64], path.read_bytes(), None))
        return entries, strays

    def write_raw(self, root: Path, offer_id: str, data: bytes) -> None:
        """Rewrite the content in place: inode, mode and owner stay, only the bytes change."""
        fd = os.open(root / f"{offer_id}.json", os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)

    def expected_reason(self, operation: str, fault: JournalFault) -> str | None:
        if fault.kind != "io_error":
            return None
        return f"{_file_plan(operation, fault)[0]}:{fault.errno}"


#: (point, errno) -> the SQLite error the binding raises at `written`.
_SQLITE_ERRORS: Final[dict[tuple[str, str], tuple[str, int]]] = {
    ("write", "ENOSPC"): ("SQLITE_FULL", 13),
    ("write", "EIO"): ("SQLITE_IOERR_WRITE", 778),
    ("write", "EACCES"): ("SQLITE_READONLY", 8),
    ("fsync", "ENOSPC"): ("SQLITE_IOERR_FSYNC", 1034),
    ("fsync", "EIO"): ("SQLITE_IOERR_FSYNC", 1034),
    ("fsync", "EACCES"): ("SQLITE_IOERR_FSYNC", 1034),
    ("publish", "ENOSPC"): ("SQLITE_FULL", 13),
    ("publish", "EIO"): ("SQLITE_IOERR_WRITE", 778),
    ("publish", "EACCES"): ("SQLITE_READONLY", 8),
}
_SQLITE_POINTS: Final = {
    "start": "checked",
    "write": "written",
    "sync": "written",
    "publish": "committed",
    "finish": "committed",
}


def _sqlite_error(name: str, number: int) -> Callable[[], BaseException]:
    def make() -> BaseException:
        exc = sqlite3.OperationalError("injected storage error")
        exc.sqlite_errorcode = number
        exc.sqlite_errorname = name
        return exc

    return make


class _SqliteInstance:
    def __init__(self, root: Path, capacity: int, env: OwnershipEnv | None = None) -> None:
        self._seen: list[str] = []
        self._plan: tuple[str, Callable[[], BaseException]] | None = None
        self._fired = False
        ownership = None if env is None else _ownership(root, env)
        self._store = SqliteJournal(root, ownership, capacity=capacity, fault_hook=self._hook)

    def _hook(self, step: str, conn: sqlite3.Connection) -> None:
        self._seen.append(step)
        plan = self._plan
        if plan is not None and plan[0] == step and not self._fired:
            self._fired = True
            raise plan[1]()

    @property
    def store(self) -> TraceJournal:
        return self._store

    @property
    def touched(self) -> bool:
        return any(step != "begun" for step in self._seen)

    @property
    def fired(self) -> bool:
        return self._fired

    def arm(self, operation: str, fault: JournalFault | None) -> None:
        self._seen.clear()
        self._fired = False
        if fault is None:
            self._plan = None
        elif fault.kind == "io_error":
            self._plan = (
                "written",
                _sqlite_error(*_SQLITE_ERRORS[(str(fault.at), str(fault.errno))]),
            )
        else:
            self._plan = (_SQLITE_POINTS[str(fault.at)], _crash)

    def close(self) -> None:
        self._store.close()


class SqliteBinding:
    """The SQLite adapter: the `journal_records` table read through a read-only connection of
    its own, damaged bytes written with the CHECK constraints off (a damaged disk)."""

    name = "sqlite"
    spec = "sqlite"
    capabilities = frozenset(
        {"faults", "corruption", "second_process", "concurrency", "ownership", "retention"}
    )

    def open(self, root: Path, capacity: int) -> Instance:
        return _SqliteInstance(root, capacity)

    def open_owned(self, root: Path, capacity: int, env: OwnershipEnv) -> Instance:
        return _SqliteInstance(root, capacity, env)

    def tamper(self, root: Path, what: str) -> None:
        tamper_root(root, what)

    def root_private(self, root: Path) -> bool:
        return _root_private(root)

    def stored(self, root: Path) -> tuple[StoredEntries, list[str]]:
        path = root / DATABASE_NAME
        if not path.exists():
            return [], []
        strays = [
            f"{candidate.name}:mode"
            for candidate in (path, *(path.with_name(DATABASE_NAME + s) for s in ("-wal", "-shm")))
            if candidate.exists() and not _private_mode(candidate)
        ]
        with contextlib.closing(sqlite3.connect(path.as_uri() + "?mode=ro", uri=True)) as conn:
            rows = conn.execute(
                "SELECT offer_id, revision, record FROM journal_records ORDER BY offer_id"
            ).fetchall()
        entries: StoredEntries = []
        for offer_id, revision, data in rows:
            entries.append((str(offer_id), bytes(data), revision))
        return entries, strays

    def write_raw(self, root: Path, offer_id: str, data: bytes) -> None:
        path = root / DATABASE_NAME
        with contextlib.closing(sqlite3.connect(path, isolation_level=None, timeout=WAIT_S)) as c:
            c.execute("PRAGMA ignore_check_constraints = ON")
            c.execute("UPDATE journal_records SET record = ? WHERE offer_id = ?", (data, offer_id))

    def expected_reason(self, operation: str, fault: JournalFault) -> str | None:
        if fault.kind != "io_error":
            return None
        return _SQLITE_ERRORS[(str(fault.at), str(fault.errno))][0]


def resolve_binding(spec: str) -> JournalBinding:
    """`file`, `sqlite`, or `package.module:factory` (a zero-argument callable)."""
    if spec == "file":
        return FileBinding()
    if spec == "sqlite":
        return SqliteBinding()
    module_name, sep, attribute = spec.partition(":")
    if not sep:
        raise ValueError(f"journal adapter {spec!r}: use file, sqlite or package.module:factory")
    factory = getattr(importlib.import_module(module_name), attribute)
    binding: JournalBinding = factory()
    return binding


# -- the rival: a second real process on the same root -------------------------------------
def _open(binding: JournalBinding, root: Path, capacity: int, env: OwnershipEnv | None) -> Instance:
    """An instance with the world's clock and timers when the binding takes them."""
    if env is not None and "ownership" in binding.capabilities:
        return cast(OwnershipBinding, binding).open_owned(root, capacity, env)
    return binding.open(root, capacity)


def rival_main(  # noqa: PLR0917 - the spawn target's arguments are positional
    conn: Connection,
    spec: str,
    root: str,
    capacity: int,
    barrier: Barrier,
    clock: tuple[int, int, int],
) -> None:  # pragma: no cover - runs in the child process
    """The rival owner's loop: one request, one `OpResult`, until `stop`. Its clock is the
    world's (same values, moved by the same `clock` steps); its timer never fires."""
    trace_clock = TraceClock(*clock)
    env = OwnershipEnv(trace_clock, ManualTimers(), DEFAULT_STALE_WINDOW_MS)
    instance = _open(resolve_binding(spec), Path(root), capacity, env)
    try:
        while conn.poll(120):
            message = conn.recv()
            if message[0] == "stop":
                break
            if message[0] == "advance":
                trace_clock.advance(message[1])
                continue
            if message[0] == "race":
                barrier.wait(WAIT_S)
                conn.send(call_store(instance.store, Operation("acquire")))
                continue
            command: JournalCommand = message[1]
            instance.arm(command.name, None)
            result = call_store(instance.store, decode_operation(command))
            conn.send(dataclasses.replace(result, touched=instance.touched))
    finally:
        with contextlib.suppress(Exception):
            instance.store.release()
        instance.close()
        conn.close()


class _Rival:
    def __init__(self, spec: str, root: Path, capacity: int, clock: TraceClock) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self.barrier = context.Barrier(2)
        at = (clock.wall_ns, clock.mono_ns, clock.offset_ns // 1_000_000)
        self._process = context.Process(
            target=rival_main,
            args=(child, spec, str(root), capacity, self.barrier, at),
            name="ql3-journal-rival",
            daemon=True,
        )
        self._process.start()
        child.close()

    def _receive(self) -> OpResult:
        if not self._conn.poll(WAIT_S):
            raise TimeoutError("the rival process did not answer")
        result: OpResult = self._conn.recv()
        return result

    def call(self, command: JournalCommand) -> OpResult:
        self._conn.send(("call", command))
        return self._receive()

    def start_race(self) -> None:
        self._conn.send(("race",))

    def advance(self, ms: int) -> None:
        self._conn.send(("advance", ms))

    def receive(self) -> OpResult:
        return self._receive()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.send(("stop",))
        self._process.join(WAIT_S)
        if self._process.is_alive():  # pragma: no cover - a hung child
            self._process.kill()
            self._process.join(WAIT_S)
        self._conn.close()


class RealWorld:
    """An adapter on a real root (see the module docstring). `main` is an instance of this
    process; the rival is a second process, started at its first step."""

    def __init__(
        self, binding: JournalBinding, root: Path, capacity: int, receipts: Path | None = None
    ) -> None:
        self.binding = binding
        self.name = binding.name
        self.capabilities = binding.capabilities
        self.root = root
        self.receipts_root = receipts or root.with_name(f"{root.name}-receipts")
        self._receipts: CompletionReceiptStore | None = None
        self.capacity = capacity
        self.clock = TraceClock(time.time_ns(), time.monotonic_ns())
        self._threads = {thread.ident for thread in threading.enumerate()}
        self._timers: ManualTimers | None = None
        self.main = self._open(DEFAULT_STALE_WINDOW_MS)
        self._old: list[Instance] = []
        self._rival: _Rival | None = None

    def _open(self, stale_window_ms: int) -> Instance:
        env = OwnershipEnv(self.clock, ManualTimers(), stale_window_ms)
        self._timers = env.timers if "ownership" in self.capabilities else None
        return _open(self.binding, self.root, self.capacity, env)

    @property
    def rival(self) -> _Rival:
        if self._rival is None:
            self._rival = _Rival(self.binding.spec, self.root, self.capacity, self.clock)
        return self._rival

    @property
    def _owned(self) -> OwnershipBinding:
        if "ownership" not in self.capabilities:
            raise ValueError(f"{self.name}: the binding lacks the ownership capability")
        return cast(OwnershipBinding, self.binding)

    def call(self, actor: str, command: JournalCommand, fault: JournalFault | None) -> OpResult:
        if actor == "rival":
            if fault is not None:
                raise ValueError("faults are injected into the main instance only")
            return self.rival.call(command)
        operation = decode_operation(command)
        instance = self.main
        instance.arm(command.name, fault)
        try:
            result = call_store(instance.store, operation)
            touched, fired = instance.touched, instance.fired
        finally:
            instance.arm(command.name, None)
        expected = None
        if fault is not None and fired:
            expected = self.binding.expected_reason(command.name, fault)
        return dataclasses.replace(result, touched=touched, expected_reason=expected)

    def concurrent(self, commands: Sequence[JournalCommand]) -> list[OpResult]:
        operations = [decode_operation(c) for c in commands]
        results: list[OpResult | None] = [None] * len(operations)
        barrier = threading.Barrier(len(operations))
        store = self.main.store

        def run(index: int) -> None:
            barrier.wait(WAIT_S)
            results[index] = call_store(store, operations[index])

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(operations))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT_S)
        return [r if r is not None else OpResult("error", "TIMEOUT") for r in results]

    def race_acquire(self) -> tuple[OpResult, OpResult]:
        rival = self.rival
        rival.start_race()
        rival.barrier.wait(WAIT_S)
        main = call_store(self.main.store, Operation("acquire"))
        return main, rival.receive()

    def reopen(self, stale_window_ms: int | None = None) -> OpResult:
        """Restart: the old instance releases its lock if it can (a dead process's lock,
        cleared as a stale reclaim would; a compromised owner's lock stays) and closes; a new
        instance (with `stale_window_ms`, if given) acquires (F-12 removes leftovers). A
        window the adapter rejects is `invalid`, leaving an unowned default instance."""
        old = self.main
        with contextlib.suppress(JournalError):
            old.store.release()
        old.close()
        self._old.append(old)
        try:
            self.main = self._open(stale_window_ms or DEFAULT_STALE_WINDOW_MS)
        except ValueError:
            self.main = self._open(DEFAULT_STALE_WINDOW_MS)
            return OpResult("invalid")
        return call_store(self.main.store, Operation("acquire"))

    def advance(self, ms: int) -> OpResult:
        self._owned  # noqa: B018 - the clock reaches only an ownership binding's instances
        self.clock.advance(ms)
        if self._rival is not None:
            self._rival.advance(ms)
        return OpResult("ok")

    def tamper(self, what: str) -> OpResult:
        if what in RECEIPT_TAMPERS:
            os.chmod(self.receipt_store.root, DIR_MODE if what == "receipts_restored" else 0o750)
            return OpResult("ok")
        self._owned.tamper(self.root, what)
        return OpResult("ok")

    @property
    def receipt_store(self) -> CompletionReceiptStore:
        """The world's receipt store (`retention` capability), made private on first use."""
        if "retention" not in self.capabilities:
            raise ValueError(f"{self.name}: the binding lacks the retention capability")
        if self._receipts is None:
            self._receipts = CompletionReceiptStore(self.receipts_root.absolute())
            self._receipts.ensure_directory()
        return self._receipts

    def receipt(self, receipt: Receipt) -> OpResult:
        try:
            self.receipt_store.publish(receipt)
        except ReceiptStoreError as exc:
            return OpResult("error", exc.code.value, reason=exc.reason)
        return OpResult("ok")

    def retention(self, call: RetentionCall) -> OpResult:
        """One call of the Worker runtime's terminal retention (§3.14) over the main instance
        and the world's receipts, every call it makes logged in order."""
        effects: Effects = []
        journal = LoggedJournal(self.main.store, effects)
        receipts = LoggedReceipts(self.receipt_store, effects)
        try:
            retention = TerminalRetention(
                journal, receipts, call.retention_ms, call.page_size, call.delete_budget
            )
            done = retention.run(call.cursor, call.observed_at_ms)
        except ValueError:
            return OpResult("invalid")
        kept = [
            (k.offer_id, k.reason.value, None if k.code is None else k.code.value)
            for k in done.kept
        ]
        return retention_result(
            done.cursor,
            done.examined,
            deleted=done.deleted_offer_ids,
            kept=kept,
            code=None if done.code is None else done.code.value,
            effects=effects,
        )

    def refresh(self) -> OpResult:
        self._owned  # noqa: B018
        timer = None if self._timers is None else self._timers.live()
        return OpResult("ok", None, None if timer is None else timer.fire())

    def timers(self) -> OpResult:
        """The refresh timers the main instance started, the last one's interval, and the
        threads started in this process since the world was made that are still alive."""
        self._owned  # noqa: B018
        started = [t for t in (self._timers.made if self._timers else []) if t.started]
        interval = round(started[-1].interval_s * 1000) if started else None
        threads = sum(1 for t in threading.enumerate() if t.ident not in self._threads)
        return OpResult(
            "ok", None, {"started": len(started), "interval_ms": interval, "threads": threads}
        )

    def corrupt(self, offer_id: str, damage: str) -> OpResult:
        entries, _ = self.binding.stored(self.root)
        current = {oid: data for oid, data, _ in entries}
        if offer_id not in current:
            raise ValueError("corrupt: the offer has no stored bytes")
        self.binding.write_raw(self.root, offer_id, damaged(current[offer_id], damage))
        return OpResult("ok")

    def project(self) -> JournalProjection:
        entries, strays = self.binding.stored(self.root)
        if "ownership" in self.capabilities and not self._owned.root_private(self.root):
            strays = [*strays, ROOT_MODE_STRAY]
        receipts: list[tuple[str, bytes]] = []
        if self._receipts is not None:
            receipts, more = _stored_receipts(self._receipts.root)
            strays = [*strays, *more]
        return projection(entries, strays, receipts)

    def close(self) -> None:
        if "ownership" in self.capabilities and self.root.is_dir():
            self._owned.tamper(self.root, "root_restored")  # so the directory can be removed
        if self._rival is not None:
            self._rival.stop()
            self._rival = None
        for instance in (self.main, *self._old):
            with contextlib.suppress(JournalError):
                instance.store.release()
            instance.close()


def _stored_receipts(root: Path) -> tuple[list[tuple[str, bytes]], list[str]]:
    """The receipt directory read without the store's code: every `<attempt_id>.json` with its
    bytes, and as strays the directory's mode when it is not `0700`, a receipt that is not
    `0600` and any other visible entry (temporaries start with a dot and are never visible)."""
    found: list[tuple[str, bytes]] = []
    strays = [] if _root_private(root) else [RECEIPTS_MODE_STRAY]
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        name = entry.name
        if name.startswith("."):
            continue
        if not name.endswith(".json") or not entry.is_file(follow_symlinks=False):
            strays.append(f"<receipts>/{name}")
            continue
        if not _private_mode(root / name):
            strays.append(f"<receipts>/{name}:mode")
        found.append((name.removesuffix(".json"), (root / name).read_bytes()))
    return found, strays


def world_factory(
    adapter: str | JournalBinding, base: Path | None = None
) -> Callable[[JournalConfig], JournalWorld]:
    """A factory of fresh worlds for `adapter` (`reference`, `file`, `sqlite`, a binding spec or
    a binding): each adapter world gets a new root in a new temporary directory (under `base`
    if given), removed again when the world is closed."""
    if adapter == "reference":
        return lambda config: ReferenceWorld(config.capacity)
    binding = resolve_binding(adapter) if isinstance(adapter, str) else adapter

    def make(config: JournalConfig) -> JournalWorld:
        directory = Path(tempfile.mkdtemp(prefix=f"ql3-journal-{binding.name}-", dir=base))
        return _Scratch(RealWorld(binding, directory / "journal", config.capacity), directory)

    return make


class _Scratch:
    """A world whose temporary directory is removed when it is closed."""

    def __init__(self, world: RealWorld, directory: Path) -> None:
        self.world = world
        self.directory = directory
        self.name = world.name
        self.capabilities = world.capabilities

    def call(self, actor: str, command: JournalCommand, fault: JournalFault | None) -> OpResult:
        return self.world.call(actor, command, fault)

    def concurrent(self, commands: Sequence[JournalCommand]) -> list[OpResult]:
        return self.world.concurrent(commands)

    def race_acquire(self) -> tuple[OpResult, OpResult]:
        return self.world.race_acquire()

    def reopen(self, stale_window_ms: int | None = None) -> OpResult:
        return self.world.reopen(stale_window_ms)

    def corrupt(self, offer_id: str, damage: str) -> OpResult:
        return self.world.corrupt(offer_id, damage)

    def advance(self, ms: int) -> OpResult:
        return self.world.advance(ms)

    def tamper(self, what: str) -> OpResult:
        return self.world.tamper(what)

    def refresh(self) -> OpResult:
        return self.world.refresh()

    def timers(self) -> OpResult:
        return self.world.timers()

    def receipt(self, receipt: Receipt) -> OpResult:
        return self.world.receipt(receipt)

    def retention(self, call: RetentionCall) -> OpResult:
        return self.world.retention(call)

    def project(self) -> JournalProjection:
        return self.world.project()

    def close(self) -> None:
        try:
            self.world.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


# -- replay ------------------------------------------------------------------------------------
def _short(value: object, limit: int = 400) -> str:
    text = canonical(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


@dataclass(frozen=True, slots=True)
class JournalDivergence(Divergence):
    """The first diverging step of a journal trace: outcomes, results, notes and the diff."""

    expected_result: Any = None
    actual_result: Any = None
    notes: tuple[str, ...] = ()

    def render(self) -> str:
        lines = [
            f"{self.trace}: step {self.step} ({self.command}) diverged",
            f"  expected outcome {self.expected[0]} {self.expected[1] or ''}".rstrip(),
            f"  actual outcome   {self.actual[0]} {self.actual[1] or ''}".rstrip(),
        ]
        if self.expected_result != self.actual_result:
            lines.append(f"  expected result {_short(self.expected_result)}")
            lines.append(f"  actual result   {_short(self.actual_result)}")
        lines += [f"  {note}" for note in self.notes]
        lines += [f"  {line}" for line in self.projection_diff[:40]]
        if len(self.projection_diff) > 40:
            lines.append(f"  ... and {len(self.projection_diff) - 40} more differences")
        return "\n".join(lines)


@dataclass
class JournalTraceResult(TraceResult):
    """A replay result with the faults injected, by kind."""

    fault_kinds: Counter[str] = field(default_factory=Counter)


def _check(
    step: JournalStep, actual: Performed, actual_projection: JournalProjection
) -> JournalDivergence | None:
    expect = step.expect
    notes: list[str] = []
    wanted = expect.projection
    expected_result: Any = expect.result
    actual_result: Any = actual.result
    same_outcome = (expect.kind, expect.code) == (actual.kind, actual.code)
    if expect.alternatives:
        vector = actual.outcomes
        expected_result = [list(v) for a in expect.alternatives for v in a.outcomes]
        actual_result = None if vector is None else list(vector)
        matched = next((a for a in expect.alternatives if vector in a.outcomes), None)
        if matched is None:
            notes.append("the outcomes match no serial order of the concurrent operations")
            same_outcome = False
        else:
            wanted = matched.projection
            expected_result = actual_result
    elif same_outcome and expect.result != actual.result:
        same_outcome = False
    if expect.untouched and actual.touched:
        notes.append("refused only after reaching a write point (expected: before any write)")
    if actual.expected_reason is not None and actual.reason != actual.expected_reason:
        notes.append(
            f"the injected fault should be reported as {actual.expected_reason!r}, "
            f"got {actual.reason!r}"
        )
    changes = journal_diff(wanted, actual_projection)
    if same_outcome and not notes and not changes:
        return None
    return JournalDivergence(
        trace="",
        step=step.step,
        command=step_label(step),
        expected=(expect.kind, expect.code),
        actual=(actual.kind, actual.code),
        projection_diff=tuple(changes),
        expected_result=expected_result,
        actual_result=actual_result,
        notes=tuple(notes),
    )


def replay(
    trace: JournalTrace, make_world: Callable[[JournalConfig], JournalWorld]
) -> JournalTraceResult:
    """Replay `trace` on a fresh world: after every step compare the outcome, the result, the
    untouched claim, the reason of an injected I/O error and the full projection."""
    result = JournalTraceResult(trace.header.name)
    world = make_world(trace.config)
    try:
        missing = tuple(c for c in trace.header.capabilities if c not in world.capabilities)
        if missing:
            result.missing_capabilities = missing
            return result
        aliases: dict[str, str] = {}
        for step in trace.steps:
            try:
                actual = perform(world, step.command, step.fault, aliases)
            except Exception as exc:  # an adapter failure is a divergence, not a suite crash
                actual = Performed("exception", type(exc).__name__)
            if step.fault is not None:
                result.faults += 1
                result.fault_kinds[step.fault.kind] += 1
            divergence = _check(step, actual, world.project())
            if divergence is not None:
                result.divergence = dataclasses.replace(divergence, trace=trace.header.name)
                return result
            result.steps += 1
        return result
    finally:
        world.close()


def read_journal_trace(path: Path) -> JournalTrace:
    return loads(read_text(path))


def journal_trace_paths(root: Path = JOURNAL_CORPUS) -> list[Path]:
    return trace_paths(root)


def run_journal_corpus(
    paths: Sequence[Path],
    adapter: str,
    *,
    root: Path = JOURNAL_CORPUS,
    base: Path | None = None,
    progress: Callable[[Outcome, int, int], None] | None = None,
) -> Summary:
    """Replay every journal trace in `paths` (files under `root`) against `adapter`."""
    make_world = world_factory(adapter, base)
    summary = Summary()
    started = time.perf_counter()
    for done, path in enumerate(paths, start=1):
        relative = str(path.relative_to(root))
        began = time.perf_counter()
        result = replay(read_journal_trace(path), make_world)
        outcome = Outcome(relative, result, time.perf_counter() - began, spec_id_of(relative))
        summary.outcomes.append(outcome)
        if progress is not None:
            progress(outcome, done, len(paths))
    summary.seconds = time.perf_counter() - started
    return summary


def fault_counts(summary: Summary) -> Counter[str]:
    """Faults injected over a corpus run, by kind."""
    total: Counter[str] = Counter()
    for outcome in summary.outcomes:
        if isinstance(outcome.result, JournalTraceResult):
            total.update(outcome.result.fault_kinds)
    return total
