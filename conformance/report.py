"""Running a corpus against one runner and reporting it: progress, summary table, JUnit XML.

Shared by the `qlk conform` CLI and the pytest plugin, so both report the same thing.
"""

from __future__ import annotations

import os
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from conformance.run.corpus import RUN_CORPUS, read_trace, spec_id_of
from conformance.run.factories import AdapterFactory, resolve
from conformance.run.replay import TraceResult, replay


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

    def table(self, runner: str) -> str:
        covered, inapplicable, named = self.properties()
        rows = [
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
        width = max(len(k) for k, _ in rows)
        line = "+" + "-" * (width + 2) + "+" + "-" * 24 + "+"
        body = [f"| {k:<{width}} | {v:>22} |" for k, v in rows]
        return "\n".join([line, *body, line])


def _replay_one(spec: str, dsn: str | None, root: str, relative: str) -> Outcome:
    """Replay one trace file (in this process or a worker process)."""
    factory = resolve(spec, dsn=dsn)
    return _replay_path(factory, Path(root), relative)


def _replay_path(factory: AdapterFactory, root: Path, relative: str) -> Outcome:
    started = time.perf_counter()
    result = replay(read_trace(root / relative), factory)
    return Outcome(relative, result, time.perf_counter() - started, spec_id_of(relative))


def run_corpus(
    paths: Sequence[Path],
    spec: str,
    *,
    root: Path = RUN_CORPUS,
    dsn: str | None = None,
    jobs: int = 1,
    progress: Callable[[Outcome, int, int], None] | None = None,
) -> Summary:
    """Replay every trace in `paths` (files under `root`) against the runner `spec`."""
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
        factory = resolve(spec, dsn=dsn)
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


class ProgressBar:
    """A one-line bar on a terminal; on a pipe, a line every 10 % (CI logs stay readable)."""

    def __init__(self, stream: TextIO | None = None, width: int = 30) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.tty = self.stream.isatty() and os.environ.get("TERM") != "dumb"
        self.steps = 0
        self.diverged = 0
        self._next_percent = 10

    def __call__(self, outcome: Outcome, done: int, total: int) -> None:
        self.steps += outcome.result.steps
        self.diverged += outcome.result.status == "diverged"
        percent = 100 * done // max(total, 1)
        text = f"{done}/{total} traces, {self.steps:,} steps, {self.diverged} diverged"
        if self.tty:
            filled = self.width * done // max(total, 1)
            bar = "#" * filled + "." * (self.width - filled)
            end = "\n" if done == total else ""
            self.stream.write(f"\r[{bar}] {text}{end}")
            self.stream.flush()
        elif percent >= self._next_percent or done == total:
            self._next_percent = percent - percent % 10 + 10
            self.stream.write(f"  {percent:3d}% {text}\n")
            self.stream.flush()


def write_junit(summary: Summary, runner: str, target: Path) -> None:
    """One `testcase` per trace: a divergence is a `failure` with the report, a trace needing a
    missing capability is `skipped` with the capability (never a pass)."""
    suite = ET.Element(
        "testsuite",
        name=f"ql3-conformance[{runner}]",
        tests=str(len(summary.outcomes)),
        failures=str(summary.count("diverged")),
        skipped=str(summary.count("not_applicable")),
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
    target.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(target, encoding="utf-8", xml_declaration=True)


def render_divergences(outcomes: Iterable[Outcome], limit: int = 5) -> str:
    shown = list(outcomes)
    lines = [o.result.divergence.render() for o in shown[:limit] if o.result.divergence]
    if len(shown) > limit:
        lines.append(f"... and {len(shown) - limit} more diverged traces")
    return "\n\n".join(lines)
