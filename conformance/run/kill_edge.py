"""Kill mode: SIGKILL the edge runner at every statement boundary of every write path (issue 4,
item 3, issue 16 item 2; RUN-06, RETRY-10).

For one write (a command applied to a database file in a known state) the statements the runner
executes are counted with `sqlite3.Connection.set_trace_callback` in a dry run on a copy: every
statement the connection runs while `execute` runs, `BEGIN IMMEDIATE` and `COMMIT` included, in
however many transactions the write opens (so a write split into two commits has boundaries
between them, and a kill there leaves a state that is neither the before- nor the after-state:
a write must commit exactly once). Then,
for k = 0..n, a forked child opens another copy, runs the same command, and is SIGKILLed just
before statement k + 1 starts (k = n: right after the transaction returned). The parent reopens
the file and requires the durable state to be exactly the state before the write (k < n: the
`COMMIT` never ran) or exactly the state after it (k = n). A kill is a real process death: no
Python cleanup, no rollback by the runner, only SQLite's own recovery on the next open.

Write paths are taken from the corpus by `conformance.run.walk` (named traces first): the first
applied occurrence of every (command, outcome code) pair, each in the state its trace built. A
Workflow command (SPEC §4) is one `execute_workflow` transaction like any other write: its
`BEGIN IMMEDIATE`, its Workflow loads, every effect and its `COMMIT` are boundaries, and the
projection holds the Workflow tables (WF-05: a fault at any statement leaves nothing). A
runner that raises or diverges is reported, never a traceback: a dry run that raises is the
path's failure, and a trace whose replay diverges reports the paths it could not reach.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path

from conformance.run.adapter import execute_command
from conformance.run.corpus import RUN_CORPUS
from conformance.run.edge import CAPABILITIES, EdgeAdapter, make_edge_adapter
from conformance.run.projection import Projection, diff
from conformance.run.replay import apply_step
from conformance.run.trace import AnyCommand, Step
from conformance.run.walk import Roots, WritePath, every_write
from runners.edge.store import EdgeStore

__all__ = ["KillResult", "WritePath", "kill_at", "kill_every_write", "kill_write"]

FILES = ("", "-wal", "-shm")


@dataclass(frozen=True, slots=True)
class KillResult:
    path: WritePath
    statements: int  # statements of the write transaction, BEGIN to COMMIT
    kills: int
    failures: tuple[str, ...]  # one line per boundary whose state was neither before nor after


def _copy(source: Path, target: Path) -> None:
    for suffix in FILES:
        src = Path(f"{source}{suffix}")
        if src.exists():
            shutil.copyfile(src, f"{target}{suffix}")


def _project(path: Path) -> Projection:
    store = EdgeStore(path)
    try:
        return store.project()
    finally:
        store.close()


def _count_statements(path: Path, command: AnyCommand, at: int) -> int:
    store = EdgeStore(path)
    count = 0

    def trace(_sql: str) -> None:
        nonlocal count
        count += 1

    try:
        with store.authority.reading() as conn:
            conn.set_trace_callback(trace)
        execute_command(store, command, at)
    finally:
        store.close()
    return count


def _killed_child(path: Path, command: AnyCommand, at: int, k: int, n: int) -> None:
    """In the child: run the write and die by SIGKILL before statement k + 1 (or after it all)."""
    store = EdgeStore(path)
    seen = 0

    def trace(_sql: str) -> None:
        nonlocal seen
        seen += 1
        if seen == k + 1:
            os.kill(os.getpid(), signal.SIGKILL)

    with store.authority.reading() as conn:
        conn.set_trace_callback(trace)
    execute_command(store, command, at)
    if k >= n:
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(3)  # the kill did not happen: reported as a failure by the parent


def kill_at(path: Path, command: AnyCommand, at: int, *, committed: bool) -> bool:
    """SIGKILL a child process running `command` on the database file `path` itself, just
    before its last statement (`COMMIT`: nothing of it is durable) or, `committed`, right after
    the write returned (the response is lost). True when the child died by SIGKILL. The caller
    reopens the file and redelivers (the approval corpus's kill-at-every-step check, issue 19)."""
    dry = path.with_name(path.name + ".dry")
    _copy(path, dry)
    try:
        n = _count_statements(dry, command, at)
    finally:
        for suffix in FILES:
            Path(f"{dry}{suffix}").unlink(missing_ok=True)
    k = n if committed else n - 1
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        try:
            _killed_child(path, command, at, k, n)
        finally:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def kill_write(pre: Path, path: WritePath, scratch: Path) -> KillResult:
    """Every boundary of one write, starting from the database file `pre`."""
    before = _project(pre)
    dry = scratch / "dry.sqlite3"
    _copy(pre, dry)
    try:
        n = _count_statements(dry, path.command, path.observed_at_ms)
    except Exception as exc:  # the runner's own failure is this path's finding, not a crash
        line = f"{path.label}: the write raised {type(exc).__name__}: {exc}"
        return KillResult(path, 0, 0, (line,))
    after = _project(dry)
    failures: list[str] = []
    kills = 0
    for k in range(n + 1):
        work = scratch / f"kill-{k}.sqlite3"
        _copy(pre, work)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            try:
                _killed_child(work, path.command, path.observed_at_ms, k, n)
            finally:
                os._exit(4)
        _, status = os.waitpid(pid, 0)
        if not os.WIFSIGNALED(status) or os.WTERMSIG(status) != signal.SIGKILL:
            failures.append(f"{path.label}: kill after statement {k} did not happen")
            continue
        kills += 1
        expected = after if k >= n else before
        state = _project(work)
        if state != expected:
            which = "after" if k >= n else "before"
            changes = "; ".join(diff(expected, state)[:3])
            failures.append(
                f"{path.label}: killed after statement {k}/{n}, not the {which}-state: {changes}"
            )
        for suffix in FILES:
            Path(f"{work}{suffix}").unlink(missing_ok=True)
    return KillResult(path, n, kills, tuple(failures))


def _kill_step(adapter: EdgeAdapter, step: Step, path: WritePath, scratch: Path) -> KillResult:
    """Kill mode for one write path on copies of the adapter's file in its pre-state, then
    the step applied on the file itself, as the walk expects."""
    adapter.store.close()
    try:
        result = kill_write(adapter.store.path, path, scratch)
    finally:
        adapter.reopen()
    try:
        apply_step(adapter, step)
    except Exception as exc:  # the walk stops here (not the after-state); say why once
        if result.failures:
            return result
        line = f"{path.label}: the write raised {type(exc).__name__}: {exc}"
        return KillResult(path, result.statements, result.kills, (line,))
    return result


def kill_every_write(root: Roots = RUN_CORPUS) -> list[KillResult]:
    """Kill mode over the traces under `root` (one directory, or several walked in order: `qlk
    conform` passes the run and the Workflow corpus): every write path, every statement
    boundary."""
    scratch = Path(tempfile.mkdtemp(prefix="ql3-kill-scratch-"))
    try:
        return every_write(
            root,
            CAPABILITIES,
            make_edge_adapter,
            lambda adapter, step, path: _kill_step(adapter, step, path, scratch),
            lambda path, line: KillResult(path, 0, 0, (line,)),
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
