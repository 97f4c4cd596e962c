"""Lock probe: a write path's transaction locks what it loaded until it commits (issue 16 item 2;
SPEC B-35, D-2).

A trace replayed serially never shows a missing row lock: nothing else runs while a write is
between its load and its commit. The probe makes it visible without a race. For every write path
of the corpus (`conformance.run.walk`: the first applied occurrence of every (command, outcome
code) pair, in the state its trace built) it runs the write on the adapter's own store through
`runners.engine.execute` and, inside the write's transaction, just after the aggregate was
loaded and before its first effect is written, lets a **second connection** contend for what the
write should hold:

- PostgreSQL (B-35: Run, Attempt, policy and lease rows are loaded `FOR UPDATE`): one connection
  per kind of row the aggregate has, each running `SELECT ... FOR UPDATE` on those rows
  (`sql/locks.sql`). Each must be seen blocked by the write's backend (`pg_blocking_pids`, polled
  up to `BLOCK_WAIT_S`) before the next starts; one that gets its rows instead is reported (and
  ends its transaction at once, so the write is not held up by the probe).
- SQLite (D-2: every write is one `BEGIN IMMEDIATE` transaction): a connection with no busy
  timeout must be refused `BEGIN IMMEDIATE` (`SQLITE_BUSY`); then a connection with a generous
  busy timeout starts its own `BEGIN IMMEDIATE` and waits.

A Workflow write (SPEC §4, issue 18 item 3) is probed the same way: `execute_workflow` loads
the Workflow aggregate (on PostgreSQL the Run row `FOR UPDATE` first, then its Attempts, every
Workflow transaction writing the Run; on SQLite inside `BEGIN IMMEDIATE`), and the contenders
contend for its Run-side rows (the Run, its Task Attempts) while it holds them.

The write then goes on; once it has returned, every waiting contender must complete (bounded by
`RELEASE_WAIT_S`): the lock was the write's transaction's, released by its commit. The write must
still return the step's outcome and leave the step's after-state. A write whose aggregate does
not exist yet (`admit_run`) has no rows to lock: it is counted, with no contender. No absolute
time is asserted: "blocked" is what the server (or SQLite's refusal) says, and the waits only
bound how long a broken runner can hold the probe up.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, cast

from conformance.run import edge
from conformance.run.corpus import RUN_CORPUS
from conformance.run.edge import EdgeAdapter, make_edge_adapter
from conformance.run.trace import Step
from conformance.run.walk import Roots, WritePath, every_write, run_write
from kernel import RunAggregate
from kernel.approved_action import ActionAggregate, AnyActionEffect
from kernel.workflow import WorkflowAggregate, WorkflowEffect
from runners.edge.named_sql import STATEMENTS as EDGE_STATEMENTS
from runners.engine import (
    ActionStorageTransaction,
    Storage,
    StorageTransaction,
    WorkflowStorageTransaction,
)
from runners.named_sql import load

__all__ = [
    "BLOCK_WAIT_S",
    "RELEASE_WAIT_S",
    "LockReport",
    "LockResult",
    "lock_every_write_cluster",
    "lock_every_write_edge",
    "probe_write",
]

#: How long a contender may take to show it is blocked (a busy machine can be slow to start it).
BLOCK_WAIT_S: Final = 10.0
#: How long a blocked contender may take to complete once the write has returned.
RELEASE_WAIT_S: Final = 30.0

STATEMENTS: Final = load("conformance.run", "locks.sql")


@dataclass(frozen=True, slots=True)
class LockResult:
    """One write path: how many contenders were seen blocked, and one line per finding."""

    path: WritePath
    contenders: int
    failures: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LockReport:
    results: tuple[LockResult, ...]

    @property
    def failures(self) -> list[str]:
        return [line for r in self.results for line in r.failures]

    def summary(self) -> str:
        blocked = sum(r.contenders for r in self.results)
        return (
            f"lock probe: {len(self.results)} write paths, {blocked} second connections blocked "
            f"while a write held its transaction after the load, "
            f"{len(self.failures)} failures"
        )


class Contender(Protocol):
    """A runner's second connection, contending for what a write loaded (see the module doc)."""

    def hold(self, tx: StorageTransaction, aggregate: RunAggregate | None) -> list[str]:
        """In the write's transaction after the load: start the contenders and prove each one
        blocked; return the findings (a contender that got through ended its transaction).
        `aggregate` is the Run the write loaded; None for an approval write on an action
        whose Run does not exist yet (the action row is what it loaded)."""
        ...

    def finish(self) -> tuple[int, list[str]]:
        """After the write returned: wait for the blocked contenders to complete; return how
        many were blocked, and the findings."""
        ...


#: What a held transaction calls once, after the load and before the first effect.
_Hold = Callable[[StorageTransaction, RunAggregate | None], None]


class _Writer(Protocol):
    """A store's transaction as a write executes through it: every domain's effects."""

    def execute(self, effect: WorkflowEffect | AnyActionEffect) -> None: ...


class _Held:
    """The write's transaction: the loads as they are, `hold` run once before the first
    effect (the aggregate is loaded and, on PostgreSQL, locked; nothing is written yet)."""

    def __init__(self, inner: StorageTransaction, hold: _Hold) -> None:
        self._inner = inner
        self._hold = hold
        self._loaded: RunAggregate | None = None
        self._action_loaded = False
        self._held = False

    def __getattr__(self, name: str) -> Any:
        # Anything else a store's transaction offers (its connection) is the store's own.
        return getattr(self._inner, name)

    def load_run(self, run_id: str) -> RunAggregate | None:
        self._loaded = self._inner.load_run(run_id)
        return self._loaded

    def load_run_of_attempt(self, attempt_id: str) -> RunAggregate | None:
        self._loaded = self._inner.load_run_of_attempt(attempt_id)
        return self._loaded

    # A Workflow write loads its Workflow; what the contenders contend for is its Run-side
    # rows (the store must persist Workflows: the trace needs the `workflow` capability).
    def load_workflow(self, run_id: str) -> WorkflowAggregate | None:
        return self._workflow(cast(WorkflowStorageTransaction, self._inner).load_workflow(run_id))

    def load_workflow_of_attempt(self, attempt_id: str) -> WorkflowAggregate | None:
        inner = cast(WorkflowStorageTransaction, self._inner)
        return self._workflow(inner.load_workflow_of_attempt(attempt_id))

    def _workflow(self, loaded: WorkflowAggregate | None) -> WorkflowAggregate | None:
        if loaded is not None:
            self._loaded = loaded.core
        return loaded

    # An approval write (SPEC §5, issue 19) loads an action and the Run under its Run id;
    # the contenders contend while it holds them (on SQLite, its `BEGIN IMMEDIATE`).
    def load_action(self, action_id: str) -> ActionAggregate | None:
        loaded = cast(ActionStorageTransaction, self._inner).load_action(action_id)
        if loaded is not None:
            self._action_loaded = True
            self._loaded = loaded.run
        return loaded

    def execute(self, effect: WorkflowEffect | AnyActionEffect) -> None:
        if not self._held:
            self._held = True
            if self._loaded is not None or self._action_loaded:
                self._hold(self._inner, self._loaded)
        cast(_Writer, self._inner).execute(effect)


class _Holding:
    """A `Storage` whose transactions are `_Held`."""

    def __init__(self, inner: Storage, hold: _Hold) -> None:
        self._inner = inner
        self._hold = hold

    @contextmanager
    def transaction(self) -> Iterator[_Held]:
        with self._inner.transaction() as tx:
            yield _Held(tx, self._hold)


def probe_write(store: Storage, step: Step, path: WritePath, contender: Contender) -> LockResult:
    """Run the write of `path` on `store` (in its pre-state) with the contenders let loose after
    its load; it must still apply as the step expects. The store is left in the after-state."""
    findings: list[str] = []

    def hold(tx: StorageTransaction, aggregate: RunAggregate | None) -> None:
        findings.extend(contender.hold(tx, aggregate))

    try:
        outcome = run_write(_Holding(store, hold), path)
    finally:
        blocked, late = contender.finish()
    findings.extend(late)
    actual = (outcome.kind.value, outcome.code.value)
    if actual != (step.expect.kind, step.expect.code):
        expected = f"{step.expect.kind} {step.expect.code or ''}".rstrip()
        findings.append(f"returned {actual[0]} {actual[1]} under the probe, expected {expected}")
    return LockResult(path, blocked, tuple(f"{path.label}: {line}" for line in findings))


def lock_every_write_cluster(root: Roots, dsn: str) -> LockReport:
    """The lock probe over the traces under `root` on the cluster runner
    (`conformance.run.locks_cluster`, imported here: the edge probe needs no psycopg, which the
    main job's install, `pip install -e .`, does not have)."""
    from conformance.run.locks_cluster import lock_every_write_pg  # noqa: PLC0415

    return lock_every_write_pg(root, dsn)


# ---------------------------------------------------------------------------- SQLite --------


def _busy(exc: sqlite3.OperationalError) -> bool:
    return getattr(exc, "sqlite_errorname", "") in {"SQLITE_BUSY", "SQLITE_LOCKED"}


class SqliteContender:
    """`BEGIN IMMEDIATE` from a second connection on the write's database file (D-2)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._waiter: threading.Thread | None = None
        self._error: str | None = None

    def _connect(self, timeout_s: float) -> sqlite3.Connection:
        return sqlite3.connect(
            self.path, timeout=timeout_s, isolation_level=None, check_same_thread=False
        )

    def hold(self, tx: StorageTransaction, aggregate: RunAggregate | None) -> list[str]:
        conn = self._connect(0.0)
        try:
            conn.execute(EDGE_STATEMENTS["begin_immediate"])
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                return [f"a second connection's BEGIN IMMEDIATE failed: {exc}"]
        else:
            conn.execute(
                EDGE_STATEMENTS["rollback"]
            )  # at once: the write must not wait for the probe
            return [
                "a second connection's BEGIN IMMEDIATE did not block while the write held its "
                "transaction after the load"
            ]
        finally:
            conn.close()

        def wait() -> None:
            try:
                waiting = self._connect(RELEASE_WAIT_S)
                try:
                    waiting.execute(EDGE_STATEMENTS["begin_immediate"])
                    waiting.execute(EDGE_STATEMENTS["rollback"])
                finally:
                    waiting.close()
            except Exception as exc:  # reported by `finish`, never lost in a thread
                self._error = f"{type(exc).__name__}: {exc}"

        self._waiter = threading.Thread(target=wait, daemon=True)
        self._waiter.start()
        return []

    def finish(self) -> tuple[int, list[str]]:
        waiter, self._waiter = self._waiter, None
        if waiter is None:
            return 0, []
        waiter.join(RELEASE_WAIT_S * 2)
        if waiter.is_alive():
            return 1, ["the second connection's BEGIN IMMEDIATE never completed"]
        if self._error is not None:
            return 1, [f"the second connection's BEGIN IMMEDIATE failed: {self._error}"]
        return 1, []


def lock_every_write_edge(root: Roots = RUN_CORPUS) -> LockReport:
    """The lock probe over the traces under `root` on the edge runner."""

    def probe(adapter: EdgeAdapter, step: Step, path: WritePath) -> LockResult:
        return probe_write(adapter.store, step, path, SqliteContender(adapter.store.path))

    results = every_write(
        root,
        edge.CAPABILITIES,
        make_edge_adapter,
        probe,
        lambda path, line: LockResult(path, 0, (line,)),
    )
    return LockReport(tuple(results))
