"""The walk of kill, terminate and lock modes: every write path of a corpus in its pre-state
(issue 16 items 2 and 3, issue 18 item 3; RUN-06, RETRY-10, B-35, D-2, WF-05).

A write path is the first applied occurrence of a (command, outcome code) pair in the corpus,
named traces first, each in the state its own trace built on a fresh adapter. Run commands,
Workflow commands and approval-domain commands alike (SPEC §4: a Workflow command is one
transaction through `runners.engine.execute_workflow`; SPEC §5, issue 19: an approval command
one through `execute_action`; `run_write` picks the entry point); a corpus may be several
roots (the run corpus, then the Workflow corpus), walked in order with one set of pairs seen, so
a Run command that a Workflow trace also applies is not faulted twice. `every_write`
replays each trace that has a new path, hands every new path to `handle` in its pre-state
(`handle` must leave the step applied, as the trace expects), and replays every other step as
the replayer does.

A walk never crashes on a broken runner and never hides what it could not check: a step that
raises or diverges (outcome, page or projection), a `handle` that raises, or a write that did
not leave its after-state stops that trace, and every path the trace still had that no later
trace reaches is reported through `missed`, one result per stopped trace naming the cause and
the paths left unchecked. The replay reports the divergence itself; a mode reports what it lost.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

from conformance.run.adapter import ConformanceAdapter, execute_command
from conformance.run.corpus import read_text, read_trace, trace_paths
from conformance.run.projection import diff
from conformance.run.replay import apply_step, step_label
from conformance.run.trace import AnyCommand, Step, decode_trace_command
from kernel import Applied, Command, Effect, Outcome, Rejected, apply
from kernel.approved_action import (
    ActionApplied,
    ActionOutcome,
    AnyActionEffect,
    apply_action,
    is_action_command,
)
from kernel.workflow import (
    WorkflowApplied,
    WorkflowEffect,
    WorkflowOutcome,
    apply_workflow,
    is_workflow_command,
)
from runners.engine import (
    ActionStorageTransaction,
    Storage,
    StorageTransaction,
    WorkflowStorageTransaction,
    load_for,
    load_workflow_for,
)

__all__ = [
    "Roots",
    "WritePath",
    "decide",
    "effects_of",
    "every_write",
    "run_write",
    "trace_files",
    "write_of",
]

#: One trace directory, or several walked in order (`qlk conform`: the run corpus, then the
#: Workflow corpus) with one set of write paths seen.
Roots = Path | Sequence[Path]


@dataclass(frozen=True, slots=True)
class WritePath:
    """One write to fault or probe: the trace and step it comes from, and the command."""

    trace: str
    step: int
    command: AnyCommand
    observed_at_ms: int
    code: str

    @property
    def key(self) -> tuple[str, str]:
        return self.command.name, self.code

    @property
    def label(self) -> str:
        return f"{self.command.name}:{self.code} ({self.trace} step {self.step})"


def write_of(trace: str, step: Step) -> WritePath | None:
    """The write path of a step: an applied command without a fault, or None."""
    if step.command is None or step.fault is not None or step.expect.kind != "applied":
        return None
    command = decode_trace_command(step.command)
    if isinstance(command, Rejected):
        return None
    return WritePath(trace, step.step, command, step.observed_at_ms, step.expect.code or "")


def run_write(storage: Storage, path: WritePath) -> Outcome | WorkflowOutcome | ActionOutcome:
    """Run the write of `path` on `storage` through the engine entry point of its domain."""
    return execute_command(storage, path.command, path.observed_at_ms)


def decide(
    tx: StorageTransaction, command: AnyCommand, at: int
) -> Outcome | WorkflowOutcome | ActionOutcome:
    """The kernel's answer to `command` at `at` on what `tx` loads, as the engine asks it: the
    Run transition on the Run aggregate, the Workflow transition on the Workflow aggregate
    (`tx` must then be a `WorkflowStorageTransaction`), or the approval transition on the
    action and its Run (an `ActionStorageTransaction`). Nothing is written."""
    if is_action_command(command):
        action = cast(ActionStorageTransaction, tx).load_action(command.action_id)
        return apply_action(action, command, at)
    if is_workflow_command(command):
        loaded = load_workflow_for(cast(WorkflowStorageTransaction, tx), command)
        return apply_workflow(loaded, command, at)
    run_command = cast(Command, command)
    return apply(load_for(tx, run_command), run_command, at)


def effects_of(
    outcome: Outcome | WorkflowOutcome | ActionOutcome,
) -> tuple[Effect | WorkflowEffect | AnyActionEffect, ...] | None:
    """The effects of an applied outcome of any domain, or None when it did not apply."""
    if isinstance(outcome, Applied | WorkflowApplied | ActionApplied):
        return outcome.effects
    return None


A = TypeVar("A", bound=ConformanceAdapter)
R = TypeVar("R")


def _diverged(adapter: ConformanceAdapter, step: Step) -> str | None:
    """Why replaying `step` did not give what the trace expects, or None (the replayer's
    comparison: outcome kind and code, page, projection)."""
    try:
        actual = apply_step(adapter, step)
    except Exception as exc:  # a runner failure stops the trace; it is reported, not raised
        return f"step {step.step} ({step_label(step)}) raised {type(exc).__name__}: {exc}"
    expected = (step.expect.kind, step.expect.code)
    if (actual.kind, actual.code) != expected:
        return (
            f"step {step.step} ({step_label(step)}) diverged: {actual.kind} {actual.code or ''}"
            f", expected {expected[0]} {expected[1] or ''}"
        )
    if actual.page != step.expect.page:
        return f"step {step.step} ({step_label(step)}) diverged: not the expected page"
    changes = diff(step.expect.projection, adapter.project())
    if changes:
        return f"step {step.step} ({step_label(step)}) diverged: {'; '.join(changes[:3])}"
    return None


def _scan(trace_path: Path) -> tuple[frozenset[str], frozenset[tuple[str, str]]]:
    """A trace's capabilities and the (command, code) keys of its applied, unfaulted commands,
    from the JSON alone: deciding to skip a trace must not cost a full decode (the corpus has
    hundreds of traces, a mode walks a few dozen). A malformed trace is left to `read_trace`."""
    try:
        lines = [json.loads(line) for line in read_text(trace_path).splitlines() if line.strip()]
        capabilities = frozenset(lines[0].get("capabilities", ()))
        keys = frozenset(
            (str(step["command"]["name"]), str(step["expect"].get("code") or ""))
            for step in lines[1:]
            if step.get("command")
            and not step.get("fault")
            and step["expect"].get("kind") == "applied"
        )
    except (ValueError, LookupError, TypeError, AttributeError, IndexError):
        return frozenset(), frozenset({("", "malformed")})  # never skipped: read it properly
    return capabilities, keys


def _paths(name: str, steps: Iterable[Step]) -> list[WritePath]:
    return [path for step in steps if (path := write_of(name, step)) is not None]


def trace_files(roots: Roots) -> list[Path]:
    """The trace files under one root or several, in order (per root: named traces first)."""
    if isinstance(roots, Path):
        return trace_paths(roots)
    return [path for root in roots for path in trace_paths(root)]


def every_write(
    root: Roots,
    capabilities: frozenset[str],
    make_adapter: Callable[[], A],
    handle: Callable[[A, Step, WritePath], R],
    missed: Callable[[WritePath, str], R],
) -> list[R]:
    """`handle` for every write path under `root` (one directory or several, in order) the
    adapter can run, then one `missed` result per trace whose walk stopped before paths no
    other trace reached (see the module doc)."""
    seen: set[tuple[str, str]] = set()
    results: list[R] = []
    # key -> (the path as first met, why its trace stopped before it)
    unreached: dict[tuple[str, str], tuple[WritePath, str]] = {}
    for trace_path in trace_files(root):  # per root: named traces first, then generated ones
        needs, keys = _scan(trace_path)
        if not needs <= capabilities or keys <= seen:
            continue  # not for this runner, or nothing new here: do not pay for the replay
        trace = read_trace(trace_path)
        name = trace.header.name
        if not set(trace.header.capabilities) <= capabilities:
            continue
        adapter = make_adapter()
        try:
            for index, step in enumerate(trace.steps):
                path = write_of(name, step)
                stopped: str | None = None
                if path is not None and path.key not in seen:
                    seen.add(path.key)
                    unreached.pop(path.key, None)
                    try:
                        results.append(handle(adapter, step, path))
                    except Exception as exc:  # a mode's finding, never a traceback
                        line = f"{path.label}: raised {type(exc).__name__}: {exc}"
                        results.append(missed(path, line))
                    if diff(step.expect.projection, adapter.project()):
                        stopped = f"the walk of {name} stopped at {path.label} (reported)"
                else:
                    why = _diverged(adapter, step)
                    stopped = None if why is None else f"{name}: {why}"
                if stopped is not None:
                    for later in _paths(name, trace.steps[index + 1 :]):
                        if later.key not in seen and later.key not in unreached:
                            unreached[later.key] = (later, stopped)
                    break
        finally:
            adapter.close()
    by_cause: dict[str, list[WritePath]] = {}
    for path, cause in unreached.values():
        by_cause.setdefault(cause, []).append(path)
    for cause, paths in by_cause.items():
        labels = ", ".join(f"{p.command.name}:{p.code}" for p in paths)
        results.append(missed(paths[0], f"{cause}; {len(paths)} write paths not checked: {labels}"))
    return results
