"""The conformance suite as a pytest plugin (entry point `pytest11`, name `ql3`).

An adapter author runs

    pytest --ql3-runner=mypkg.adapter:make_adapter [--ql3-traces DIR] [--ql3-dsn DSN]

and gets one test per trace, `ql3.RUNNER::TRACE` (the JUnit classname is `ql3.` and the runner
with `:` as `.`, e.g. `ql3.mypkg.adapter.make_adapter`; the name is the trace's path): a
divergence fails with the step, the command, both outcomes and the field-level diff; a trace
needing a capability the runner does not declare is skipped with the capability named (reported,
never passed); a malformed trace fails with its file and line; anything the runner raises past
the replayer is one block (the exception and where it was raised), never pages of pytest's own
frames. One more test, `ql3.RUNNER::guard-mode`, probes every guard of every write path with a
stale write (`conformance.run.guards`); it is skipped as not applicable when the adapter does not
expose its storage port (capability `guards`). Without `--ql3-traces` the traces are the
bundled run corpus, the Workflow corpus (SPEC §4.10, named `workflow/<trace>`, capability
`workflow`) and the approval corpus (SPEC §5, `approved_action/<trace>`, capability
`approved_action`). Without `--ql3-runner` the plugin adds nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from conformance.run.corpus import (
    APPROVAL_CORPUS,
    RUN_CORPUS,
    WORKFLOW_CORPUS,
    read_trace,
    trace_paths,
)
from conformance.run.factories import AdapterFactory, FactoryError, resolve
from conformance.run.guards import GUARDS, probe_every_write
from conformance.run.replay import replay
from conformance.run.trace import TraceFormatError


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ql3", "ql3-kernel conformance")
    group.addoption(
        "--ql3-runner",
        default=None,
        help="replay the trace corpus against this runner: edge, cluster, reference or "
        "package.module:factory (one test per trace)",
    )
    group.addoption(
        "--ql3-traces", default=None, help="trace directory (default: the bundled corpus)"
    )
    group.addoption(
        "--ql3-dsn", default=None, help="PostgreSQL DSN for the cluster runner ($QL3_PG_DSN)"
    )


class TraceDivergedError(AssertionError):
    """The runner's outcome or state differed from the trace's expectation."""


class _CorpusItem(pytest.Item):
    """A conformance test: its failure is one readable block, never pytest's own frames."""

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, TraceDivergedError):
            return str(excinfo.value)
        where = excinfo.traceback[-1]
        return (
            f"{type(excinfo.value).__name__}: {excinfo.value}\n"
            f"  raised at {where.path}:{where.lineno + 1}"
        )


class TraceItem(_CorpusItem):
    """One trace replayed against the runner under test."""

    def __init__(self, *, path_in_corpus: Path, factory: AdapterFactory, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.trace_path = path_in_corpus
        self.factory = factory

    def runtest(self) -> None:
        try:
            trace = read_trace(self.trace_path)
        except TraceFormatError as exc:
            raise TraceDivergedError(f"{self.trace_path}: malformed trace: {exc}") from None
        result = replay(trace, self.factory)
        if result.missing_capabilities:
            pytest.skip("not applicable: needs " + ", ".join(result.missing_capabilities))
        if result.divergence is not None:
            raise TraceDivergedError(result.divergence.render())
        assert result.status == "passed"

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.trace_path, 0, f"trace {self.name}"


class GuardItem(_CorpusItem):
    """Guard mode over the corpus: every stale write must be refused by the runner."""

    def __init__(self, *, root: Path, factory: AdapterFactory, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.root = root
        self.factory = factory

    def runtest(self) -> None:
        report = probe_every_write(self.factory, self.root)
        if report.not_applicable:
            pytest.skip(f"not applicable: needs {GUARDS}")
        if report.failures:
            lines = "\n".join(report.failures[:20])
            raise TraceDivergedError(
                f"{len(report.failures)} of {report.probes} stale writes accepted:\n{lines}"
            )
        assert report.probes > 0

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.root, 0, "guard mode"


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    spec = config.getoption("--ql3-runner")
    if not spec:
        return
    dsn = config.getoption("--ql3-dsn") or os.environ.get("QL3_PG_DSN")
    try:
        factory = resolve(spec, dsn=dsn)
    except FactoryError as exc:
        raise pytest.UsageError(str(exc)) from None
    option = config.getoption("--ql3-traces")
    root = Path(option) if option else RUN_CORPUS
    paths = trace_paths(root)
    if not paths:
        raise pytest.UsageError(f"--ql3-traces {root}: no *.jsonl or *.jsonl.gz trace files")
    # The bundled corpus also has the Workflow traces (SPEC §4.10), named `workflow/<trace>`;
    # a runner without the `workflow` capability gets them as not applicable.
    corpora = [(root, "", paths)]
    if not option and WORKFLOW_CORPUS.is_dir():
        corpora.append((WORKFLOW_CORPUS, "workflow/", trace_paths(WORKFLOW_CORPUS)))
    # And the approval-domain traces (SPEC §5, issue 19), named `approved_action/<trace>`.
    if not option and APPROVAL_CORPUS.is_dir():
        corpora.append((APPROVAL_CORPUS, "approved_action/", trace_paths(APPROVAL_CORPUS)))
    # `ql3.<runner>::<trace>`: pytest's JUnit writer makes the part before `::` the classname
    # (a `[` would be read as parameters and leave it empty), so a runner's dots and colon
    # become a dotted classname, `ql3.mypkg.adapter.make_adapter`.
    label = "ql3." + spec.replace(":", ".")
    for base, prefix, found in corpora:
        _add_traces(
            session, items, label=label, root=base, prefix=prefix, paths=found, factory=factory
        )
    items.append(
        GuardItem.from_parent(
            session, name="guard-mode", nodeid=f"{label}::guard-mode", root=root, factory=factory
        )
    )


def _add_traces(
    session: pytest.Session,
    items: list[pytest.Item],
    *,
    label: str,
    root: Path,
    prefix: str,
    paths: list[Path],
    factory: AdapterFactory,
) -> None:
    for path in paths:
        name = prefix + str(path.relative_to(root))
        items.append(
            TraceItem.from_parent(
                session,
                name=name,
                nodeid=f"{label}::{name}",
                path_in_corpus=path,
                factory=factory,
            )
        )
