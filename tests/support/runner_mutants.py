"""The runner mutation tier (issue 16 item 2): planted bugs in the edge and cluster runners, and
the parts of `qlk conform` that must catch each one on its own.

A `RunnerMutant` is one realistic, small bug of one runner, given as exact edits of the runner's
real source text, never as a copied function:

- `SqlEdit`: `old` -> `new` in one named SQL section (`runners/*/sql/*.sql`, parsed by
  `runners.named_sql`), planted in the module attribute the runner looks the section up in at
  execution time (`runners.edge.store.STATEMENTS`, `runners.cluster.store.SOURCES`, ...);
- `MethodEdit`: `old` -> `new` in the source text of one method of a runner class (or a
  module-level function), re-executed in the real module's namespace and set on the class.

`old` must occur exactly once in the section or method (and in the file it comes from) and the
edit must change the text, else `MutantError` names the mutant: a runner edit that removes the
text fails the tier loudly instead of silently testing yesterday's runner. Every edit is planted
with pytest's `monkeypatch`, so it is undone after the test; the kill modes fork their children
from the test process, so the children run the mutant too.

`modes` names the parts of `qlk conform` that must each catch the mutant (`MODES`): the corpus
replay, guard mode, kill mode, the cluster's terminate mode, and `locks`, the lock probe of
issue 16 item 2 (`conformance.run.locks`); a mode whose function does not exist is reported as
"not built" and the mutant counts as a survivor. `boundary` says which trace or check catches
the mutant in principle (the decision boundary it moves), so a survivor's failure names what the
corpus lacks.

The corpus replay only replays the traces that can run the mutant (`reaches`): a trace needing a
capability the runner lacks is not applicable, and a mutant of candidate sources only is run by
a trace's page steps that ask that source (`conformance.run.pages` is the only caller of a
store's sources in a replay), so skipping the other traces changes no verdict, only the cost.

Each mode is run the way `qlk conform` runs it (`conformance.cli.conform`), but stops at the
first catch to keep the tier cheap: the replay goes trace by trace, `hints` (named trace prefixes)
first, then the rest of the named traces, then the generated ones, and stops at the first
divergence; guard and kill modes are run by the CLI's own functions on one trace at a time, in
the same order, until one reports the finding. A finding on any trace is a finding of the CLI's
whole-corpus run: the CLI probes / kills the first applied occurrence of each (command, outcome
code) pair, and a dropped guard or a split commit is a property of the statement or method, not of
the state it meets (the end-to-end tests run `qlk conform` itself on a mutant of each mode).
"""

from __future__ import annotations
import __future__

import ast
import functools
import importlib
import shutil
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from conformance.run.adapter import ConformanceAdapter
from conformance.run.corpus import RUN_CORPUS, read_trace, trace_paths
from conformance.run.guards import probe_every_write
from conformance.run.pages import ExpiryPass, LostRetryPass, SourceQuery
from conformance.run.replay import replay
from model_tests.quality.plant import read_source, source_path

__all__ = [
    "KINDS",
    "MODES",
    "Catch",
    "MethodEdit",
    "MutantError",
    "RunnerMutant",
    "SqlEdit",
    "Verdict",
    "assert_planted_and_undone",
    "assert_well_formed",
    "catch_rate_line",
    "check_mode",
    "hunt_corpus",
    "ordered_paths",
    "verdict_of",
]

#: The kinds of runner bug issue 16 names; every runner's list must have each kind it can have.
KINDS = (
    "operator",  # a comparison flipped at equal values (`<=` -> `<`, `<` -> `<=`, `>` -> `>=`)
    "limit",  # `LIMIT limit` instead of `limit + 1` (has_more, P-2)
    "order",  # a wrong ORDER BY / keyset tie-break (P-3, P-4)
    "exclusion",  # an exclusion dropped from a source's WHERE (P-6)
    "guard",  # a guard column dropped from an UPDATE's WHERE (V-1, V-2)
    "event",  # an Event append dropped (V-3, I-7)
    "split",  # a commit in the middle of a multi-statement write (RUN-06, RETRY-10)
    "lock",  # a row lock missing (B-35, D-2)
    "write",  # a column not written, or written from the wrong value
)

#: The parts of `qlk conform` a mutant can name ("locks": the lock probe, `conformance.run.locks`).
MODES = ("corpus", "guards", "kill", "terminate", "locks")


class MutantError(AssertionError):
    """A mutant that no longer matches the runner's source: its text is missing, repeated or the
    edit changes nothing."""


def _replace_once(name: str, text: str, old: str, new: str, where: str) -> str:
    count = text.count(old)
    if count != 1:
        raise MutantError(f"{name}: the text occurs {count} times in {where}, not once: {old!r}")
    out = text.replace(old, new)
    if out == text:
        raise MutantError(f"{name}: the edit changes nothing in {where}: {old!r}")
    return out


# -- edits -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SqlEdit:
    """`old` -> `new` in the named section `section` of the table that module `module` looks up
    as `attribute` at execution time (the table is the one `runners.*.named_sql` parsed from the
    runner's `.sql` file)."""

    module: str
    attribute: str
    section: str
    old: str
    new: str

    def table(self) -> Mapping[str, str]:
        """The sections as the runner looks them up right now (planted or not)."""
        found: Mapping[str, str] = getattr(importlib.import_module(self.module), self.attribute)
        return found

    def original(self) -> str:
        """The section as parsed from the runner's `.sql` file (its package's `named_sql`)."""
        package = self.module.rsplit(".", 1)[0]
        parsed = getattr(importlib.import_module(f"{package}.named_sql"), self.attribute)
        text: str = parsed[self.section]
        return text

    def mutated(self, name: str) -> str:
        where = f"section {self.section} ({self.module}.{self.attribute})"
        return _replace_once(name, self.original(), self.old, self.new, where)

    def plant(self, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
        patched = dict(self.table())
        patched[self.section] = self.mutated(name)
        monkeypatch.setattr(
            importlib.import_module(self.module), self.attribute, MappingProxyType(patched)
        )


@dataclass(frozen=True, slots=True)
class MethodEdit:
    """`old` -> `new` in the source text of `qualname` (`Class.method`, or a module-level
    function) of module `module`. The edited definition (its decorators included) is executed in
    the module's own namespace, so it resolves the module's helpers and tables exactly as the
    original does, and set on the class (or module) in place of the original."""

    module: str
    qualname: str
    old: str
    new: str

    def definition(self) -> tuple[str, int, int]:
        """The definition's source text (as indented in the file), its first line and the
        module's `__future__` flags."""
        source = read_source(self.module)
        tree = ast.parse(source)
        *owners, name = self.qualname.split(".")
        body: Sequence[ast.stmt] = tree.body
        for owner in owners:
            found = [n for n in body if isinstance(n, ast.ClassDef) and n.name == owner]
            if len(found) != 1:
                raise MutantError(f"{self.module}: no class {owner} for {self.qualname}")
            body = found[0].body
        nodes = [
            n
            for n in body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
        ]
        if len(nodes) != 1:
            raise MutantError(f"{self.module}: no single definition of {self.qualname}")
        node = nodes[0]
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        last = node.end_lineno if node.end_lineno is not None else node.lineno
        lines = source.splitlines(keepends=True)[first - 1 : last]
        flags = 0
        for stmt in tree.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
                for alias in stmt.names:
                    flags |= getattr(__future__, alias.name).compiler_flag
        return "".join(lines), first, flags

    def original(self) -> str:
        return self.definition()[0]

    def mutated(self, name: str) -> str:
        # Exactly once in the whole file too, so the edit cannot be ambiguous to a reader.
        _replace_once(name, read_source(self.module), self.old, self.new, self.module)
        return _replace_once(name, self.original(), self.old, self.new, self.qualname)

    def plant(self, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
        module = importlib.import_module(self.module)
        text = self.mutated(name)
        _, first, flags = self.definition()
        # Keep the real file name and line numbers, so a traceback points at the real source.
        padded = "\n" * (first - 1) + textwrap.dedent(text)
        code = compile(padded, source_path(self.module), "exec", flags, True)
        scratch: dict[str, Any] = {}
        exec(code, vars(module), scratch)  # noqa: S102 - the runner's own source, edited
        *owners, attribute = self.qualname.split(".")
        target: Any = module
        for owner in owners:
            target = getattr(target, owner)
        monkeypatch.setattr(target, attribute, scratch[attribute])

    def current(self) -> object:
        target: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            target = vars(target)[part] if isinstance(target, type) else getattr(target, part)
        return target


Edit = SqlEdit | MethodEdit


# -- mutants ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RunnerMutant:
    """One planted bug of one runner: what it breaks (SPEC ids), its edits of the real source,
    the modes of `qlk conform` that must each catch it, and the boundary that catches it."""

    name: str
    runner: str  # "edge" or "cluster"
    kind: str  # one of KINDS
    breaks: str
    edits: tuple[Edit, ...]
    #: Which trace or check catches it in principle: named in a survivor's failure.
    boundary: str
    modes: tuple[str, ...] = ("corpus",)
    #: Named trace file-name prefixes tried first (a speed hint, never the assertion).
    hints: tuple[str, ...] = ()
    #: For guard mode: the (effect, guard) whose stale variant the mutant accepts.
    guard: tuple[str, str] | None = None

    def check(self) -> None:
        """Raise `MutantError` unless every edit still applies to the runner's source."""
        for edit in self.edits:
            edit.mutated(self.name)

    def apply(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for edit in self.edits:
            edit.plant(self.name, monkeypatch)


# -- the modes -------------------------------------------------------------------------------
Factory = Callable[[], ConformanceAdapter]


@dataclass(frozen=True, slots=True)
class Catch:
    """What one mode of `qlk conform` did with one mutant."""

    mode: str
    caught: bool
    evidence: str  # where it was caught, or why not
    traces: int
    seconds: float


def ordered_paths(hints: tuple[str, ...] = (), root: Path = RUN_CORPUS) -> list[Path]:
    """The corpus, hinted named traces first, then the named ones, then the generated ones."""
    paths = trace_paths(root)

    def rank(path: Path) -> int:
        if path.parent != root:
            return 2
        return 0 if hints and path.name.startswith(hints) else 1

    return sorted(paths, key=rank)  # stable: each group keeps the corpus order


def hunt_corpus(factory: Factory, paths: Sequence[Path]) -> Catch:
    """Corpus replay (`qlk conform`'s replay): stop at the first diverged trace."""
    started = time.perf_counter()
    for count, path in enumerate(paths, start=1):
        result = replay(read_trace(path), factory)
        d = result.divergence
        if d is not None:
            where = f"{d.trace}:{d.step} ({d.command})"
            return Catch("corpus", True, where, count, time.perf_counter() - started)
    seconds = time.perf_counter() - started
    return Catch("corpus", False, f"no divergence in {len(paths)} traces", len(paths), seconds)


def _guard_finding(mutant: RunnerMutant) -> tuple[str, Callable[[str], bool]]:
    """What guard mode must report for `mutant`: the stale variant of the guard it dropped was
    accepted, or (no `guard`: a split write) a rolled-back probe left a committed change."""
    if mutant.guard is None:
        return "a probe that changed the state", lambda line: "probes changed the state" in line
    effect, name = mutant.guard
    accepted = f"].{name}: stale write accepted"
    return (
        f"a stale {effect}.{name} accepted",
        lambda line: f"{effect}[" in line and accepted in line,
    )


def _hunt_guards(factory: Factory, paths: Sequence[Path], mutant: RunnerMutant) -> Catch:
    """Guard mode (`conformance.run.guards.probe_every_write`, as `qlk conform` calls it), one
    trace at a time: stop at the first trace where it reports the mutant's finding."""
    wanted, matches = _guard_finding(mutant)
    started = time.perf_counter()
    for count, path in enumerate(paths, start=1):
        report = probe_every_write(factory, path.parent, paths=[path])
        hits = [line for line in report.failures if matches(line)]
        if hits:
            return Catch("guards", True, f"{path.name}: {hits[0]}", count, _since(started))
    return Catch("guards", False, f"never {wanted}", len(paths), _since(started))


@contextmanager
def _one_trace_root(path: Path) -> Iterator[Path]:
    """A directory holding only `path`: the kill modes take a corpus root."""
    directory = Path(tempfile.mkdtemp(prefix="ql3-mutant-"))
    try:
        shutil.copy(path, directory / path.name)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


TORN = ("not the before-state", "not the after-state")


def _hunt_kill(runner: str, dsn: str | None, paths: Sequence[Path], mode: str) -> Catch:
    """Kill mode (edge: `kill_edge.kill_every_write`; cluster: `kill_cluster.kill_every_write`)
    or terminate mode (cluster), one trace at a time, until a write leaves a torn state."""
    started = time.perf_counter()
    for count, path in enumerate(paths, start=1):
        with _one_trace_root(path) as root:
            if runner == "edge":
                kill = importlib.import_module("conformance.run.kill_edge")
                failures = [line for r in kill.kill_every_write(root) for line in r.failures]
            else:
                kill = importlib.import_module("conformance.run.kill_cluster")
                run = kill.kill_every_write if mode == "kill" else kill.terminate_every_write
                failures = [line for r in run(root, dsn) for line in r.failures]
        torn = [line for line in failures if any(word in line for word in TORN)]
        if torn:
            return Catch(mode, True, torn[0], count, _since(started))
    return Catch(
        mode, False, "every write left the before- or the after-state", len(paths), _since(started)
    )


#: The lock probe's module (issue 16 item 2, built beside this tier).
LOCKS_MODULE = "conformance.run.locks"


def _hunt_locks(runner: str, dsn: str | None, paths: Sequence[Path]) -> Catch:
    """The lock probe (`conformance.run.locks.lock_every_write_<runner>`), one trace at a time,
    until a write path's rows were not held by its open transaction (B-35, D-2)."""
    started = time.perf_counter()
    try:
        locks = importlib.import_module(LOCKS_MODULE)
    except ModuleNotFoundError:
        return Catch("locks", False, f"not built: {LOCKS_MODULE} does not exist", 0, 0.0)
    probe = getattr(locks, f"lock_every_write_{runner}", None)
    if probe is None:
        missing = f"not built: {LOCKS_MODULE} has no lock_every_write_{runner}"
        return Catch("locks", False, missing, 0, 0.0)
    for count, path in enumerate(paths, start=1):
        with _one_trace_root(path) as root:
            report = probe(root) if runner == "edge" else probe(root, dsn)
        failures = list(report.failures)
        if failures:
            return Catch("locks", True, f"{path.name}: {failures[0]}", count, _since(started))
    return Catch("locks", False, "every write path's rows were held", len(paths), _since(started))


def _since(started: float) -> float:
    return time.perf_counter() - started


@dataclass(frozen=True, slots=True)
class _Reach:
    """What a trace can exercise: its capabilities and the source sections its page steps run."""

    capabilities: frozenset[str]
    sections: frozenset[str]


@functools.cache
def _reach(path: Path) -> _Reach:
    sections: set[str] = set()
    trace = read_trace(path)
    for step in trace.steps:
        if isinstance(step.page, SourceQuery):
            suffix = "" if step.page.after is None else "_after"
            sections.add(f"{step.page.source}_candidates{suffix}")
        elif isinstance(step.page, LostRetryPass):
            sections.add("lost_retry_candidates")
        elif isinstance(step.page, ExpiryPass):
            # the runtime's expiry scan pages the lease-expiry source (INBOX-42)
            suffix = "" if step.page.after is None else "_after"
            sections.add(f"lease_expiry_candidates{suffix}")
    return _Reach(frozenset(trace.header.capabilities), frozenset(sections))


def reaches(mutant: RunnerMutant, path: Path, capabilities: frozenset[str]) -> bool:
    """Whether replaying `path` can run the mutated code at all: the runner can run the trace
    and, for a mutant of candidate sources only, one of the trace's page steps asks a mutated
    source (`conformance.run.pages` is the only caller of a store's sources in a replay). A
    trace that cannot run the mutant cannot catch it, so skipping it changes no verdict."""
    reach = _reach(path)
    if not reach.capabilities <= capabilities:
        return False
    sources_only = all(isinstance(e, SqlEdit) and e.attribute == "SOURCES" for e in mutant.edits)
    if not sources_only:
        return True
    return any(isinstance(e, SqlEdit) and e.section in reach.sections for e in mutant.edits)


def check_mode(
    mutant: RunnerMutant,
    mode: str,
    factory: Factory,
    capabilities: frozenset[str],
    *,
    dsn: str | None = None,
    root: Path = RUN_CORPUS,
) -> Catch:
    """Run one mode of `qlk conform` against the runner as it is now (the mutant applied), over
    the traces under `root` that can run the mutant, hinted ones first."""
    paths = [p for p in ordered_paths(mutant.hints, root) if reaches(mutant, p, capabilities)]
    if mode == "corpus":
        return hunt_corpus(factory, paths)
    if mode == "guards":
        return _hunt_guards(factory, paths, mutant)
    if mode in ("kill", "terminate"):
        return _hunt_kill(mutant.runner, dsn, paths, mode)
    if mode == "locks":
        return _hunt_locks(mutant.runner, dsn, paths)
    raise ValueError(f"{mutant.name}: unknown mode {mode!r}")


# -- verdicts --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Verdict:
    """A mutant against every mode it names: caught when every named mode caught it."""

    mutant: RunnerMutant
    catches: tuple[Catch, ...] = field(default=())

    @property
    def caught(self) -> bool:
        return bool(self.catches) and all(c.caught for c in self.catches)

    @property
    def seconds(self) -> float:
        return sum(c.seconds for c in self.catches)

    def line(self) -> str:
        parts = [
            f"{c.mode}: {'caught at ' if c.caught else 'MISSED, '}{c.evidence} ({c.seconds:.1f}s)"
            for c in self.catches
        ]
        return f"{self.mutant.name:40} {'; '.join(parts)}"

    def survivor(self) -> str:
        missed = ", ".join(f"{c.mode} ({c.evidence})" for c in self.catches if not c.caught)
        return (
            f"{self.mutant.runner} mutant {self.mutant.name} ({self.mutant.breaks}) survived "
            f"{missed}; it needs: {self.mutant.boundary}"
        )


def verdict_of(
    mutant: RunnerMutant,
    monkeypatch: pytest.MonkeyPatch,
    factory: Factory,
    capabilities: frozenset[str],
    *,
    dsn: str | None = None,
    root: Path = RUN_CORPUS,
) -> Verdict:
    """Plant `mutant`, run every mode it names over the traces under `root`, undo it."""
    with monkeypatch.context() as patch:
        mutant.apply(patch)
        catches = tuple(
            check_mode(mutant, mode, factory, capabilities, dsn=dsn, root=root)
            for mode in mutant.modes
        )
    return Verdict(mutant, catches)


def catch_rate_line(verdicts: Mapping[str, Sequence[Verdict]]) -> str:
    """`runner mutants: edge 23/23 caught, cluster 21/22 caught; survivors: ...`"""
    rates = ", ".join(
        f"{runner} {sum(v.caught for v in found)}/{len(found)} caught"
        for runner, found in verdicts.items()
    )
    survivors = [v.mutant.name for found in verdicts.values() for v in found if not v.caught]
    return f"runner mutants: {rates}; survivors: {', '.join(survivors) or 'none'}"


def assert_planted_and_undone(mutant: RunnerMutant, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every edit of `mutant` matches the runner's real source exactly once and changes it;
    planted, the runner looks up the mutated text (or method); undone, the original again."""
    mutant.check()
    for edit in mutant.edits:
        if isinstance(edit, SqlEdit):
            original = edit.table()[edit.section]
            assert original == edit.original()
            with monkeypatch.context() as patch:
                mutant.apply(patch)
                assert edit.table()[edit.section] == edit.mutated(mutant.name) != original
            assert edit.table()[edit.section] == original
        else:
            before = edit.current()
            with monkeypatch.context() as patch:
                mutant.apply(patch)
                assert edit.current() is not before
            assert edit.current() is before


def assert_well_formed(mutants: Sequence[RunnerMutant], runner: str, modes: set[str]) -> None:
    """One runner's list: unique names, every kind of KINDS, known modes, a boundary each."""
    assert len({m.name for m in mutants}) == len(mutants)
    assert {m.kind for m in mutants} == set(KINDS)
    for mutant in mutants:
        assert mutant.runner == runner, mutant.name
        assert mutant.kind in KINDS, mutant.name
        assert mutant.modes, mutant.name
        assert set(mutant.modes) <= modes, mutant.name
        assert mutant.boundary, mutant.name
        if mutant.guard is not None:
            assert "guards" in mutant.modes, mutant.name


def print_past_capture(config: pytest.Config, lines: Sequence[str]) -> None:
    """Write `lines` to the terminal now, past pytest's output capturing (CI logs show them)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        for line in lines:
            print(line, file=sys.stderr)
        return
    if capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.ensure_newline()
            for line in lines:
                reporter.write_line(line)
    else:
        for line in lines:
            reporter.write_line(line)
