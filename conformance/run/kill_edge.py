"""Kill mode: SIGKILL the edge runner at every statement boundary of every write path (issue 4,
item 3; RUN-06, RETRY-10).

For one write (a command applied to a database file in a known state) the statements the runner
executes are counted with `sqlite3.Connection.set_trace_callback` in a dry run on a copy. Then,
for k = 0..n, a forked child opens another copy, runs the same command, and is SIGKILLed just
before statement k + 1 starts (k = n: right after the transaction returned). The parent reopens
the file and requires the durable state to be exactly the state before the write (k < n: the
`COMMIT` never ran) or exactly the state after it (k = n). A kill is a real process death: no
Python cleanup, no rollback by the runner, only SQLite's own recovery on the next open.

Write paths are taken from the corpus (named traces first): the first applied occurrence of
every (command, outcome code) pair, each in the state its trace built.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from conformance.run.corpus import RUN_CORPUS, read_trace, trace_paths
from conformance.run.edge import CAPABILITIES, EdgeAdapter
from conformance.run.projection import Projection, diff
from conformance.run.replay import apply_step
from conformance.run.trace import Step, decode_trace_command
from kernel import Command, Rejected
from runners.edge.store import EdgeStore
from runners.engine import execute

FILES = ("", "-wal", "-shm")


@dataclass(frozen=True, slots=True)
class WritePath:
    """One write to kill: the trace and step it comes from, and the command."""

    trace: str
    step: int
    command: Command
    observed_at_ms: int
    code: str

    @property
    def label(self) -> str:
        return f"{self.command.name}:{self.code} ({self.trace} step {self.step})"


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


def _count_statements(path: Path, command: Command, at: int) -> int:
    store = EdgeStore(path)
    count = 0

    def trace(_sql: str) -> None:
        nonlocal count
        count += 1

    try:
        with store.authority.reading() as conn:
            conn.set_trace_callback(trace)
        execute(store, command, at)
    finally:
        store.close()
    return count


def _killed_child(path: Path, command: Command, at: int, k: int, n: int) -> None:
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
    execute(store, command, at)
    if k >= n:
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(3)  # the kill did not happen: reported as a failure by the parent


def kill_write(pre: Path, path: WritePath, scratch: Path) -> KillResult:
    """Every boundary of one write, starting from the database file `pre`."""
    before = _project(pre)
    dry = scratch / "dry.sqlite3"
    _copy(pre, dry)
    n = _count_statements(dry, path.command, path.observed_at_ms)
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


def write_paths(root: Path = RUN_CORPUS) -> Iterator[tuple[Path, WritePath, Callable[[], None]]]:
    """Walk the named traces on an edge database and yield, before each first occurrence of a
    (command, code) write, the database file in its pre-state. The caller kills the write,
    then calls the continuation, which applies the step and goes on."""
    seen: set[tuple[str, str]] = set()
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
            continue  # nothing new to kill here: do not pay for the replay
        directory = Path(tempfile.mkdtemp(prefix="ql3-kill-"))
        try:
            db = directory / "edge.sqlite3"
            adapter = EdgeAdapter(db)
            try:
                for step in trace.steps:
                    candidate = _write_of(trace.header.name, step)
                    key = None if candidate is None else (candidate.command.name, candidate.code)
                    if candidate is not None and key is not None and key not in seen:
                        seen.add(key)
                        adapter.store.close()
                        yield db, candidate, adapter.reopen
                    apply_step(adapter, step)
            finally:
                adapter.close()
        finally:
            shutil.rmtree(directory, ignore_errors=True)


def _write_of(trace: str, step: Step) -> WritePath | None:
    if step.command is None or step.fault is not None or step.expect.kind != "applied":
        return None
    command = decode_trace_command(step.command)
    if isinstance(command, Rejected):
        return None
    return WritePath(trace, step.step, command, step.observed_at_ms, step.expect.code or "")


def kill_every_write(root: Path = RUN_CORPUS) -> list[KillResult]:
    """Kill mode over the corpus: every write path, every statement boundary."""
    results: list[KillResult] = []
    scratch = Path(tempfile.mkdtemp(prefix="ql3-kill-scratch-"))
    try:
        for pre, path, resume in write_paths(root):
            results.append(kill_write(pre, path, scratch))
            resume()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return results
