"""Kill mode and terminate mode for the cluster runner (issue 5 item 2, issue 16 item 2;
RUN-06, RETRY-10).

Write paths are those of `conformance.run.walk`: the first applied occurrence of every (command,
outcome code) pair in the corpus, named traces first, each in the state its trace built on a
`ClusterAdapter` (a schema of its own); Workflow commands (SPEC §4, one `execute_workflow`
transaction each: WF-05, WF-19) are faulted like Run commands.

Boundaries are counted on the wire, not in the store: every query the write sends to the server
while `runners.engine.execute` runs, whatever sends it: psycopg's `BEGIN` and `COMMIT` (a
`Transaction` entered or left, `Connection.commit`/`rollback`) and every statement a cursor
executes (`_watching` hooks those psycopg entry points for the duration of one run). Boundary k
is "just before query k + 1 is sent", so a write of n queries has the boundaries 0 .. n - 1,
the last one just before its `COMMIT`. A write that commits more than once (a split into two
transactions, a statement committed on its own) has a boundary between its commits, and a fault
there leaves a state that is neither the before- nor the after-state: a write must commit
exactly once. The queries are not counted in a separate run: the run for boundary n finds no
query n + 1, the write returns, and that run is the after-`COMMIT` case (every run starts from
the true pre-state; a dry run would have to trust the rollback it is meant to check).

Kill mode (a client process death). For k = 0, 1, ... a forked child opens its own
`ClusterStore` on the same DSN and schema, reports its backend pid through a pipe, runs the
command and SIGKILLs itself at boundary k; the child whose write returned (k = n) SIGKILLs
itself right after `execute`. The parent requires death by SIGKILL, waits (bounded) until the
child's backend is gone from `pg_stat_activity` (the server noticed the closed socket and
aborted the transaction), and projects: exactly the before-state, or exactly the step's
after-state (a commit already happened and nothing else may follow it), for every kill at a
boundary; exactly the after-state (and the step's outcome) for the kill after `execute`
returned. So a write path of n queries costs n + 1 kills.

Terminate mode (a server-side fault). In-process, on the adapter's own store: for every boundary
a second connection runs `pg_terminate_backend` on the backend of the runner's connection and
waits until it is gone from `pg_stat_activity`. The runner's call must raise
`psycopg.OperationalError` (or a subclass), never report success, and the state must be exactly
the before-state; each next call on the same store object must reconnect, and the run that meets
no boundary (k = n) must apply with the step's outcome and after-state. So a write path costs n
terminations and one last call.

A path stops at its first failure (the pre-state is gone). Either way the step ends applied, so
the walk goes on with the trace's next step without applying it again; a write that did not
leave the after-state ends the walk of its trace, and the paths it did not reach are reported.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg.pq import TransactionStatus

from conformance.run.cluster import CAPABILITIES, ClusterAdapter
from conformance.run.kill_edge import KillResult
from conformance.run.projection import Projection, diff
from conformance.run.trace import Step
from conformance.run.walk import Roots, WritePath, every_write, run_write
from kernel import Outcome
from kernel.approved_action import ActionOutcome
from kernel.workflow import WorkflowOutcome
from runners.cluster.named_sql import STATEMENTS
from runners.cluster.store import ClusterStore

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
#: A write that sends more queries than this is reported, not faulted forever.
MAX_STATEMENTS: Final = 200

Connection = psycopg.Connection[Any]

#: The runner's named statements by their text, to name a boundary's query in a report.
_NAMES: Final = {text.strip(): name for name, text in STATEMENTS.items()}


@dataclass(frozen=True, slots=True)
class TerminateResult:
    path: WritePath
    statements: int  # n: the queries of the write, BEGIN to COMMIT
    terminations: int  # n when every boundary was reached
    failures: tuple[str, ...]  # one readable line per broken promise


@dataclass(frozen=True, slots=True)
class Boundary:
    """Where a fault fired: after `index` queries, before `statement` (its name, `BEGIN`,
    `COMMIT`, ...)."""

    index: int
    statement: str

    def __str__(self) -> str:
        return f"before statement {self.index + 1} ({self.statement})"


#: The fault, given the connection about to send the query and the boundary.
Action = Callable[[Connection, Boundary], None]


class _NotTerminated(Exception):
    """`pg_terminate_backend` did not end the runner's backend."""


def _name_of(query: object) -> str:
    if isinstance(query, bytes):
        query = query.decode(errors="replace")
    text = str(query).strip()
    return _NAMES.get(text) or " ".join(text.split())[:40]


class _Queries:
    """Counts the queries a write sends and runs `action` once, just before query `at` + 1.
    `fired` tells where; `count` how many were sent (or about to be). The action's own queries
    (a terminator's monitor) are not counted."""

    def __init__(self, action: Action, at: int) -> None:
        self.action = action
        self.at = at
        self.count = 0
        self.fired: Boundary | None = None
        self._busy = False

    def before(self, conn: Connection, name: str) -> None:
        if self._busy:
            return
        index = self.count
        self.count += 1
        if index == self.at and self.fired is None:
            self.fired = Boundary(index, name)
            self._busy = True
            try:
                self.action(conn, self.fired)
            finally:
                self._busy = False


@contextmanager
def _watching(before: Callable[[Connection, str], None]) -> Iterator[None]:
    """Call `before(connection, name)` just before psycopg sends any query: a cursor's statement,
    a transaction's `BEGIN`/`SAVEPOINT` on entry and `COMMIT`/`ROLLBACK` (or the savepoint's) on
    exit, an explicit commit or rollback. Hooks psycopg's public entry points, so a runner's
    extra transaction or raw `COMMIT` is counted like its named statements."""
    cursor_execute = psycopg.Cursor.execute
    cursor_executemany = psycopg.Cursor.executemany
    enter = psycopg.Transaction.__enter__
    leave = psycopg.Transaction.__exit__
    commit = psycopg.Connection.commit
    rollback = psycopg.Connection.rollback

    def execute_(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        before(self.connection, _name_of(query))
        return cursor_execute(self, query, *args, **kwargs)

    def executemany_(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        before(self.connection, _name_of(query))
        return cursor_executemany(self, query, *args, **kwargs)

    def enter_(self: psycopg.Transaction) -> Any:
        idle = self.connection.info.transaction_status == TransactionStatus.IDLE
        before(self.connection, "BEGIN" if idle else "SAVEPOINT")
        return enter(self)

    def leave_(self: psycopg.Transaction, *exc: Any) -> Any:
        if self.savepoint_name is None:
            before(self.connection, "COMMIT" if exc[0] is None else "ROLLBACK")
        else:
            before(self.connection, "RELEASE" if exc[0] is None else "ROLLBACK TO SAVEPOINT")
        return leave(self, *exc)

    def commit_(self: Connection) -> None:
        before(self, "COMMIT")
        commit(self)

    def rollback_(self: Connection) -> None:
        before(self, "ROLLBACK")
        rollback(self)

    hooks: list[tuple[type, str, Any, Any]] = [
        (psycopg.Cursor, "execute", cursor_execute, execute_),
        (psycopg.Cursor, "executemany", cursor_executemany, executemany_),
        (psycopg.Transaction, "__enter__", enter, enter_),
        (psycopg.Transaction, "__exit__", leave, leave_),
        (psycopg.Connection, "commit", commit, commit_),
        (psycopg.Connection, "rollback", rollback, rollback_),
    ]
    for owner, name, _original, hook in hooks:
        setattr(owner, name, hook)
    try:
        yield
    finally:
        for owner, name, original, _hook in hooks:
            setattr(owner, name, original)


def _outcome(outcome: Outcome | WorkflowOutcome | ActionOutcome) -> tuple[str, str]:
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


def _killed_child(dsn: str, schema: str, path: WritePath, *, at: int, fd: int) -> None:
    """In the child: run the write on a store of its own and die by SIGKILL at boundary `at`,
    or right after `execute` returned when the write sent `at` queries or fewer, telling the
    parent which through `fd`."""
    store = ClusterStore(dsn, schema)
    with store.connection() as conn:
        _report(fd, f"pid {conn.info.backend_pid}")

    def kill(_conn: Connection, boundary: Boundary) -> None:
        _report(fd, f"at {boundary.index} {boundary.statement}")
        _die()

    queries = _Queries(kill, at)
    with _watching(queries.before):
        kind, code = _outcome(run_write(store, path))
    _report(fd, f"returned {queries.count} {kind} {code}")
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
        for line in self.lines:
            head, _, rest = line.partition(" ")
            index, _, statement = rest.partition(" ")
            if head == "at" and index.isdigit():
                return Boundary(int(index), statement)  # the name may hold spaces (raw SQL)
        return None

    def why_alive(self) -> str:
        told = [line for line in self.lines if not line.startswith("pid ")]
        return "; ".join(told) or f"wait status {self.status}"


def _fork_kill(dsn: str, schema: str, path: WritePath, at: int) -> _Child:
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
    kill after `execute` returned last, so that the schema is left in the after-state.
    `statements` is n (the queries, BEGIN to COMMIT); a complete run is n + 1 kills."""
    store = adapter.store
    before = adapter.project()
    after = step.expect.projection
    kills = 0
    for at in range(MAX_STATEMENTS + 1):
        child = _fork_kill(store.dsn, store.schema, path, at)
        returned = child.said("returned")
        boundary = child.boundary
        if not child.killed or (boundary is None and returned is None):
            line = f"{path.label}: the kill at boundary {at} did not happen ({child.why_alive()})"
            return KillResult(path, at, kills, (line,))
        kills += 1
        where = "after the write returned" if boundary is None else f"killed {boundary}"
        if not _settled(child, monitor):
            line = f"{path.label}: {where}, the backend outlived {GONE_TIMEOUT_S:g} s"
            return KillResult(path, at, kills, (line,))
        state = adapter.project()
        if boundary is not None:
            if not diff(before, state):
                continue  # nothing committed yet: the next boundary, from the same pre-state
            if diff(after, state):
                changes = _differs(before, state)
                line = (
                    f"{path.label}: {where}, not the before-state (nor the after-state): {changes}"
                )
                return KillResult(path, at, kills, (line,))
            return KillResult(path, at + 1, kills, ())  # committed once, at its last query
        failures: list[str] = []
        changes = _differs(after, state)
        if changes:
            failures.append(f"{path.label}: {where}, not the after-state: {changes}")
        assert returned is not None
        sent, outcome = int(returned[0]), tuple(returned[1:])
        if outcome != _expected(step):
            failures.append(
                f"{path.label}: the write returned {' '.join(outcome)}, "
                f"expected {step.expect.kind} {step.expect.code or ''}".rstrip()
            )
        return KillResult(path, sent, kills, tuple(failures))
    line = f"{path.label}: more than {MAX_STATEMENTS} queries, the write never returned"
    return KillResult(path, MAX_STATEMENTS, kills, (line,))


# ---------------------------------------------------------------------------- terminate mode -


class _Terminator:
    """Terminates the backend of the runner's connection from a connection of its own, and
    returns once the backend is gone (so the runner's next query meets a dead session)."""

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


@dataclass(frozen=True, slots=True)
class _Terminated:
    """One run of the write with the backend terminated at boundary `at`: where it was
    terminated (None: the write met no boundary `at`), the outcome when the call returned,
    what went wrong (None: as it must), and how many queries were counted."""

    fired: Boundary | None
    outcome: tuple[str, str] | None
    failure: str | None
    count: int


def _terminated_at(
    store: ClusterStore, path: WritePath, at: int, terminate: _Terminator
) -> _Terminated:
    queries = _Queries(terminate, at)
    try:
        with store.connection():
            # The store replaces a terminated connection here, outside the count, so that
            # boundary k is the same query in every run (its reconnect is no query of the write).
            pass
        with _watching(queries.before):
            outcome = run_write(store, path)
    except psycopg.OperationalError as exc:
        fired = queries.fired
        if fired is None:  # it failed, but not because of this fault
            line = f"the call raised {type(exc).__name__} ({exc}) before boundary {at}"
            return _Terminated(None, None, line, queries.count)
        return _Terminated(fired, None, None, queries.count)
    except Exception as exc:
        where = _where(queries.fired, at)
        raised = f"{type(exc).__name__}: {exc}"
        line = f"{where}, the call raised {raised}, not psycopg.OperationalError"
        return _Terminated(queries.fired, None, line, queries.count)
    kind, code = _outcome(outcome)
    if queries.fired is not None:
        line = f"{_where(queries.fired, at)}, yet the call returned {kind} {code}"
        return _Terminated(queries.fired, (kind, code), line, queries.count)
    return _Terminated(None, (kind, code), None, queries.count)


def _where(fired: Boundary | None, at: int) -> str:
    return f"boundary {at} never reached" if fired is None else f"backend terminated {fired}"


def terminate_write(
    adapter: ClusterAdapter, step: Step, path: WritePath, monitor: Connection
) -> TerminateResult:
    """Terminate the runner's backend at every boundary of one write (the adapter's schema in
    its pre-state); the run that meets no boundary, on the same store, must apply."""
    store = adapter.store
    before = adapter.project()
    terminate = _Terminator(monitor)
    for at in range(MAX_STATEMENTS + 1):
        run = _terminated_at(store, path, at, terminate)
        if run.failure is not None:
            return TerminateResult(path, at, terminate.count, (f"{path.label}: {run.failure}",))
        if run.fired is not None:
            changes = _differs(before, adapter.project())
            if changes:
                line = f"{path.label}: backend terminated {run.fired}, not the before-state: "
                return TerminateResult(path, at, terminate.count, (line + changes,))
            continue
        failures: list[str] = []
        if run.outcome != _expected(step):
            kind, code = run.outcome or ("-", "-")
            expected = f"{step.expect.kind} {step.expect.code or ''}".rstrip()
            failures.append(
                f"{path.label}: the call after {terminate.count} terminations returned "
                f"{kind} {code}, expected {expected}"
            )
        changes = _differs(step.expect.projection, adapter.project())
        if changes:
            failures.append(
                f"{path.label}: the call after the terminations left not the after-state: {changes}"
            )
        return TerminateResult(path, run.count, terminate.count, tuple(failures))
    line = f"{path.label}: more than {MAX_STATEMENTS} queries, the write never returned"
    return TerminateResult(path, MAX_STATEMENTS, terminate.count, (line,))


# ---------------------------------------------------------------------------- the walk ------


def kill_every_write(root: Roots, dsn: str) -> list[KillResult]:
    """Kill mode over the traces under `root`: every write path, every query boundary."""
    with psycopg.connect(dsn, autocommit=True) as monitor:
        return every_write(
            root,
            CAPABILITIES,
            lambda: ClusterAdapter(dsn),
            lambda adapter, step, path: kill_write(adapter, step, path, monitor),
            lambda path, line: KillResult(path, 0, 0, (line,)),
        )


def terminate_every_write(root: Roots, dsn: str) -> list[TerminateResult]:
    """Terminate mode over the traces under `root`: every write path, every query boundary."""
    with psycopg.connect(dsn, autocommit=True) as monitor:
        return every_write(
            root,
            CAPABILITIES,
            lambda: ClusterAdapter(dsn),
            lambda adapter, step, path: terminate_write(adapter, step, path, monitor),
            lambda path, line: TerminateResult(path, 0, 0, (line,)),
        )
