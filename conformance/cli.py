"""`qlk`: the conformance suite from the command line (this project's main job).

    qlk conform                          # the bundled corpus against the edge runner (SQLite)
    qlk conform --runner cluster --dsn postgresql://postgres@127.0.0.1:5432/test
    qlk conform --runner mypkg.adapter:make_adapter --traces DIR --junit report.xml --jobs 2
    qlk traces show conformance/traces/run/RETRY-07-retry-wait-not-before-due.jsonl
    qlk traces generate [--check]        # regenerate the corpus (source checkout only)
    qlk conform --component journal [--journal-adapter file|sqlite|all]
    qlk traces generate --component journal [--check]

After the replay, `qlk conform` runs the guard mode (every runner whose adapter exposes its
storage port: a stale variant of every guard of every write path must be refused) and, for the
edge runner, the kill mode (SIGKILL at every statement boundary of every write path); for the
cluster runner, the kill mode and the terminate mode (`pg_terminate_backend` of the runner's
backend at every statement boundary, `conformance.run.kill_cluster`).

`--component journal` replays the journal corpus (`conformance/traces/journal/`, SPEC §7
component `journal`) against the file and/or SQLite journal adapter on real temporary roots
(`conformance.journal.replay`); guard and kill modes are run-component modes.

Exit status: 0 when every applicable trace passed and no stale write or kill broke the state, 1
on any divergence, 2 on bad usage (with a one-line error that says what to fix).
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from conformance.journal.corpus import main as journal_corpus_main
from conformance.journal.replay import ADAPTERS as JOURNAL_ADAPTERS
from conformance.journal.replay import (
    fault_counts,
    journal_trace_paths,
    resolve_binding,
    run_journal_corpus,
)
from conformance.journal.trace import JOURNAL_CORPUS, is_journal_text, show_lines
from conformance.journal.trace import loads as load_journal
from conformance.report import ProgressBar, render_divergences, run_corpus, write_junit
from conformance.run.corpus import RUN_CORPUS, read_text, read_trace, trace_paths
from conformance.run.factories import AdapterFactory, FactoryError, resolve
from conformance.run.guards import GUARDS, probe_every_write
from conformance.run.projection import changes
from conformance.run.replay import step_label
from conformance.run.trace import Step, TraceFormatError, canonical

EXIT_DIVERGED = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad usage: reported as one line on stderr with exit status 2."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qlk", description="ql3-kernel conformance suite: replay traces against a runner."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    conform = commands.add_parser(
        "conform", help="replay a trace corpus against a runner and report divergences"
    )
    conform.add_argument(
        "--component",
        choices=("run", "journal"),
        default="run",
        help="run (default: the Run-domain corpus against --runner) or journal (the journal "
        "corpus against --journal-adapter)",
    )
    conform.add_argument(
        "--journal-adapter",
        default="all",
        metavar="ADAPTER",
        help="with --component journal: file, sqlite, all (default: both), reference, or "
        "package.module:factory (a journal binding)",
    )
    conform.add_argument(
        "--runner",
        default="edge",
        help="edge (default, SQLite), cluster (PostgreSQL), reference, or package.module:factory",
    )
    conform.add_argument(
        "--traces", type=Path, default=None, help="a trace directory (default: bundled corpus)"
    )
    conform.add_argument(
        "--dsn",
        default=None,
        help="PostgreSQL DSN for --runner cluster (default: $QL3_PG_DSN, else the server at "
        "postgresql://postgres@127.0.0.1:5432/test, else a throwaway server from pgserver)",
    )
    conform.add_argument("--junit", type=Path, default=None, help="write a JUnit XML report")
    conform.add_argument("--jobs", type=int, default=1, help="replay in N processes")
    conform.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    conform.add_argument(
        "--no-guards",
        action="store_true",
        help="skip the guard mode (a stale variant of every guard of every write path must be "
        "refused by the runner's own statements)",
    )
    conform.add_argument(
        "--no-kill",
        action="store_true",
        help="edge and cluster: skip the kill mode (SIGKILL at every statement boundary of "
        "every write path) and, cluster, the terminate mode (pg_terminate_backend at every "
        "statement boundary)",
    )

    traces = commands.add_parser("traces", help="inspect or regenerate traces")
    trace_commands = traces.add_subparsers(dest="traces_command", metavar="ACTION")
    show = trace_commands.add_parser("show", help="a readable view of one trace")
    show.add_argument("file", type=Path)
    show.add_argument(
        "--projection", action="store_true", help="print the full projection after each step"
    )
    generate = trace_commands.add_parser(
        "generate", help="regenerate the bundled corpus (python -m model_tests.corpus)"
    )
    generate.add_argument("--check", action="store_true", help="compare only; exit 1 on drift")
    generate.add_argument(
        "--component",
        choices=("run", "journal"),
        default="run",
        help="run (default: python -m model_tests.corpus) or journal "
        "(python -m conformance.journal.corpus)",
    )
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    stream = out if out is not None else sys.stdout
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "conform":
            return _conform(args, stream)
        if args.command == "traces" and args.traces_command == "show":
            return _show(args.file, stream, full=args.projection)
        if args.command == "traces" and args.traces_command == "generate":
            if args.component == "journal":
                return _generate_journal(args.check)
            return _generate(args.check)
        parser.print_help(stream)
        return EXIT_USAGE
    except (UsageError, FactoryError) as exc:
        _fail(str(exc))
    except BrokenPipeError:  # `qlk traces show F | head`: the reader left; not an error
        sys.stderr.close()
        return 0


def _fail(message: str) -> NoReturn:
    print(f"qlk: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def _conform(args: argparse.Namespace, stream: TextIO) -> int:
    if args.jobs < 1:
        raise UsageError("--jobs must be 1 or more")
    if args.component == "journal":
        return _conform_journal(args, stream)
    root: Path = args.traces if args.traces is not None else RUN_CORPUS
    if not root.is_dir():
        raise UsageError(f"--traces {root}: not a directory")
    paths = trace_paths(root)
    if not paths:
        raise UsageError(f"--traces {root}: no *.jsonl or *.jsonl.gz trace files")
    if args.runner != "cluster":
        dsn = args.dsn or os.environ.get("QL3_PG_DSN")
        resolve(args.runner, dsn=dsn)  # a bad runner name fails before any output
        return _conform_on(args, stream, root, paths, dsn)
    # Imported only here: an edge run never loads the PostgreSQL runner (CAD-10).
    local_server = importlib.import_module("conformance.run.local_server")
    try:
        with local_server.ensure_dsn(
            args.dsn, announce=lambda m: print(f"qlk conform: {m}", file=stream)
        ) as dsn:
            return _conform_on(args, stream, root, paths, dsn)
    except local_server.NoPostgresError as exc:
        raise UsageError(str(exc)) from None


def _conform_on(
    args: argparse.Namespace, stream: TextIO, root: Path, paths: list[Path], dsn: str | None
) -> int:
    progress = None if args.quiet else ProgressBar()
    print(f"qlk conform: {len(paths)} traces from {root} against {args.runner}", file=stream)
    try:
        summary = run_corpus(
            paths, args.runner, root=root, dsn=dsn, jobs=args.jobs, progress=progress
        )
    except TraceFormatError as exc:
        raise UsageError(f"malformed trace: {exc}") from None
    print(summary.table(args.runner), file=stream)
    not_applicable = [o for o in summary.outcomes if o.result.status == "not_applicable"]
    if not_applicable:
        needed = sorted({c for o in not_applicable for c in o.result.missing_capabilities})
        print(
            f"{len(not_applicable)} traces not applicable (runner lacks: {', '.join(needed)})",
            file=stream,
        )
    if args.junit is not None:
        write_junit(summary, args.runner, args.junit)
        print(f"JUnit report: {args.junit}", file=stream)
    status = 0
    if summary.diverged:
        print(render_divergences(summary.diverged), file=stream)
        status = EXIT_DIVERGED
    if not args.no_guards:
        status = max(status, _guard_mode(resolve(args.runner, dsn=dsn), root, stream))
    if args.runner == "edge" and not args.no_kill:
        status = max(status, _kill_mode(root, stream))
    if args.runner == "cluster" and not args.no_kill and dsn is not None:
        status = max(status, _cluster_kill_mode(root, dsn, stream))
    return status


def _conform_journal(args: argparse.Namespace, stream: TextIO) -> int:
    """The journal corpus against one or both journal adapters (SPEC §7, component journal)."""
    if args.runner != "edge" or args.dsn is not None:
        raise UsageError("--runner and --dsn are for --component run; use --journal-adapter")
    if args.jobs != 1:
        raise UsageError("--jobs is for --component run; journal traces replay in one process")
    root: Path = args.traces if args.traces is not None else JOURNAL_CORPUS
    if not root.is_dir():
        raise UsageError(f"--traces {root}: not a directory")
    paths = journal_trace_paths(root)
    if not paths:
        raise UsageError(f"--traces {root}: no *.jsonl or *.jsonl.gz trace files")
    adapter: str = args.journal_adapter
    adapters = JOURNAL_ADAPTERS if adapter == "all" else (adapter,)
    for name in adapters:
        if name != "reference":
            try:
                resolve_binding(name)
            except (ValueError, ImportError, AttributeError) as exc:
                raise UsageError(f"--journal-adapter {name!r}: {exc}") from None
    status = 0
    for name in adapters:
        label = f"journal/{name}"
        print(f"qlk conform: {len(paths)} journal traces from {root} against {name}", file=stream)
        try:
            summary = run_journal_corpus(
                paths, name, root=root, progress=None if args.quiet else ProgressBar()
            )
        except TraceFormatError as exc:
            raise UsageError(f"malformed trace: {exc}") from None
        print(summary.table(label), file=stream)
        faults = fault_counts(summary)
        kinds = ", ".join(f"{kind} {count:,}" for kind, count in sorted(faults.items()))
        print(f"faults injected by kind: {kinds or 'none'}", file=stream)
        not_applicable = [o for o in summary.outcomes if o.result.status == "not_applicable"]
        if not_applicable:
            needed = sorted({c for o in not_applicable for c in o.result.missing_capabilities})
            print(
                f"{len(not_applicable)} traces not applicable (adapter lacks: {', '.join(needed)})",
                file=stream,
            )
        if args.junit is not None:
            target = args.junit
            if len(adapters) > 1:
                target = target.with_name(f"{target.stem}-{name}{target.suffix}")
            write_junit(summary, label.replace("/", "-"), target)
            print(f"JUnit report: {target}", file=stream)
        if summary.diverged:
            print(render_divergences(summary.diverged), file=stream)
            status = EXIT_DIVERGED
    return status


def _guard_mode(factory: AdapterFactory, root: Path, stream: TextIO) -> int:
    """Every guard of every write path, probed with a stale write (`conformance.run.guards`)."""
    report = probe_every_write(factory, root)
    if report.not_applicable:
        print(f"guard mode: not applicable (runner lacks: {GUARDS})", file=stream)
        return 0
    failures = report.failures
    print(
        f"guard mode: {len(report.writes)} write paths, {report.probes} stale writes probed "
        f"(every guard of every effect), {len(failures)} accepted by the runner",
        file=stream,
    )
    for line in failures[:10]:
        print(f"  {line}", file=stream)
    if len(failures) > 10:
        print(f"  ... and {len(failures) - 10} more", file=stream)
    return EXIT_DIVERGED if failures else 0


def _kill_mode(root: Path, stream: TextIO) -> int:
    """The edge runner's kill mode over the same traces (RUN-06, RETRY-10)."""
    kill = importlib.import_module("conformance.run.kill_edge")
    results = kill.kill_every_write(root)
    kills = sum(r.kills for r in results)
    failures = [line for r in results for line in r.failures]
    print(
        f"kill mode: {len(results)} write paths, {kills} SIGKILLs at every statement boundary, "
        f"{len(failures)} left a state that was neither the before- nor the after-state",
        file=stream,
    )
    for line in failures[:10]:
        print(f"  {line}", file=stream)
    return EXIT_DIVERGED if failures else 0


def _cluster_kill_mode(root: Path, dsn: str, stream: TextIO) -> int:
    """The cluster runner's kill mode and terminate mode over the same traces (RUN-06,
    RETRY-10): a client SIGKILLed, then the runner's backend terminated by the server, at every
    statement boundary of every write path."""
    kill = importlib.import_module("conformance.run.kill_cluster")
    killed = kill.kill_every_write(root, dsn)
    torn = [line for r in killed for line in r.failures]
    print(
        f"kill mode: {len(killed)} write paths, {sum(r.kills for r in killed)} SIGKILLs at every "
        f"statement boundary, {len(torn)} torn states",
        file=stream,
    )
    _print_failures(torn, stream)
    terminated = kill.terminate_every_write(root, dsn)
    failed = [line for r in terminated for line in r.failures]
    print(
        f"terminate mode: {len(terminated)} write paths, "
        f"{sum(r.terminations for r in terminated)} pg_terminate_backend at every statement "
        f"boundary, {len(failed)} failures",
        file=stream,
    )
    _print_failures(failed, stream)
    return EXIT_DIVERGED if torn or failed else 0


def _print_failures(lines: list[str], stream: TextIO) -> None:
    for line in lines[:10]:
        print(f"  {line}", file=stream)
    if len(lines) > 10:
        print(f"  ... and {len(lines) - 10} more", file=stream)


def _show(path: Path, stream: TextIO, *, full: bool) -> int:
    if not path.is_file():
        raise UsageError(f"{path}: no such trace file")
    if is_journal_text(read_text(path)):
        try:
            lines = show_lines(load_journal(read_text(path)), full=full)
        except TraceFormatError as exc:
            raise UsageError(f"{path}: {exc}") from None
        for line in lines:
            print(line, file=stream)
        return 0
    try:
        trace = read_trace(path)
    except TraceFormatError as exc:
        raise UsageError(f"{path}: {exc}") from None
    header = trace.header
    print(
        f"{header.name}  [{header.component}, profile {header.profile}, seed {header.seed}]",
        file=stream,
    )
    if header.description:
        print(f"  {header.description}", file=stream)
    if header.capabilities:
        print(f"  needs: {', '.join(header.capabilities)}", file=stream)
    previous: dict[str, list[dict[str, Any]]] = {
        "runs": [],
        "attempts": [],
        "policies": [],
        "leases": [],
        "events": [],
    }
    for step in trace.steps:
        print(_step_line(step), file=stream)
        for change in changes(previous, step.expect.projection):
            print(f"      {change}", file=stream)
        if full:
            print(f"      projection {canonical(step.expect.projection)}", file=stream)
        previous = step.expect.projection
    return 0


def _step_line(step: Step) -> str:
    fault = f" [{step.fault.kind.value}]" if step.fault is not None else ""
    expect = step.expect.kind + (f" {step.expect.code}" if step.expect.code else "")
    detail = ""
    if step.command is not None:
        keys = ("run_id", "attempt_id", "new_attempt_id")
        ids = [str(step.command.args[k]) for k in keys if k in step.command.args]
        detail = " " + " ".join(ids)
    elif step.page is not None and step.expect.page is not None:
        page = step.expect.page
        if "items" in page:
            detail = f" -> {[item[0] for item in page['items']]} has_more={page['has_more']}"
        else:
            counts = {k: v for k, v in page.items() if v and k != "has_more"}
            detail = f" -> {counts} has_more={page['has_more']}"
    return f"{step.step:4d} t={step.observed_at_ms} {step_label(step)}{detail}{fault}: {expect}"


def _generate(check: bool) -> int:
    """The run corpus is recorded by the models (`python -m model_tests.corpus`), which only a
    source checkout has; conformance never imports them (the import contract), it runs them."""
    root = Path.cwd()
    if not (root / "model_tests" / "corpus" / "__main__.py").is_file():
        raise UsageError(
            "traces generate needs a source checkout (model_tests/): run it from the repository"
        )
    command = [sys.executable, "-m", "model_tests.corpus", *(["--check"] if check else [])]
    return subprocess.run(command, cwd=root, check=False).returncode  # noqa: S603


def _generate_journal(check: bool) -> int:
    return journal_corpus_main(["--check"] if check else ["--write"])


if __name__ == "__main__":
    sys.exit(main())
