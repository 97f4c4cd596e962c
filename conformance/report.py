"""Running a corpus against one runner and reporting it: progress, summary table, JUnit XML.

Shared by the `qlk conform` CLI and the pytest plugin, so both report the same thing. The
summary is a `rich` table (`summary_table`); progress is a `rich.progress` display on a
terminal and one plain line per 10 % elsewhere (`ReplayProgress`).
"""

from __future__ import annotations

import io
import time
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from conformance.run.adapter import ConformanceAdapter
from conformance.run.corpus import RUN_CORPUS, read_trace, spec_id_of
from conformance.run.factories import AdapterFactory, resolve
from conformance.run.replay import TraceResult, replay
from conformance.run.trace import Trace, TraceFormatError


class MalformedTrace(ValueError):
    """A trace file that cannot be read or does not follow the format; the message names the
    file (one string argument, so that it crosses a process pool intact)."""


class RunnerFailed(RuntimeError):
    """The runner's adapter factory raised (a database that does not answer, a broken
    adapter); the message says what it raised."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """One trace's result, as a file path relative to the corpus and the replay result."""

    path: str
    result: TraceResult
    seconds: float
    spec_id: str | None  # the CONF item a named trace is for (file name prefix)


@dataclass
class Summary:
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.result.status == status)

    @property
    def steps(self) -> int:
        return sum(o.result.steps for o in self.outcomes)

    @property
    def faults(self) -> int:
        return sum(o.result.faults for o in self.outcomes)

    @property
    def diverged(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.result.status == "diverged"]

    def properties(self) -> tuple[set[str], set[str], set[str]]:
        """(covered, inapplicable, named): SPEC items with a passing named trace and none
        diverged; items whose named traces were all not applicable; every item named."""
        statuses: dict[str, set[str]] = {}
        for o in self.outcomes:
            if o.spec_id is not None:
                statuses.setdefault(o.spec_id, set()).add(o.result.status)
        covered = {k for k, v in statuses.items() if "passed" in v and "diverged" not in v}
        inapplicable = {k for k, v in statuses.items() if v == {"not_applicable"}}
        return covered, inapplicable, set(statuses)

    def rows(self, runner: str) -> list[tuple[str, str]]:
        """The figures of the summary, as (label, value); a label indented by two spaces
        belongs to the row above it."""
        covered, inapplicable, named = self.properties()
        return [
            ("runner", runner),
            ("traces", str(len(self.outcomes))),
            ("  passed", str(self.count("passed"))),
            ("  not applicable", str(self.count("not_applicable"))),
            ("  diverged", str(self.count("diverged"))),
            ("steps replayed", f"{self.steps:,}"),
            ("faults injected", f"{self.faults:,}"),
            ("properties covered", f"{len(covered)} of {len(named)} named"),
            ("  not applicable", str(len(inapplicable))),
            ("time", f"{self.seconds:.1f} s"),
        ]

    def table(self, runner: str) -> str:
        """The summary as plain ASCII text (what `qlk conform` prints on a pipe)."""
        buffer = io.StringIO()
        plain = Console(
            file=buffer,
            force_terminal=False,
            no_color=True,
            width=100,
            markup=False,
            highlight=False,
            emoji=False,
        )
        plain.print(summary_table(self, runner, terminal=False))
        return buffer.getvalue().rstrip("\n")


def summary_table(summary: Summary, runner: str, *, terminal: bool) -> Table:
    """The summary as a rich table: ASCII rules off a terminal (the same bytes every run, and
    `| label | value |` rows that scripts and tests read), rounded rules on one."""
    table = Table(
        box=box.ROUNDED if terminal else box.ASCII2,
        show_header=False,
        padding=(0, 1),
    )
    table.add_column(no_wrap=True)
    table.add_column(justify="right", min_width=22, no_wrap=True)
    for label, value in summary.rows(runner):
        sub = label.startswith("  ")
        style = "dim" if terminal and sub else ""
        bad = terminal and label.strip() == "diverged" and value != "0"
        table.add_row(Text(label, style=style), Text(value, style="bold red" if bad else style))
    return table


def _replay_one(spec: str, dsn: str | None, root: str, relative: str) -> Outcome:
    """Replay one trace file (in this process or a worker process)."""
    factory = guarded(resolve(spec, dsn=dsn))
    return _replay_path(factory, Path(root), relative)


def _replay_path(factory: AdapterFactory, root: Path, relative: str) -> Outcome:
    started = time.perf_counter()
    result = replay(_read(root / relative), factory)
    return Outcome(relative, result, time.perf_counter() - started, spec_id_of(relative))


def _read(path: Path) -> Trace:
    try:
        return read_trace(path)
    except TraceFormatError as exc:
        raise MalformedTrace(f"{path}: malformed trace: {exc}") from None
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise MalformedTrace(f"{path}: cannot read the trace: {exc}") from None


def guarded(factory: AdapterFactory) -> AdapterFactory:
    """`factory`, raising `RunnerFailed` (with what it raised) when it raises."""

    def make() -> ConformanceAdapter:
        try:
            return factory()
        except Exception as exc:
            text = str(exc).strip().splitlines()
            detail = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
            raise RunnerFailed(f"the adapter factory raised {detail}") from exc

    return make


def run_corpus(
    paths: Sequence[Path],
    spec: str,
    *,
    root: Path = RUN_CORPUS,
    dsn: str | None = None,
    jobs: int = 1,
    progress: Callable[[Outcome, int, int], None] | None = None,
) -> Summary:
    """Replay every trace in `paths` (files under `root`) against the runner `spec`.

    Raises `MalformedTrace` for a trace file that cannot be read or parsed and `RunnerFailed`
    when the runner's factory raises; a runner that fails inside a step is a divergence."""
    resolve(spec, dsn=dsn)  # fail fast, in this process, on a bad runner name
    relatives = [str(p.relative_to(root)) for p in paths]
    summary = Summary()
    started = time.perf_counter()
    done = 0

    def record(outcome: Outcome) -> None:
        nonlocal done
        done += 1
        summary.outcomes.append(outcome)
        if progress is not None:
            progress(outcome, done, len(relatives))

    if jobs <= 1:
        factory = guarded(resolve(spec, dsn=dsn))
        for relative in relatives:
            record(_replay_path(factory, root, relative))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [
                pool.submit(_replay_one, spec, dsn, str(root), relative) for relative in relatives
            ]
            for future in futures:
                record(future.result())
    summary.outcomes.sort(key=lambda o: relatives.index(o.path))
    summary.seconds = time.perf_counter() - started
    return summary


class ReplayProgress:
    """Progress while traces replay, called as `progress(outcome, done, total)`. On a terminal
    a rich progress bar (traces done of total, steps, divergences, time); elsewhere (a pipe, CI
    logs, tests) a plain line every 10 %: `   40% 111/277 traces, 2,486 steps, 0 diverged`.
    Use it as a context manager, which starts and stops the terminal display."""

    def __init__(self, console: Console, *, label: str = "replaying") -> None:
        self.console = console
        self.label = label
        self.steps = 0
        self.diverged = 0
        self._next_percent = 10
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> ReplayProgress:
        if self.console.is_terminal:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(
                    "traces, {task.fields[steps]:,} steps, {task.fields[diverged]} diverged"
                ),
                TimeElapsedColumn(),
                console=self.console,
            )
            self._progress.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __call__(self, outcome: Outcome, done: int, total: int) -> None:
        self.steps += outcome.result.steps
        self.diverged += outcome.result.status == "diverged"
        if self._progress is not None:
            if self._task is None:
                self._task = self._progress.add_task(self.label, total=total, steps=0, diverged=0)
            self._progress.update(
                self._task, completed=done, steps=self.steps, diverged=self.diverged
            )
            return
        percent = 100 * done // max(total, 1)
        if percent >= self._next_percent or done == total:
            self._next_percent = percent - percent % 10 + 10
            text = f"{done}/{total} traces, {self.steps:,} steps, {self.diverged} diverged"
            self.console.file.write(f"  {percent:3d}% {text}\n")
            self.console.file.flush()


@dataclass(frozen=True, slots=True)
class ModeResult:
    """The result of one check mode over the corpus (guard, kill, terminate): its summary line
    and one line per finding; any finding fails the check. A mode that could not run for this
    runner says why in `skipped` (reported, never counted as passed)."""

    name: str
    summary: str
    failures: tuple[str, ...] = ()
    skipped: str | None = None


def write_junit(
    summary: Summary, runner: str, target: Path, modes: Sequence[ModeResult] = ()
) -> None:
    """One `testcase` per trace: a divergence is a `failure` with the report, a trace needing a
    missing capability is `skipped` with the capability (never a pass); then one `testcase` per
    check mode that ran, a `failure` when it found anything, so the file's failure count is the
    exit code's reason (issue 16 item 3)."""
    failing_modes = sum(1 for mode in modes if mode.failures)
    suite = ET.Element(
        "testsuite",
        name=f"ql3-conformance[{runner}]",
        tests=str(len(summary.outcomes) + len(modes)),
        failures=str(summary.count("diverged") + failing_modes),
        skipped=str(summary.count("not_applicable") + sum(1 for m in modes if m.skipped)),
        time=f"{summary.seconds:.3f}",
    )
    for outcome in summary.outcomes:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"conformance.{runner}",
            name=outcome.path,
            time=f"{outcome.seconds:.3f}",
        )
        result = outcome.result
        if result.divergence is not None:
            failure = ET.SubElement(
                case, "failure", message=f"step {result.divergence.step} diverged"
            )
            failure.text = result.divergence.render()
        elif result.missing_capabilities:
            ET.SubElement(
                case,
                "skipped",
                message="not applicable: needs " + ", ".join(result.missing_capabilities),
            )
    for mode in modes:
        case = ET.SubElement(
            suite, "testcase", classname=f"conformance.{runner}.modes", name=mode.name
        )
        if mode.failures:
            failure = ET.SubElement(case, "failure", message=mode.summary)
            failure.text = "\n".join(mode.failures)
        elif mode.skipped is not None:
            ET.SubElement(case, "skipped", message=mode.skipped)
    target.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(target, encoding="utf-8", xml_declaration=True)


def render_divergences(outcomes: Iterable[Outcome], limit: int = 5) -> str:
    shown = list(outcomes)
    lines = [o.result.divergence.render() for o in shown[:limit] if o.result.divergence]
    if len(shown) > limit:
        lines.append(f"... and {len(shown) - limit} more diverged traces")
    return "\n\n".join(lines)
