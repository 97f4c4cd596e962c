"""`qlk serve`: the local application in the foreground (issue 15 items 2 and 4; SPEC O-1..O-4),
or one cluster scheduler replica (issue 17 item 1; O-5).

    qlk serve [--profile edge|standalone] [--until-idle] [--log-retention DUR] [--approvals]
              [--db FILE]
    qlk serve --profile cluster --dsn DSN [--schema NAME]

It starts the application (startup recovery, the first execution-control cycle, then both
lifecycles), prints one line per Run it starts and per completion it applies, and stops the
O-4 way on SIGTERM or Ctrl-C (scheduler drain, execution-control drain, storage close). With
`--until-idle` it also stops once the kernel's `local_idle` holds: nothing queued, running,
lost, waiting for retry or due, and no process watched. At the end it prints the Runs by status.
`--log-retention DUR` is how long a finished Attempt's log is kept (default 7d, 1m..365d;
decision LR-13).

`--approvals` (issue 19, SPEC §5) also runs the Approved Action lifecycle (an explicit opt-in:
without it nothing builds or imports it, §5.5, AA-15): every cycle it resolves requests left
behind their start barrier from the Run's facts, then admits the Runs of approved requests
(`qlk approve`), once each; the scheduler then runs them like any Run. Its cadence is the
profile's (§5.4: standalone every 2 s, edge every 30 s). Without it approval requests wait and
nothing admits them. The cluster profile has no such lifecycle: `--approvals` with it is exit 2
(`PROFILE_NOT_SUPPORTED`).

`--profile cluster --dsn DSN` (or `$QL3_DSN`; `--dsn` alone implies the cluster profile) runs
`runners.cluster.app.ClusterApplication` on the schema `--schema` (default `ql3`): the schema is
created if missing and migrated once under the migrator's advisory lock, the scheduler lifecycle
runs the O-5 cycle every second at database time and prints one line per cycle that did
something; SIGTERM (exit 0) or Ctrl-C (exit 130) stops it. Any number of replicas may serve one
database. A database that does not answer is exit 3 with one line (`conformance.cli.cluster`).
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from conformance.cli.common import (
    Commands,
    Context,
    ExitCode,
    InfrastructureError,
    UsageError,
    add_command,
    add_store_arguments,
    one_line,
    resolve_db,
)
from conformance.cli.durations import format_duration
from conformance.cli.tasks import duration_flag
from kernel.approved_action import local_primary_resource_policy
from kernel.specs import LOG_RETENTION_DEFAULT_MS, LOG_RETENTION_MS, Profile
from runners.edge.store import EdgeStore
from runners.lifecycle import CycleReport, LifecycleIncident
from runners.local.app import LocalApplication
from runners.local.control import ControlReport
from runners.local.reads import run_status_counts
from runners.local.scheduler import SchedulerReport
from runners.local.startup import StartupRecoveryExhausted

#: How often the foreground loop asks whether the application is idle (`--until-idle`).
IDLE_POLL_S = 0.2
#: The profiles a local application runs.
LOCAL_PROFILES = (Profile.STANDALONE.value, Profile.EDGE.value)
#: The profiles `qlk serve` runs: the local ones, and a cluster scheduler replica (issue 17).
SERVE_PROFILES = (*LOCAL_PROFILES, Profile.CLUSTER.value)


def register(commands: Commands) -> None:
    serve = add_command(
        commands,
        "serve",
        help="run the local application, or a cluster scheduler replica, in the foreground "
        "(Ctrl-C or SIGTERM stops it)",
        handler=run,
    )
    serve.add_argument(
        "--profile",
        choices=SERVE_PROFILES,
        default=None,
        help="standalone (default: 1 s cycles, 4 starts per cycle), edge (5 s cycles, 1 start "
        "per cycle; the small-device budget), or cluster (a scheduler replica on --dsn)",
    )
    serve.add_argument(
        "--until-idle",
        action="store_true",
        help="stop once nothing is queued, running, lost, waiting for retry or due (exit 0)",
    )
    serve.add_argument(
        "--log-retention",
        metavar="DUR",
        default=None,
        help="delete a finished Attempt's log this long after it ended (default 7d, 1m..365d)",
    )
    serve.add_argument(
        "--approvals",
        action="store_true",
        help=f"also admit the Runs of approved requests (qlk approve) and recover those left "
        f"behind their start barrier, {_approval_cadence()}; without it requests wait "
        "(not with the cluster profile)",
    )
    add_store_arguments(serve)


def _approval_cadence() -> str:
    """`every 2s on standalone, every 30s on edge`: the §5.4 policy's intervals, as read."""
    parts = [
        f"every {format_duration(local_primary_resource_policy(p).interval_ms)} on {p}"
        for p in LOCAL_PROFILES
    ]
    return ", ".join(parts)


def _log_retention(text: str | None) -> int:
    """`--log-retention` in milliseconds (the kernel's default when not given); exit 2 naming
    the flag for text that is not a duration or a duration outside the accepted range."""
    retention = duration_flag("--log-retention", text)
    if retention is None:
        return LOG_RETENTION_DEFAULT_MS
    if retention not in LOG_RETENTION_MS:
        low, high = (
            format_duration(LOG_RETENTION_MS.minimum),
            format_duration(LOG_RETENTION_MS.maximum),
        )
        raise UsageError(f"--log-retention {text}: give a duration from {low} to {high}")
    return retention


class _Printer:
    """Cycle reports -> one line per started Run and per applied completion (thread-safe)."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._lock = threading.Lock()
        self.incidents = 0

    def cycle(self, report: CycleReport[ControlReport | SchedulerReport]) -> None:
        result = report.result
        value = getattr(result, "value", None)
        lines: list[str] = []
        if isinstance(value, SchedulerReport):
            if value.schedule is not None:
                lines += [f"fired    {f.plan.run_id}" for f in value.schedule.admitted]
            lines += [f"started  {d.run_id}  ({d.launch})" for d in value.dispatches if d.run_id]
        elif isinstance(value, ControlReport):
            lines += [f"finished {a}  {kind}:{code}" for a, kind, code in value.completions]
            lines += [f"deadline {r}  {kind}:{code}" for r, kind, code in value.deadlines]
            lines += [f"stopped  {a}  {kind}:{code}" for a, kind, code in value.stops]
            lines += [f"cancel   {r}  {kind}:{code}" for r, kind, code in value.convergences]
            lines += [f"no receipt {a} (left to startup recovery)" for a in value.without_receipt]
            lines += [f"warning  {e}" for e in value.errors]
        if lines:
            with self._lock:
                for line in lines:
                    print(line, file=self._ctx.out, flush=True)

    def incident(self, incident: LifecycleIncident) -> None:
        with self._lock:
            self.incidents += 1
            print(
                f"qlk serve: {incident.lifecycle}: {incident.kind} ({incident.error}); "
                "the next cycle tries again",
                file=self._ctx.err,
                flush=True,
            )


@contextmanager
def _stop_signals(stop: threading.Event, interrupted: list[int]) -> Iterator[None]:
    """SIGTERM and SIGINT set `stop` (O-4 then runs on the main thread), restored afterwards."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        interrupted.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run(args: argparse.Namespace, ctx: Context) -> int:
    profile: str | None = args.profile
    cluster = profile == Profile.CLUSTER.value or (profile is None and args.dsn is not None)
    if cluster and args.approvals:
        raise UsageError(
            "--approvals: the cluster profile runs no Approved Action lifecycle (SPEC §5.4); "
            "serve a local --db file with it [PROFILE_NOT_SUPPORTED]"
        )
    if cluster:
        # Imported here: a local serve never loads psycopg (docs/performance.md).
        from conformance.cli.cluster import serve_cluster  # noqa: PLC0415

        return serve_cluster(args, ctx)
    args.profile = profile or Profile.STANDALONE.value
    if args.dsn is not None or args.schema is not None:
        raise UsageError(f"--dsn and --schema go with --profile cluster, not {args.profile}")
    db = resolve_db(args.db)
    retention = _log_retention(args.log_retention)
    printer = _Printer(ctx)
    try:
        app = LocalApplication(
            db,
            Profile(args.profile),
            on_cycle=printer.cycle,
            report=printer.incident,
            log_retention_ms=retention,
            approvals=args.approvals,
        )
    except (OSError, sqlite3.Error) as exc:
        raise UsageError(f"--db {db}: cannot open the database: {one_line(exc)}") from None
    stop = threading.Event()
    interrupted: list[int] = []
    with _stop_signals(stop, interrupted):
        try:
            startup = app.start()
        except StartupRecoveryExhausted as exc:
            app.stop()
            raise InfrastructureError(f"{db}: {exc}") from None
        approvals = ""
        if args.approvals:
            interval = local_primary_resource_policy(args.profile).interval_ms
            approvals = f"; approvals every {format_duration(interval)}"
        print(
            f"qlk serve: {db} ({args.profile}{approvals}); startup recovery resolved "
            f"{len(startup.resolved)}, adopted {len(startup.adopted)}, "
            f"failed {startup.orphaned} orphaned",
            file=ctx.err,
            flush=True,
        )
        try:
            while not stop.wait(IDLE_POLL_S):
                if args.until_idle and app.idle():
                    break
        finally:
            stopped = app.stop()
    counts = _counts(db)
    # Imported as it exits, the one time serve prints with rich: held from the start, rich
    # would add about 1 MiB to serve's peak memory (docs/performance.md).
    from rich.table import Table  # noqa: PLC0415

    table = Table(title=f"Runs in {db.name}", show_edge=False)
    table.add_column("status")
    table.add_column("runs", justify="right")
    for status, count in sorted(counts.items()):
        table.add_row(status, str(count))
    ctx.console.print(table)
    if not stopped.drained:
        print("qlk serve: a cycle did not finish within the stop timeout", file=ctx.err)
    if signal.SIGINT in interrupted:
        return ExitCode.INTERRUPTED
    return ExitCode.OK


def _counts(db: Path) -> dict[str, int]:
    store = EdgeStore(db)
    try:
        return {str(status.value): n for status, n in run_status_counts(store).items()}
    finally:
        store.close()
