"""Kill mode for any runner through the adapter port: SIGKILL at every boundary of the storage
port of every write path (issue 16 item 4; RUN-06, RETRY-10).

The built-in runners are killed at every SQL statement (`kill_edge`, `kill_cluster`). A
third-party runner's statements are invisible to the suite, but its storage port is not: the
engine opens one `Storage.transaction()` per command and hands it the kernel's effects one by
one. An adapter that offers the kill-mode port (`conformance.run.adapter.KillPort`, capability
`kill`: `adapter.store`, a picklable `adapter.locator()`, and a factory that accepts it) gets,
for a write of m effects, m + 2 boundaries:

- k = 0..m-1: in the transaction, just before `execute(effect k + 1)`;
- k = m: after the last effect returned, before the transaction commits;
- k = m + 1: after the transaction committed (and the engine returned the outcome).

For each k, a forked child re-creates the adapter on the same database (`factory(locator)`),
runs the write through the engine with the store wrapped so that it SIGKILLs itself at boundary
k, and dies. The parent re-opens its own adapter (`reopen()`, a process restart) and requires
exactly the state before the write for k <= m (nothing committed) and exactly the step's
expected state for k = m + 1; the last child must also have seen the step's outcome, so the
same command applies, after all the earlier kills, with the outcome the trace expects. A store
that persists an effect outside its transaction (a write split into two commits, effects written
one by one) leaves a state that is neither, and is reported with the boundary and a field-level
diff. The parent then continues the trace from the after-state the last child committed.

Write paths are the corpus's, walked by `conformance.run.walk` (the first applied occurrence of
every (command, outcome code) pair, named traces first). A Workflow command (SPEC §4) is one
`execute_workflow` transaction like any other write: an adapter that declares `kill` and
`workflow` has its Workflow write paths killed at the same boundaries (WF-05), and one that
declares `approved_action` its approval write paths (SPEC §5, issue 19). An adapter
without the port is not killed: `missing_port` says which part it lacks, and `qlk conform`
reports kill mode as not run, never as passed.
"""

from __future__ import annotations

import os
import pickle
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, cast

from conformance.run.adapter import KILL, ConformanceAdapter, KillPort
from conformance.run.corpus import RUN_CORPUS
from conformance.run.projection import Projection, diff
from conformance.run.trace import Step
from conformance.run.walk import Roots, WritePath, decide, effects_of, every_write, run_write
from kernel import Outcome, RunAggregate
from kernel.approved_action import ActionAggregate, ActionOutcome, AnyActionEffect
from kernel.workflow import WorkflowAggregate, WorkflowEffect, WorkflowOutcome
from runners.engine import (
    ActionStorageTransaction,
    Storage,
    StorageTransaction,
    WorkflowStorageTransaction,
)

__all__ = ["PortKillReport", "PortKillResult", "kill_every_write", "missing_port"]

#: An effect of any domain: Run, Workflow (SPEC §4) or approval (SPEC §5, issue 19).
AnyEffect = WorkflowEffect | AnyActionEffect


class _Writer(Protocol):
    def execute(self, effect: AnyEffect) -> None: ...


#: A child that neither dies at its boundary nor returns within this many seconds is stopped
#: by SIGALRM and reported (a hung store must not hang the suite); far above any real write.
CHILD_DEADLINE_S = 120

#: Exit statuses of a child that was not killed: the write returned before its boundary, or
#: re-creating the adapter or running the write raised.
_RETURNED = 3
_RAISED = 4

#: `factory()` for a fresh database, `factory(locator)` for the same database as another adapter.
PortFactory = Callable[..., ConformanceAdapter]


@dataclass(frozen=True, slots=True)
class PortKillResult:
    """One write path: its effects (m), the SIGKILLs that happened, one line per failure."""

    path: WritePath
    effects: int
    kills: int
    failures: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PortKillReport:
    """Kill mode over a corpus, or why it did not run (`not_run`: the part of the port the
    adapter lacks)."""

    results: tuple[PortKillResult, ...] = ()
    not_run: str | None = None

    @property
    def kills(self) -> int:
        return sum(r.kills for r in self.results)

    @property
    def failures(self) -> list[str]:
        return [line for r in self.results for line in r.failures]

    def summary(self) -> str:
        return (
            f"{len(self.results)} write paths, {self.kills} SIGKILLs at every storage-port "
            f"boundary (before each effect, before and after commit), "
            f"{len(self.failures)} failures"
        )


def missing_port(adapter: ConformanceAdapter) -> str | None:
    """Why `adapter` cannot be killed through the port, or None when it offers all of it."""
    if KILL not in adapter.capabilities:
        return (
            f"its adapter does not declare the {KILL!r} capability (the kill-mode port: "
            "adapter.store, a picklable adapter.locator() and factory(locator))"
        )
    if getattr(adapter, "store", None) is None:
        return f"it declares {KILL!r} but its adapter has no store (the storage port)"
    locator = getattr(adapter, "locator", None)
    if not callable(locator):
        return f"it declares {KILL!r} but its adapter has no locator() method"
    try:
        pickle.dumps(locator())
    except Exception as exc:  # the port's contract, reported in one line
        return f"it declares {KILL!r} but adapter.locator() is not picklable ({exc})"
    return None


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _KillingTransaction:
    """The child's transaction: SIGKILL just before effect number `at + 1` is executed."""

    def __init__(self, inner: StorageTransaction, at: int) -> None:
        self._inner = inner
        self._at = at
        self.executed = 0

    def load_run(self, run_id: str) -> RunAggregate | None:
        return self._inner.load_run(run_id)

    def load_run_of_attempt(self, attempt_id: str) -> RunAggregate | None:
        return self._inner.load_run_of_attempt(attempt_id)

    # A Workflow write (SPEC §4) loads its Workflow: the store must be a `WorkflowStorage`
    # (the trace needs the `workflow` capability, so the adapter declared it).
    def load_workflow(self, run_id: str) -> WorkflowAggregate | None:
        return cast(WorkflowStorageTransaction, self._inner).load_workflow(run_id)

    def load_workflow_of_attempt(self, attempt_id: str) -> WorkflowAggregate | None:
        inner = cast(WorkflowStorageTransaction, self._inner)
        return inner.load_workflow_of_attempt(attempt_id)

    # An approval write (SPEC §5, issue 19) loads its action (the `approved_action` capability).
    def load_action(self, action_id: str) -> ActionAggregate | None:
        return cast(ActionStorageTransaction, self._inner).load_action(action_id)

    def execute(self, effect: AnyEffect) -> None:
        if self.executed == self._at:
            _die()
        self.executed += 1
        cast(_Writer, self._inner).execute(effect)


class _KillingStorage:
    """The child's store: boundary k < m dies in `execute`, k = m after the last effect and
    before the store's own commit (the block ended normally), k = m + 1 never here."""

    def __init__(self, inner: Storage, at: int, effects: int) -> None:
        self._inner = inner
        self._at = at
        self._effects = effects

    @contextmanager
    def transaction(self) -> Iterator[_KillingTransaction]:
        with self._inner.transaction() as tx:
            yield _KillingTransaction(tx, self._at)
            if self._at == self._effects:
                _die()


def _boundary(k: int, effects: tuple[AnyEffect, ...]) -> str:
    m = len(effects)
    if k < m:
        return f"before effect {k + 1}/{m} ({type(effects[k]).__name__})"
    return "after the last effect, before commit" if k == m else "after commit"


def _child(
    factory: PortFactory, locator: bytes, path: WritePath, k: int, m: int, *, fd: int
) -> None:
    """In the forked child: the adapter re-created on the same database, the write run with a
    SIGKILL at boundary k. Never returns; what it saw goes to `fd` before it dies or exits."""
    signal.alarm(CHILD_DEADLINE_S)
    try:
        adapter = cast(KillPort, factory(pickle.loads(locator)))  # noqa: S301 - our own bytes
        outcome = run_write(_KillingStorage(adapter.store, k, m), path)
        os.write(fd, f"{outcome.kind.value} {outcome.code.value}".encode())
        if k > m:
            _die()
        os._exit(_RETURNED)
    except BaseException as exc:  # the child reports and exits; the parent says what it saw
        os.write(fd, f"{type(exc).__name__}: {exc}".encode()[:2000])
        os._exit(_RAISED)


def _run_child(
    factory: PortFactory, locator: bytes, path: WritePath, k: int, m: int
) -> tuple[bool, str]:
    """(killed by SIGKILL, what the child wrote) for one boundary."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        try:
            os.close(read_end)
            _child(factory, locator, path, k, m, fd=write_end)
        finally:
            os._exit(_RAISED)
    os.close(write_end)
    chunks = []
    with os.fdopen(read_end, "rb") as pipe:
        chunks.append(pipe.read())
    _, status = os.waitpid(pid, 0)
    said = b"".join(chunks).decode(errors="replace")
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    if not killed and os.WIFSIGNALED(status):
        said = f"ended by signal {os.WTERMSIG(status)} {said}".strip()
    return killed, said


class _Abort(Exception):
    """Raised in the parent's dry transaction so that the store rolls it back."""


def _effects_of(store: Storage, path: WritePath) -> tuple[AnyEffect, ...] | str:
    """The effects the kernel returns for the write in the store's current state (a transaction
    that is rolled back), or why there are none."""
    found: list[Outcome | WorkflowOutcome | ActionOutcome] = []
    try:
        with store.transaction() as tx:
            found.append(decide(tx, path.command, path.observed_at_ms))
            raise _Abort
    except _Abort:
        pass
    outcome = found[0]
    effects = effects_of(outcome)
    if effects is None:
        return f"the kernel answers {outcome.kind.value} {outcome.code.value}, not applied"
    return effects


def _check(state: Projection, expected: Projection) -> str | None:
    changes = diff(expected, state)
    return None if not changes else "; ".join(changes[:3])


def kill_write(
    factory: PortFactory, adapter: ConformanceAdapter, step: Step, path: WritePath
) -> PortKillResult:
    """Every boundary of one write on `adapter`'s database, which is in the write's pre-state;
    on success the database is left in the step's after-state (the last child committed it)."""
    port = cast(KillPort, adapter)
    before = adapter.project()
    effects = _effects_of(port.store, path)
    if isinstance(effects, str):
        return PortKillResult(path, 0, 0, (f"{path.label}: {effects}",))
    m = len(effects)
    locator = pickle.dumps(port.locator())
    expected_outcome = f"{step.expect.kind} {step.expect.code or ''}".strip()
    kills = 0
    for k in range(m + 2):
        where = f"{path.label}: killed {_boundary(k, effects)}"
        killed, said = _run_child(factory, locator, path, k, m)
        if not killed:
            why = said or "no report"
            line = f"{path.label}: the kill {_boundary(k, effects)} did not happen ({why})"
            return PortKillResult(path, m, kills, (line,))
        kills += 1
        adapter.reopen()
        committed = k > m
        problem = _check(adapter.project(), step.expect.projection if committed else before)
        if problem is not None:
            which = "after" if committed else "before"
            line = f"{where}: not the {which}-state: {problem}"
            return PortKillResult(path, m, kills, (line,))
        if committed and said != expected_outcome:
            line = f"{where}: the write answered {said!r}, the trace expects {expected_outcome!r}"
            return PortKillResult(path, m, kills, (line,))
    return PortKillResult(path, m, kills, ())


def kill_every_write(
    factory: PortFactory,
    root: Roots = RUN_CORPUS,
    *,
    fresh: Callable[[], ConformanceAdapter] | None = None,
) -> PortKillReport:
    """Kill mode over the corpus for the runner made by `factory`, or why it cannot run.
    `fresh` makes the parent's adapters on new databases (default `factory` itself; the CLI
    passes one that reports a raising factory as `RunnerFailed`); children call
    `factory(locator)`."""
    make = factory if fresh is None else fresh
    probe = make()
    try:
        why = missing_port(probe)
        capabilities = probe.capabilities
    finally:
        probe.close()
    if why is not None:
        return PortKillReport(not_run=why)
    results = every_write(
        root,
        capabilities,
        make,
        lambda adapter, step, path: kill_write(factory, adapter, step, path),
        lambda path, line: PortKillResult(path, 0, 0, (line,)),
    )
    return PortKillReport(tuple(results))
