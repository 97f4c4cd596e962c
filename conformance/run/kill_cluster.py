"""Kill mode and terminate mode for the cluster runner (issue 5, item 2; RUN-06, RETRY-10).

Write paths are the edge kill mode's (`conformance.run.kill_edge`): the first applied occurrence of
every
(command, outcome code) pair in the corpus, named traces first, each in the state its trace built
on a `ClusterAdapter` (a schema of its own). A write sends m named statements between psycopg's
`BEGIN` and `COMMIT` (`ClusterStore.statement_trace` names each one just before it is sent).
Boundary k is "just before statement k + 1 is sent" for k < m and "after the last statement,
just before `COMMIT`" for k = m. The statements are not counted in a separate run: the fault
for boundary k fires before `COMMIT` when the write sends only k statements, which tells m
(and every run starts from the true pre-state; a dry run would have to trust the rollback it
is meant to check).

Kill mode (a client process death). For k = 0, 1, ... a forked child opens its own
`ClusterStore` on the same DSN and schema, reports its backend pid through a pipe, runs the
command through `runners.engine.execute` and SIGKILLs itself at boundary k, until the boundary
is the one before `COMMIT`; last, a child SIGKILLs itself right after `execute` returned (after
`COMMIT`). The parent requires death by SIGKILL, waits (bounded) until the child's backend is
gone from `pg_stat_activity` (the server noticed the closed socket and aborted the
transaction), and projects: exactly the before-state for every kill before `COMMIT`, exactly
the step's after-state (and outcome) for the kill after it. So a write path costs m + 2 kills.

Terminate mode (a server-side fault). In-process, on the adapter's own store: for every boundary
a second connection runs `pg_terminate_backend` on the backend of the runner's transaction and
waits until it is gone from `pg_stat_activity`. The runner's call must raise
`psycopg.OperationalError` (or a subclass), never report success, and the state must be exactly
the before-state; each next call on the same store object must reconnect, and after the last
boundary the same command once more must apply with the step's outcome and after-state. So a
write path costs m + 1 terminations.

A path stops at its first failure (the pre-state is gone). Either way the step ends applied, so
the walk goes on with the trace's next step (`conformance.run.replay.apply_step`) without applying
it again; a write that did not leave the after-state ends the walk of its trace.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import psycopg

from conformance.run.cluster import CAPABILITIES, ClusterAdapter
from conformance.run.corpus import read_trace, trace_paths
from conformance.run.kill_edge import KillResult, WritePath, _write_of
from conformance.run.projection import Projection, diff
from conformance.run.replay import apply_step
from conformance.run.trace import Step
from kernel import Outcome
from runners.cluster.named_sql import STATEMENTS
from runners.cluster.store import ClusterStore, ClusterTransaction
from runners.engine import execute

__all__ = [
    "KillResult",
    "TerminateResult",
    "WritePath",
    "kill_every_write",
    "kill_write",
    "terminate_every_write",
    "terminate_write",
]

#: How long to wait for the server to end a killed client's or a terminated backend.
GONE_TIMEOUT_S: Final = 10.0
#: A write that sends more statements than this is reported, not faulted forever.
MAX_STATEMENTS: Final = 200

Connection = psycopg.Connection[Any]
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class TerminateResult:
    path: WritePath
    statements: int  # m: named statements of the write (psycopg's BEGIN and COMMIT aside)
    terminations: int  # m + 1 when every boundary was reached
    failures: tuple[str, ...]  # one readable line per broken promise


@dataclass(frozen=True, slots=True)
class Boundary:
    """Where a fault fired: after `index` statements, before `statement` (None: `COMMIT`)."""

    index: int
    statement: str | None

    def __str__(self) -> str:
        if self.statement is None:
            return f"before COMMIT (after {self.index} statements)"
        return f"before statement {self.index + 1} ({self.statement})"


#: The fault, given the connection of the runner's transaction and the boundary.
Action = Callable[[Connection, Boundary], None]


class _NotTerminated(Exception):
    """`pg_terminate_backend` did not end the runner's backend."""


class _Trace(list[str]):
    """The store's `statement_trace`: `before(i, name)` runs before statement i + 1 is recorded,
    which the store does just before sending it."""

    def __init__(self, before: Callable[[int, str], None]) -> None:
        super().__init__()
        self._before = before

    def append(self, name: str, /) -> None:
        self._before(len(self), name)
        super().append(name)


class _Boundaries:
    """A `Storage` over a `ClusterStore` whose transaction runs `action` once: just before
    statement `at` + 1 is sent or, when the transaction sends only `at` statements or fewer,
    after the last one, just before psycopg sends `COMMIT`. `fired` tells where."""

    def __init__(self, store: ClusterStore, action: Action, at: int) -> None:
        self.store = store
        self.action = action
        self.at = at
        self.fired: Boundary | None = None
        self._conn: Connection | None = None

    def _boundary(self, index: int, statement: str | None) -> None:
        if self.fired is None and self._conn is not None:
            self.fired = Boundary(index, statement)
            self.action(self._conn, self.fired)

    def _before_statement(self, index: int, statement: str) -> None:
        if index == self.at:
            self._boundary(index, statement)

    @contextmanager
    def transaction(self) -> Iterator[ClusterTransaction]:
        trace = _Trace(self._before_statement)
        self.store.statement_trace = trace
        try:
            with self.store.transaction() as tx:
                self._conn = tx.connection
                yield tx
                self._boundary(len(trace), None)
        finally:
            self.store.statement_trace = None


def _outcome(outcome: Outcome) -> tuple[str, str]:
    return outcome.kind.value, outcome.code.value


def _expected(step: Step) -> tuple[str, str | None]:
    return step.expect.kind, step.expect.code


def _differs(expected: Projection, state: Projection) -> str:
    return "; ".join(diff(expected, state)[:3])


def _wait_until_gone(monitor: Connection, backend: int) -> bool:
    """Poll `pg_stat_activity` until `backend` has exited (bounded). Its entry goes away as
    the backend shuts down, after it aborted its open transaction."""
    deadline = time.monotonic() + GONE_TIMEOUT_S
    while True:
        row = monitor.execute(STATEMENTS["backend_alive"], {"pid": backend}).fetchone()
        if row is None or row[0] == 0:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)


# ---------------------------------------------------------------------------- kill mode -----


def _report(fd: int, line: str) -> None:
    os.write(fd, (line[:300].replace("\n", " ") + "\n").encode())


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _killed_child(dsn: str, schema: str, path: WritePath, *, at: int | None, fd: int) -> None:
    """In the child: run the write on a store of its own and die by SIGKILL at boundary `at`
    (None: right after `execute` returned), telling the parent where through `fd`."""
    store = ClusterStore(dsn, schema)
    with store.connection() as conn:
        _report(fd, f"pid {conn.info.backend_pid}")

    def kill(_conn: Connection, boundary: Boundary) -> None:
        _report(fd, f"at {boundary.index} {boundary.statement or '-'}")
        _die()

    if at is not None:
        kind, code = _outcome(
            execute(_Boundaries(store, kill, at), path.command, path.observed_at_ms)
        )
        _report(fd, f"returned {kind} {code}")
        return
    kind, code = _outcome(execute(store, path.command, path.observed_at_ms))
    _report(fd, f"outcome {kind} {code}")
    _die()


@dataclass(frozen=True, slots=True)
class _Child:
    """What a killed child left: its wait status and what it reported."""

    status: int
    lines: tuple[str, ...]

    @property
    def killed(self) -> bool:
        return os.WIFSIGNALED(self.status) and os.WTERMSIG(self.status) == signal.SIGKILL

    def said(self, word: str) -> list[str] | None:
        for line in self.lines:
            head, _, rest = line.partition(" ")
            if head == word:
                return rest.split()
        return None

    @property
    def boundary(self) -> Boundary | None:
        at = self.said("at")
        if at is None or len(at) != 2:
            return None
        return Boundary(int(at[0]), None if at[1] == "-" else at[1])

    def why_alive(self) -> str:
        told = [line for line in self.lines if not line.startswith("pid ")]
        return "; ".join(told) or f"wait status {self.status}"


def _fork_kill(dsn: str, schema: str, path: WritePath, at: int | None) -> _Child:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        status = 4
        try:
            os.close(read_end)
            _killed_child(dsn, schema, path, at=at, fd=write_end)
            status = 3  # not killed: the parent reports it
        except BaseException as exc:
            _report(write_end, f"raised {type(exc).__name__}: {exc}")
        finally:
            os._exit(status)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    chunks: list[bytes] = []
    while chunk := os.read(read_end, 4096):
        chunks.append(chunk)
    os.close(read_end)
    return _Child(status, tuple(b"".join(chunks).decode(errors="replace").splitlines()))


def _settled(child: _Child, monitor: Connection) -> bool:
    backend = child.said("pid")
    return backend is None or _wait_until_gone(monitor, int(backend[0]))


def kill_write(
    adapter: ClusterAdapter, step: Step, path: WritePath, monitor: Connection
) -> KillResult:
    """Every boundary of one write, the adapter's schema being in the write's pre-state; the
    after-COMMIT kill last, so that the schema is left in the after-state. `statements` is m
    (the named statements); a complete run is m + 2 kills."""
    store = adapter.store
    before = adapter.project()
    kills = 0
    sent = 0
    for at in range(MAX_STATEMENTS + 1):
        child = _fork_kill(store.dsn, store.schema, path, at)
        boundary = child.boundary
        if not child.killed or boundary is None:
            line = f"{path.label}: the kill at boundary {at} did not happen ({child.why_alive()})"
            return KillResult(path, sent, kills, (line,))
        kills += 1
        if not _settled(child, monitor):
            line = f"{path.label}: killed {boundary}, the backend outlived {GONE_TIMEOUT_S:g} s"
            return KillResult(path, sent, kills, (line,))
        changes = _differs(before, adapter.project())
        if changes:
            line = f"{path.label}: killed {boundary}, not the before-state: {changes}"
            return KillResult(path, sent, kills, (line,))
        sent = boundary.index
        if boundary.statement is None:
            break
    else:
        line = f"{path.label}: more than {MAX_STATEMENTS} statements, no COMMIT reached"
        return KillResult(path, sent, kills, (line,))
    child = _fork_kill(store.dsn, store.schema, path, None)
    if not child.killed:
        line = f"{path.label}: the kill after COMMIT did not happen ({child.why_alive()})"
        return KillResult(path, sent, kills, (line,))
    kills += 1
    failures: list[str] = []
    if not _settled(child, monitor):
        failures.append(f"{path.label}: killed after COMMIT, the backend outlived the wait")
    changes = _differs(step.expect.projection, adapter.project())
    if changes:
        failures.append(f"{path.label}: killed after COMMIT, not the after-state: {changes}")
    reported = child.said("outcome")
    if reported is not None and tuple(reported) != _expected(step):
        failures.append(
            f"{path.label}: the write killed after COMMIT returned {' '.join(reported)}, "
            f"expected {step.expect.kind} {step.expect.code or ''}".rstrip()
        )
    return KillResult(path, sent, kills, tuple(failures))


# ---------------------------------------------------------------------------- terminate mode -


class _Terminator:
    """Terminates the backend of the runner's connection from a connection of its own, and
    returns once the backend is gone (so the runner's next statement meets a dead session)."""

    def __init__(self, monitor: Connection) -> None:
        self.monitor = monitor
        self.count = 0

    def __call__(self, conn: Connection, _boundary: Boundary) -> None:
        backend = conn.info.backend_pid
        row = self.monitor.execute(STATEMENTS["terminate_backend"], {"pid": backend}).fetchone()
        if row is None or row[0] is not True:
            raise _NotTerminated(f"pg_terminate_backend({backend}) returned {row}")
        if not _wait_until_gone(self.monitor, backend):
            raise _NotTerminated(f"backend {backend} still there after {GONE_TIMEOUT_S:g} s")
        self.count += 1


def _terminated_at(
    store: ClusterStore, path: WritePath, at: int, terminate: _Terminator
) -> tuple[Boundary | None, str | None]:
    """One run of the write with the backend terminated at boundary `at`: where it was
    terminated, and what went wrong (None: the call raised `OperationalError`, as it must)."""
    storage = _Boundaries(store, terminate, at)
    try:
        outcome = execute(storage, path.command, path.observed_at_ms)
    except psycopg.OperationalError as exc:
        if storage.fired is None:  # it failed, but not because of this fault
            return None, f"the call raised {type(exc).__name__} ({exc}) before boundary {at}"
        return storage.fired, None
    except Exception as exc:
        where = _where(storage.fired, at)
        raised = f"{type(exc).__name__}: {exc}"
        return None, f"{where}, the call raised {raised}, not psycopg.OperationalError"
    kind, code = _outcome(outcome)
    return storage.fired, f"{_where(storage.fired, at)}, yet the call returned {kind} {code}"


def _where(fired: Boundary | None, at: int) -> str:
    return f"boundary {at} never reached" if fired is None else f"backend terminated {fired}"


def terminate_write(
    adapter: ClusterAdapter, step: Step, path: WritePath, monitor: Connection
) -> TerminateResult:
    """Terminate the runner's backend at every boundary of one write (the adapter's schema in
    its pre-state), then run the write once more on the same store: it must apply."""
    store = adapter.store
    before = adapter.project()
    terminate = _Terminator(monitor)
    sent = 0
    for at in range(MAX_STATEMENTS + 1):
        boundary, failure = _terminated_at(store, path, at, terminate)
        if failure is not None:
            return TerminateResult(path, sent, terminate.count, (f"{path.label}: {failure}",))
        assert boundary is not None
        changes = _differs(before, adapter.project())
        if changes:
            line = f"{path.label}: backend terminated {boundary}, not the before-state: {changes}"
            return TerminateResult(path, sent, terminate.count, (line,))
        sent = boundary.index
        if boundary.statement is None:
            break
    else:
        line = f"{path.label}: more than {MAX_STATEMENTS} statements, no COMMIT reached"
        return TerminateResult(path, sent, terminate.count, (line,))
    failures: list[str] = []
    try:
        outcome = execute(store, path.command, path.observed_at_ms)
    except Exception as exc:
        failures.append(
            f"{path.label}: the next call after {terminate.count} terminations raised "
            f"{type(exc).__name__}: {exc}"
        )
    else:
        kind, code = _outcome(outcome)
        if (kind, code) != _expected(step):
            expected = f"{step.expect.kind} {step.expect.code or ''}".rstrip()
            failures.append(
                f"{path.label}: the next call after the terminations returned {kind} {code}, "
                f"expected {expected}"
            )
        changes = _differs(step.expect.projection, adapter.project())
        if changes:
            failures.append(f"{path.label}: the next call left not the after-state: {changes}")
    return TerminateResult(path, sent, terminate.count, tuple(failures))


# ---------------------------------------------------------------------------- the walk ------


def _every_write(
    root: Path,
    dsn: str,
    handle: Callable[[ClusterAdapter, Step, WritePath, Connection], R],
) -> list[R]:
    """Walk the traces under `root` the cluster adapter can run, each on a fresh adapter, and
    hand every first (command, code) write to `handle` in its pre-state; `handle` leaves it
    applied (or reports why not, and the rest of that trace is skipped)."""
    seen: set[tuple[str, str]] = set()
    results: list[R] = []
    with psycopg.connect(dsn, autocommit=True) as monitor:
        for trace_path in trace_paths(root):  # named traces first, then the generated ones
            trace = read_trace(trace_path)
            if not set(trace.header.capabilities) <= CAPABILITIES:
                continue
            new = {
                (s.command.name, s.expect.code or "")
                for s in trace.steps
                if s.command is not None and s.fault is None and s.expect.kind == "applied"
            }
            if new <= seen:
                continue  # nothing new to fault here: do not pay for the replay
            adapter = ClusterAdapter(dsn)
            try:
                for step in trace.steps:
                    path = _write_of(trace.header.name, step)
                    key = None if path is None else (path.command.name, path.code)
                    if path is None or key is None or key in seen:
                        apply_step(adapter, step)
                        continue
                    seen.add(key)
                    results.append(handle(adapter, step, path, monitor))
                    if diff(step.expect.projection, adapter.project()):
                        break  # not the after-state (reported): the trace cannot go on
            finally:
                adapter.close()
    return results


def kill_every_write(root: Path, dsn: str) -> list[KillResult]:
    """Kill mode over the traces under `root`: every write path, every statement boundary."""
    return _every_write(root, dsn, kill_write)


def terminate_every_write(root: Path, dsn: str) -> list[TerminateResult]:
    """Terminate mode over the traces under `root`: every write path, every boundary."""
    return _every_write(root, dsn, terminate_write)
