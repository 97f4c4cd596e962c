"""`qlk conform`: replay a trace corpus against a runner, then the guard and kill modes.

    qlk conform                          # the bundled corpus against the edge runner (SQLite)
    qlk conform --runner cluster --dsn postgresql://postgres@127.0.0.1:5432/test
    qlk conform --runner mypkg.adapter:make_adapter --traces DIR --junit report.xml --jobs 2
    qlk conform --component journal [--journal-adapter file|sqlite|all]

The bundled corpus is `conformance/traces/run/` and then `conformance/traces/workflow/` (the
Workflow traces of SPEC §4.10, capability `workflow`); `--traces DIR` replays DIR alone.

After the replay, `qlk conform` runs the guard mode (every runner whose adapter exposes its
storage port: a stale variant of every guard of every write path must be refused) and, for the
edge runner, the kill mode (SIGKILL at every statement boundary of every write path); for the
cluster runner, the kill mode and the terminate mode (`pg_terminate_backend` of the runner's
backend at every statement boundary, `conformance.run.kill_cluster`); for a `module:factory`
runner whose adapter offers the kill-mode port, the kill mode at every boundary of its storage
port (`conformance.run.kill_port`), else a line saying it did not run and what it lacks. For
the edge and cluster runners, last, the lock probe (`conformance.run.locks`, B-35, D-2): while
every write path holds its transaction after its load, a second connection's `FOR UPDATE` /
`BEGIN IMMEDIATE` on what it loaded must block until it commits. With the bundled corpus every
mode walks the run corpus and then the Workflow corpus: the Workflow write paths (SPEC §4, one
`execute_workflow` transaction each) are guarded, killed, terminated and lock-probed as the Run
write paths are, and each mode's line says how many of its write paths are Workflow ones
(`Workflow write paths: N`).

`--component journal` replays the journal corpus (`conformance/traces/journal/`, SPEC §7
component `journal`) against the file and/or SQLite journal adapter on real temporary roots
(`conformance.journal.replay`); guard and kill modes are run-component modes.

Exit status (SPEC E-7): 0 every applicable trace passed and no stale write or kill broke the
state; 1 a divergence, an accepted stale write or a torn state; 2 a bad flag, a missing trace
directory or a malformed trace; 3 the database does not answer, psycopg is missing for
`--runner cluster`, or the runner's factory raises.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gzip
import importlib
import os
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit, urlunsplit

from conformance.cli.common import (
    Commands,
    Context,
    ExitCode,
    InfrastructureError,
    UsageError,
    add_command,
    one_line,
)
from conformance.journal.replay import ADAPTERS as JOURNAL_ADAPTERS
from conformance.journal.replay import (
    fault_counts,
    journal_trace_paths,
    resolve_binding,
    run_journal_corpus,
)
from conformance.journal.trace import JOURNAL_CORPUS
from conformance.report import (
    MalformedTrace,
    ModeResult,
    Outcome,
    ReplayProgress,
    RunnerFailed,
    Summary,
    guarded,
    render_divergences,
    run_corpus,
    summary_table,
    write_junit,
)
from conformance.run.corpus import APPROVAL_CORPUS, RUN_CORPUS, WORKFLOW_CORPUS, trace_paths
from conformance.run.factories import BUILTIN, AdapterFactory, FactoryError, resolve
from conformance.run.guards import GUARDS, probe_every_write
from conformance.run.trace import TraceFormatError
from conformance.run.walk import Roots
from kernel.workflow import WORKFLOW_COMMANDS_BY_NAME

#: How long `--runner cluster` waits for the database to answer before exit 3.
CONNECT_TIMEOUT_S = 5
#: The extra that installs the cluster runner's dependencies.
CLUSTER_EXTRA = "pip install 'ql3-kernel[cluster]'"


def register(commands: Commands) -> None:
    conform = add_command(
        commands,
        "conform",
        help="replay a trace corpus against a runner and report divergences",
        handler=run,
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
    conform.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    conform.add_argument(
        "--no-guards",
        action="store_true",
        help="skip the guard mode (a stale variant of every guard of every write path must be "
        "refused by the runner's own statements)",
    )
    conform.add_argument(
        "--no-kill",
        action="store_true",
        help="skip the kill mode (SIGKILL at every statement boundary of every write path; "
        "for module:factory runners, at every boundary of the storage port) and, cluster, the "
        "terminate mode (pg_terminate_backend at every statement boundary)",
    )
    conform.add_argument(
        "--no-locks",
        action="store_true",
        help="edge and cluster: skip the lock probe (a second connection must block on what "
        "every write path loaded while it holds its transaction)",
    )


def run(args: argparse.Namespace, ctx: Context) -> int:
    if args.jobs < 1:
        raise UsageError("--jobs must be 1 or more")
    if args.component == "journal":
        return _conform_journal(args, ctx)
    root: Path = args.traces if args.traces is not None else RUN_CORPUS
    paths = _trace_files(root, trace_paths)
    if args.runner != "cluster":
        dsn = args.dsn or os.environ.get("QL3_PG_DSN")
        _factory(args.runner, dsn)  # a bad runner name fails before any output
        return _conform_on(args, ctx, root, paths, dsn)
    # Imported only here: an edge run never loads the PostgreSQL runner (CAD-10).
    try:
        local_server = importlib.import_module("conformance.run.local_server")
    except ImportError as exc:
        missing = exc.name or "psycopg"
        raise InfrastructureError(
            f"--runner cluster needs {missing}, which is not installed: {CLUSTER_EXTRA}"
        ) from exc
    try:
        with local_server.ensure_dsn(
            args.dsn, announce=lambda m: print(f"qlk conform: {m}", file=ctx.out)
        ) as dsn:
            _check_database(dsn, _dsn_source(args.dsn))
            _factory(args.runner, dsn)
            return _conform_on(args, ctx, root, paths, dsn)
    except local_server.NoPostgresError as exc:
        raise InfrastructureError(f"--runner cluster: {exc}") from exc


def _trace_files(root: Path, find: Callable[[Path], list[Path]]) -> list[Path]:
    if not root.is_dir():
        what = "not a directory" if root.exists() else "no such directory"
        raise UsageError(f"--traces {root}: {what}")
    try:
        paths = find(root)
    except OSError as exc:
        raise UsageError(f"--traces {root}: cannot list the directory: {exc}") from None
    if not paths:
        raise UsageError(f"--traces {root}: no *.jsonl or *.jsonl.gz trace files")
    return paths


def _factory(spec: str, dsn: str | None) -> AdapterFactory:
    """The runner named by `--runner`, or the error that says why not: a name or module that
    does not exist is bad usage (2); a built-in runner or a named module whose own imports
    fail (a missing dependency), or a module that raises on import, is exit 3."""
    try:
        return resolve(spec, dsn=dsn)
    except FactoryError as exc:
        cause = exc.__context__
        if isinstance(cause, ImportError) and not _names_module_of(spec, cause):
            hint = f"; {CLUSTER_EXTRA}" if spec == "cluster" else ""
            raise InfrastructureError(f"{exc}{hint}") from cause
        raise UsageError(str(exc)) from None
    except Exception as exc:
        raise InfrastructureError(
            f"--runner {spec!r}: importing it raised {one_line(exc)}"
        ) from exc


def _names_module_of(spec: str, error: ImportError) -> bool:
    """Whether the import that failed is the module `spec` names itself (or a package above
    it), as opposed to something that module imports."""
    if spec in BUILTIN:
        return False
    module = spec.partition(":")[0]
    return error.name is not None and (module == error.name or module.startswith(error.name + "."))


def _dsn_source(explicit: str | None) -> str:
    if explicit:
        return "--dsn"
    if os.environ.get("QL3_PG_DSN"):
        return "$QL3_PG_DSN"
    return "--runner cluster: the server at"


def redact(dsn: str) -> str:
    """`dsn` without its password (URL or key=value form), for messages."""
    parts = urlsplit(dsn)
    if parts.scheme and parts.password is not None:
        host = parts.netloc.rpartition("@")[2]
        user = parts.username or ""
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", dsn)


def _check_database(dsn: str, source: str) -> None:
    """Exit 3, before any output, when the database does not answer."""
    import psycopg  # noqa: PLC0415 - the cluster path only (CAD-10)

    try:
        with psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True):
            pass
    except psycopg.Error as exc:
        raise InfrastructureError(
            f"{source} {redact(dsn)}: the database does not answer: {one_line(exc)}"
        ) from exc


@contextlib.contextmanager
def _replay_errors(runner: str) -> Iterator[None]:
    """A malformed trace is bad input (2, naming the file); a factory that raises is exit 3."""
    try:
        yield
    except MalformedTrace as exc:
        raise UsageError(str(exc)) from None
    except RunnerFailed as exc:
        raise InfrastructureError(f"--runner {runner}: {exc}") from exc


def _progress(
    args: argparse.Namespace, ctx: Context
) -> contextlib.AbstractContextManager[ReplayProgress | None]:
    if args.quiet:
        return contextlib.nullcontext()
    return ReplayProgress(ctx.err_console)


def _check_junit_target(target: Path | None) -> None:
    """A `--junit` file that cannot be written is refused before anything runs (exit 2), not
    after minutes of replay: its folder must be a writable directory (or creatable under one)
    and the path itself not a directory."""
    if target is None:
        return
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if target.is_dir():
        raise UsageError(f"--junit {target}: cannot write the report: it is a directory")
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"--junit {target}: cannot write the report: {folder} is not writable")


def _not_applicable(summary: Summary, who: str) -> str | None:
    """How many traces were not applicable and, per capability, how many lacked it (never
    counted as passed); `None` when every trace applied."""
    lacking: dict[str, int] = {}
    count = 0
    for outcome in summary.outcomes:
        if outcome.result.status == "not_applicable":
            count += 1
            for capability in outcome.result.missing_capabilities:
                lacking[capability] = lacking.get(capability, 0) + 1
    if not count:
        return None
    needed = ", ".join(f"{name} ({n})" for name, n in sorted(lacking.items()))
    return f"{count} traces not applicable ({who} lacks: {needed})"


def _verdict(summary: Summary, modes: Sequence[ModeResult]) -> str:
    """The last line of a run: PASS, or FAIL and why, in the order the checks ran; traces that
    did not apply are named by the capability they needed, on a PASS as on a FAIL."""
    reasons = []
    if summary.diverged:
        reasons.append(f"{len(summary.diverged)} traces diverged")
    reasons.extend(f"{mode.name}: {len(mode.failures)} findings" for mode in modes if mode.failures)
    verdict = "verdict: PASS" if not reasons else f"verdict: FAIL ({'; '.join(reasons)})"
    notes = [f"{mode.name} did not run" for mode in modes if mode.skipped is not None]
    skipped = _not_applicable(summary, "runner")
    if skipped is not None:
        notes.append(skipped)
    return "; ".join([verdict, *notes])


def _conform_on(
    args: argparse.Namespace, ctx: Context, root: Path, paths: list[Path], dsn: str | None
) -> int:
    stream = ctx.out
    _check_junit_target(args.junit)
    # The bundled corpus is the run corpus and, after it, the Workflow corpus (SPEC §4.10) and
    # the approval-domain corpus (SPEC §5, issue 19); `--traces DIR` replays DIR alone.
    extra = [] if args.traces is not None else [WORKFLOW_CORPUS, APPROVAL_CORPUS]
    more_paths = {corpus: trace_paths(corpus) for corpus in extra}
    print(f"qlk conform: {len(paths)} traces from {root} against {args.runner}", file=stream)
    for corpus, found in more_paths.items():
        label = "workflow" if corpus == WORKFLOW_CORPUS else "approved_action"
        print(
            f"qlk conform: {len(found)} {label} traces from {corpus} against {args.runner}",
            file=stream,
        )
    with _replay_errors(args.runner), _progress(args, ctx) as progress:
        summary = run_corpus(
            paths, args.runner, root=root, dsn=dsn, jobs=args.jobs, progress=progress
        )
        for corpus, found in more_paths.items():
            more = run_corpus(
                found, args.runner, root=corpus, dsn=dsn, jobs=args.jobs, progress=progress
            )
            prefix = f"{corpus.name}/"
            summary.outcomes.extend(
                dataclasses.replace(o, path=prefix + o.path) for o in more.outcomes
            )
            summary.seconds += more.seconds
    _print_summary(ctx, summary, args.runner)
    skipped = _not_applicable(summary, "runner")
    if skipped is not None:
        print(skipped, file=stream)
    if summary.diverged:
        print(render_divergences(summary.diverged), file=stream)
    modes: list[ModeResult] = []
    # The modes walk what was replayed: the run corpus, then the Workflow corpus (issue 18
    # item 3: the Workflow write paths are guarded and killed like the Run ones) and the
    # approval corpus (issue 19 item 3; a runner without `approved_action` walks none of it).
    walked: Roots = (root, *more_paths) if more_paths else root
    if not args.no_guards:
        with _replay_errors(args.runner):
            modes.extend(_guard_mode(_factory(args.runner, dsn), walked, ctx))
    if args.runner == "edge" and not args.no_kill:
        modes.append(_kill_mode(walked, ctx))
    if args.runner == "cluster" and not args.no_kill and dsn is not None:
        modes.extend(_cluster_kill_mode(walked, dsn, ctx))
    if args.runner == "reference" and not args.no_kill:
        modes.append(_kill_mode_not_run(args.runner, ctx))
    if args.runner not in {"edge", "cluster", "reference"} and not args.no_kill:
        with _replay_errors(args.runner):
            modes.append(_port_kill_mode(args.runner, _factory(args.runner, dsn), walked, ctx))
    if args.runner in {"edge", "cluster"} and not args.no_locks:
        modes.extend(_lock_probe(args.runner, walked, dsn, ctx))
    if args.junit is not None:
        _write_junit(summary, args.runner, args.junit, stream, modes)
    print(_verdict(summary, modes), file=stream)
    failed = bool(summary.diverged) or any(mode.failures for mode in modes)
    return ExitCode.CHECK_FAILED if failed else ExitCode.OK


def _print_summary(ctx: Context, summary: Summary, runner: str) -> None:
    ctx.console.print(summary_table(summary, runner, terminal=ctx.console.is_terminal))


def _write_junit(
    summary: Summary,
    runner: str,
    target: Path,
    stream: TextIO,
    modes: Sequence[ModeResult] = (),
) -> None:
    try:
        write_junit(summary, runner, target, modes)
    except OSError as exc:
        reason = f"{exc.strerror}: {exc.filename}" if exc.strerror and exc.filename else exc
        raise UsageError(f"--junit {target}: cannot write the report: {reason}") from None
    print(f"JUnit report: {target}", file=stream)


def _conform_journal(args: argparse.Namespace, ctx: Context) -> int:
    """The journal corpus against one or both journal adapters (SPEC §7, component journal)."""
    stream = ctx.out
    _check_junit_target(args.junit)
    if args.runner != "edge" or args.dsn is not None:
        raise UsageError("--runner and --dsn are for --component run; use --journal-adapter")
    if args.jobs != 1:
        raise UsageError("--jobs is for --component run; journal traces replay in one process")
    root: Path = args.traces if args.traces is not None else JOURNAL_CORPUS
    paths = _trace_files(root, journal_trace_paths)
    adapter: str = args.journal_adapter
    adapters = JOURNAL_ADAPTERS if adapter == "all" else (adapter,)
    for name in adapters:
        if name != "reference":
            try:
                resolve_binding(name)
            except (ValueError, ImportError, AttributeError) as exc:
                raise UsageError(f"--journal-adapter {name!r}: {exc}") from None
    status: int = ExitCode.OK
    for name in adapters:
        label = f"journal/{name}"
        print(f"qlk conform: {len(paths)} journal traces from {root} against {name}", file=stream)
        summary = _replay_journal(args, ctx, paths, name, root)
        _print_summary(ctx, summary, label)
        faults = fault_counts(summary)
        kinds = ", ".join(f"{kind} {count:,}" for kind, count in sorted(faults.items()))
        print(f"faults injected by kind: {kinds or 'none'}", file=stream)
        skipped = _not_applicable(summary, "adapter")
        if skipped is not None:
            print(skipped, file=stream)
        if args.junit is not None:
            target = args.junit
            if len(adapters) > 1:
                target = target.with_name(f"{target.stem}-{name}{target.suffix}")
            _write_junit(summary, label.replace("/", "-"), target, stream)
        if summary.diverged:
            print(render_divergences(summary.diverged), file=stream)
            status = ExitCode.CHECK_FAILED
    return status


def _replay_journal(
    args: argparse.Namespace, ctx: Context, paths: Sequence[Path], name: str, root: Path
) -> Summary:
    """`run_journal_corpus`, with the file a `TraceFormatError` came from: the traces replay
    in order, so it is the one after the last reported."""
    done = 0
    with _progress(args, ctx) as display:

        def progress(outcome: Outcome, count: int, total: int) -> None:
            nonlocal done
            done = count
            if display is not None:
                display(outcome, count, total)

        try:
            return run_journal_corpus(paths, name, root=root, progress=progress)
        except TraceFormatError as exc:
            raise UsageError(f"{paths[done]}: malformed trace: {exc}") from None
        except (gzip.BadGzipFile, EOFError, zlib.error, UnicodeDecodeError) as exc:
            raise UsageError(f"{paths[done]}: cannot read the trace: {exc}") from None


def _workflow_paths(commands: Sequence[str]) -> str:
    """How many of a mode's write paths are Workflow ones (SPEC §4), for its line. It goes in
    a parenthesis that leaves the rest of the line as it was (`N write paths, K ..., F
    failures`): scripts and the README's checks read that shape."""
    count = sum(1 for name in commands if name in WORKFLOW_COMMANDS_BY_NAME)
    return f"Workflow write paths: {count}"


def _guard_mode(factory: AdapterFactory, root: Roots, ctx: Context) -> list[ModeResult]:
    """Every guard of every write path, probed with a stale write (`conformance.run.guards`);
    no result when the runner cannot be probed (it says so)."""
    stream = ctx.out
    report = probe_every_write(guarded(factory), root)
    if report.not_applicable:
        print(f"guard mode: not applicable (runner lacks: {GUARDS})", file=stream)
        return []
    flows = _workflow_paths([w.command for w in report.writes])
    line = f"guard mode: {report.summary()}".replace(
        "(every guard of every effect)", f"(every guard of every effect; {flows})", 1
    )
    print(line, file=stream)
    _print_failures(report.failures, ctx)
    return [ModeResult("guard mode", line, tuple(report.failures))]


def _kill_mode_not_run(runner: str, ctx: Context) -> ModeResult:
    """Kill mode SIGKILLs a child process at the statement boundaries of the built-in runners'
    own drivers; for any other runner it does not run, and the report says so (issue 16 item 4)
    instead of passing over it in silence."""
    if runner == "reference":
        reason = "did not run: the reference store lives in memory, no state survives a SIGKILL"
    else:
        reason = (
            f"did not run: {runner} is not a built-in runner; kill mode drives the edge and "
            "cluster runners' statements in a child process (docs/adapter-guide.md, kill mode)"
        )
    print(f"kill mode: {reason}", file=ctx.out)
    return ModeResult("kill mode", f"kill mode: {reason}", skipped=reason)


def _port_kill_mode(runner: str, factory: AdapterFactory, root: Roots, ctx: Context) -> ModeResult:
    """Kill mode through the adapter port for a `module:factory` runner that offers it
    (`conformance.run.kill_port`); otherwise not run, with the part of the port it lacks."""
    kill = importlib.import_module("conformance.run.kill_port")
    report = kill.kill_every_write(factory, root, fresh=guarded(factory))
    if report.not_run is not None:
        reason = (
            f"did not run: {runner} is not a built-in runner and {report.not_run}; "
            "docs/adapter-guide.md, kill mode"
        )
        print(f"kill mode: {reason}", file=ctx.out)
        return ModeResult("kill mode", f"kill mode: {reason}", skipped=reason)
    flows = _workflow_paths([r.path.command.name for r in report.results])
    line = f"kill mode: {report.summary()}".replace(
        "before and after commit)", f"before and after commit; {flows})", 1
    )
    print(line, file=ctx.out)
    _print_failures(report.failures, ctx)
    return ModeResult("kill mode", line, tuple(report.failures))


def _kill_mode(root: Roots, ctx: Context) -> ModeResult:
    """The edge runner's kill mode over the same traces (RUN-06, RETRY-10)."""
    kill = importlib.import_module("conformance.run.kill_edge")
    results = kill.kill_every_write(root)
    kills = sum(r.kills for r in results)
    failures = [line for r in results for line in r.failures]
    flows = _workflow_paths([r.path.command.name for r in results])
    line = (
        f"kill mode: {len(results)} write paths, {kills} SIGKILLs at every statement boundary, "
        f"{len(failures)} left a state that was neither the before- nor the after-state ({flows})"
    )
    print(line, file=ctx.out)
    _print_failures(failures, ctx)
    return ModeResult("kill mode", line, tuple(failures))


def _cluster_kill_mode(root: Roots, dsn: str, ctx: Context) -> list[ModeResult]:
    """The cluster runner's kill mode and terminate mode over the same traces (RUN-06,
    RETRY-10): a client SIGKILLed, then the runner's backend terminated by the server, at every
    statement boundary of every write path."""
    stream = ctx.out
    kill = importlib.import_module("conformance.run.kill_cluster")
    killed = kill.kill_every_write(root, dsn)
    torn = [line for r in killed for line in r.failures]
    flows = _workflow_paths([r.path.command.name for r in killed])
    kill_line = (
        f"kill mode: {len(killed)} write paths, {sum(r.kills for r in killed)} SIGKILLs at every "
        f"statement boundary, {len(torn)} torn states ({flows})"
    )
    print(kill_line, file=stream)
    _print_failures(torn, ctx)
    terminated = kill.terminate_every_write(root, dsn)
    failed = [line for r in terminated for line in r.failures]
    flows = _workflow_paths([r.path.command.name for r in terminated])
    terminate_line = (
        f"terminate mode: {len(terminated)} write paths, "
        f"{sum(r.terminations for r in terminated)} pg_terminate_backend at every statement "
        f"boundary, {len(failed)} failures ({flows})"
    )
    print(terminate_line, file=stream)
    _print_failures(failed, ctx)
    return [
        ModeResult("kill mode", kill_line, tuple(torn)),
        ModeResult("terminate mode", terminate_line, tuple(failed)),
    ]


def _lock_probe(runner: str, root: Roots, dsn: str | None, ctx: Context) -> list[ModeResult]:
    """The lock probe of the edge or cluster runner over the same traces (B-35, D-2)."""
    locks = importlib.import_module("conformance.run.locks")
    if runner == "edge":
        report = locks.lock_every_write_edge(root)
    elif dsn is not None:
        report = locks.lock_every_write_cluster(root, dsn)
    else:
        return []
    flows = _workflow_paths([r.path.command.name for r in report.results])
    line = str(report.summary()).replace("after the load,", f"after the load ({flows}),", 1)
    print(line, file=ctx.out)
    _print_failures(report.failures, ctx)
    return [ModeResult("lock probe", line, tuple(report.failures))]


def _print_failures(lines: list[str], ctx: Context) -> None:
    for line in lines[:10]:
        print(f"  {line}", file=ctx.out)
    if len(lines) > 10:
        print(f"  ... and {len(lines) - 10} more", file=ctx.out)
