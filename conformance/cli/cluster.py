"""The cluster profile's side of `qlk serve`, `submit`, `status` and `task` (issue 17 item 1):
`--dsn DSN [--schema NAME]` instead of `--db FILE`.

Imported only by a command given `--dsn` or `--profile cluster`, so the local application's
commands never load psycopg (docs/performance.md, peak memory of `qlk serve`).

- `cluster_target(args)`: the DSN (with a connect timeout added unless it names one) and the
  schema; exit 2 for a DSN that is not a connection string, a schema name that is not a plain
  identifier, `--schema` without `--dsn`.
- `open_cluster(target)`: the store on the schema (created if missing, migrated once under the
  migrator's advisory lock); a database that does not answer, or fails while the command runs,
  is exit 3 with one line naming the server (never the password), not a traceback.
- `serve_cluster(args, ctx)`: the `ClusterApplication` in the foreground: one line per cycle that
  did something, SIGTERM (exit 0) or Ctrl-C (exit 130) stops it, then the Runs by status.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg import conninfo

from conformance.cli.common import (
    DSN_VARIABLE,
    SCHEMA_DEFAULT,
    Context,
    ExitCode,
    InfrastructureError,
    UsageError,
    one_line,
)
from kernel import ConvergencePageResult, LostRetryPageResult
from kernel.specs import ClusterStep, RunStatus
from runners.cluster.app import ClusterApplication, open_cluster_store
from runners.cluster.cycle import CycleResult
from runners.cluster.migrate import MigrationError
from runners.cluster.runtime import ClusterRuntime
from runners.cluster.status import run_status_counts
from runners.cluster.store import ClusterStore
from runners.lifecycle import CycleReport, CycleSucceeded, LifecycleIncident
from runners.passes import RecoveryPageResult
from runners.task_schedule import SchedulePhaseReport

__all__ = [
    "CONNECT_TIMEOUT_S",
    "ClusterTarget",
    "cluster_now",
    "cluster_target",
    "counts",
    "cycle_line",
    "open_cluster",
    "serve_cluster",
]

#: How long a command waits for the server to answer a connection (unless the DSN says).
CONNECT_TIMEOUT_S: Final = 5
#: A schema name: a plain lower-case SQL identifier (no quoting surprises).
_SCHEMA: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}", re.ASCII)
#: How often the foreground loop wakes while it waits for a stop signal.
_POLL_S: Final = 0.2


@dataclass(frozen=True, slots=True)
class ClusterTarget:
    """Where the cluster profile's data is. `where` names the server for messages (host, port,
    database; never the password); `__repr__` leaves the DSN out for the same reason."""

    dsn: str
    schema: str
    where: str

    def __repr__(self) -> str:
        return f"ClusterTarget(where={self.where!r}, schema={self.schema!r})"


def _describe(params: Mapping[str, Any]) -> str:
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port") or "5432"
    database = params.get("dbname") or params.get("user") or ""
    return f"{host}:{port}/{database}"


def cluster_target(
    args: argparse.Namespace, environ: Mapping[str, str] = os.environ, *, required: bool = False
) -> ClusterTarget | None:
    """`--dsn` (else `$QL3_DSN` when `required`, i.e. `serve --profile cluster`) and `--schema`;
    None when neither is given and the command may use the local file instead."""
    dsn: str | None = getattr(args, "dsn", None)
    source = "--dsn"
    if not dsn and required and environ.get(DSN_VARIABLE):
        dsn, source = environ[DSN_VARIABLE], f"${DSN_VARIABLE}"
    schema_arg: str | None = getattr(args, "schema", None)
    if not dsn:
        if required:
            raise UsageError(f"--profile cluster needs --dsn DSN (or ${DSN_VARIABLE})")
        if schema_arg is not None:
            raise UsageError("--schema goes with --dsn")
        return None
    schema = SCHEMA_DEFAULT if schema_arg is None else schema_arg
    if not _SCHEMA.fullmatch(schema):
        raise UsageError(
            f"--schema {schema!r}: give a lower-case name of letters, digits and _ (at most 63)"
        )
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        raise UsageError(f"{source}: not a PostgreSQL connection string or URI") from None
    if "connect_timeout" not in params:
        dsn = conninfo.make_conninfo(dsn, connect_timeout=CONNECT_TIMEOUT_S)
    return ClusterTarget(dsn, schema, _describe(params))


def _failed(target: ClusterTarget, exc: psycopg.Error) -> InfrastructureError:
    if isinstance(exc, psycopg.OperationalError):
        return InfrastructureError(
            f"--dsn {target.where}: the database does not answer ({one_line(exc)})"
        )
    return InfrastructureError(f"--dsn {target.where}: the database failed ({one_line(exc)})")


@contextmanager
def open_cluster(target: ClusterTarget, *, pool_size: int | None = None) -> Iterator[ClusterStore]:
    """The store on the target's schema (module docstring), closed afterwards."""
    try:
        store = open_cluster_store(target.dsn, target.schema, pool_size=pool_size)
    except MigrationError as exc:
        raise UsageError(
            f"--dsn {target.where} --schema {target.schema}: not a schema of this qlk version "
            f"({exc})"
        ) from None
    except psycopg.Error as exc:
        raise _failed(target, exc) from None
    try:
        yield store
    except psycopg.Error as exc:
        raise _failed(target, exc) from None
    finally:
        store.close()


def cluster_now(store: ClusterStore) -> int:
    """The database's time (cluster time is database time, ADR-0232 §1)."""
    return ClusterRuntime(store).now_ms()


def counts(store: ClusterStore) -> dict[RunStatus, int]:
    return run_status_counts(store)


# -- serve -------------------------------------------------------------------------------------


def cycle_line(result: CycleResult) -> str | None:
    """What one cycle did, as one line (None: nothing): Attempts recovered (marked lost or
    released), Runs moved on by lost retry, converged, admitted by the trigger schedule, and
    the leases the dispatch step granted (its result's `granted`, when it reports one)."""
    done = dict(result.completed)
    parts: list[tuple[str, int]] = []
    recovery = done.get(ClusterStep.RUNTIME_RECOVERY)
    if isinstance(recovery, RecoveryPageResult):
        parts.append(("recovered", recovery.count("applied")))
    retry = done.get(ClusterStep.LOST_RETRY)
    if isinstance(retry, LostRetryPageResult):
        parts.append(("requeued", retry.scheduled + retry.requeued))
    converge = done.get(ClusterStep.CANCELLATION_CONVERGENCE)
    if isinstance(converge, ConvergencePageResult):
        parts.append(("converged", converge.count("converged")))
    schedule = done.get(ClusterStep.TRIGGER_SCHEDULE)
    if isinstance(schedule, SchedulePhaseReport):
        parts.append(("admitted", len(schedule.admitted)))
    granted = getattr(done.get(ClusterStep.DISPATCH), "granted", None)
    if isinstance(granted, int):
        parts.append(("granted", granted))
    did = [f"{name} {n}" for name, n in parts if n]
    return ", ".join(did) if did else None


class _Printer:
    """Cycle reports -> one line per cycle that did something; a failing cycle once per change
    of its step and code (the cadence retries every second: no flood)."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._lock = threading.Lock()
        self._failure: tuple[str, str] | None = None

    def cycle(self, report: CycleReport[CycleResult]) -> None:
        result = report.result
        if not isinstance(result, CycleSucceeded):
            return  # reported as an incident
        value: CycleResult = result.value
        line = cycle_line(value)
        with self._lock:
            if line is not None:
                print(f"cycle {result.ordinal}: {line}", file=self._ctx.out, flush=True)
            failure = None
            if value.failed_step is not None:
                failure = (value.failed_step.value, value.code or "")
            if failure is not None and failure != self._failure:
                print(
                    f"qlk serve: cycle {result.ordinal} stopped at {failure[0]} [{failure[1]}]; "
                    "the next cycle tries again",
                    file=self._ctx.err,
                    flush=True,
                )
            self._failure = failure

    def incident(self, incident: LifecycleIncident) -> None:
        with self._lock:
            print(
                f"qlk serve: {incident.lifecycle}: {incident.kind} ({incident.error}); "
                "the next cycle tries again",
                file=self._ctx.err,
                flush=True,
            )


def serve_cluster(args: argparse.Namespace, ctx: Context) -> int:
    """`qlk serve --profile cluster` (module docstring)."""
    if getattr(args, "db", None) is not None:
        raise UsageError("--db goes with the local profiles; the cluster profile takes --dsn")
    if getattr(args, "until_idle", False) or getattr(args, "log_retention", None) is not None:
        raise UsageError("--until-idle and --log-retention go with the local profiles")
    target = cluster_target(args, required=True)
    assert target is not None
    printer = _Printer(ctx)
    try:
        app = ClusterApplication(
            target.dsn, target.schema, on_cycle=printer.cycle, report=printer.incident
        )
    except MigrationError as exc:
        raise UsageError(
            f"--dsn {target.where} --schema {target.schema}: not a schema of this qlk version "
            f"({exc})"
        ) from None
    except psycopg.Error as exc:
        raise _failed(target, exc) from None
    stop = threading.Event()
    interrupted: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        interrupted.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        app.start()
        print(
            f"qlk serve: cluster replica on {target.where} schema {target.schema}; "
            "Ctrl-C or SIGTERM stops it",
            file=ctx.err,
            flush=True,
        )
        while not stop.wait(_POLL_S):
            pass
    finally:
        stopped = app.stop()
        for sig, old in previous.items():
            signal.signal(sig, old)
    if not stopped.drained:
        print("qlk serve: a cycle did not finish within the stop timeout", file=ctx.err)
    try:
        with open_cluster(target) as store:
            by_status = counts(store)
        total = sum(by_status.values())
        summary = ", ".join(f"{s.value} {n}" for s, n in sorted(by_status.items()))
        tail = f": {summary}" if summary else ""
        print(f"{total} runs in {target.schema}{tail}", file=ctx.out)
    except InfrastructureError as exc:  # the server went away as we stopped: say so, go on
        print(f"qlk serve: {exc.message}", file=ctx.err)
    if signal.SIGINT in interrupted:
        return ExitCode.INTERRUPTED
    return ExitCode.OK
