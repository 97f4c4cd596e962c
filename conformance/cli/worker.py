"""`qlk worker`: a cluster Worker host in the foreground (issue 17 item 3; SPEC §3, E-2, E-3, E-6,
E-7, E-8).

    qlk worker --dsn DSN [--schema NAME] --journal DIR|sqlite:DIR --executor-type TYPE
               --retention DUR [--worker-id ID] [--capacity N]

It owns the journal in DIR (a dead predecessor's lock is reclaimed at once, E-2), resumes its
saved session or registers a new one (WS-1), recovers what its journal holds (E-3), then pulls
the offers the scheduler replicas granted to its session from the database, runs them as real
processes and reports their completions. One line per cycle that did something. SIGTERM or
Ctrl-C drains it (the registry grants the session nothing more, D-8; owned work finishes) and it
exits once drained; a second signal stops it at once (what is left in the journal is recovered
by the next start). Exit codes: E-7 (0, 2 bad flag, 3 database or journal refused, 130 Ctrl-C).

The host connects to PostgreSQL itself (E-8): a trusted component, as Python task-queue workers
conventionally are; fencing defends against stale Workers, not hostile ones.

`QL3_WORKER_KILL_POINT=before_complete` (tests only) makes the process SIGKILL itself the first
time it is about to report a completion: after the child finished, before the control plane
heard of it — the restart window issue 17 item 4 measures.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from conformance.cli.common import (
    DSN_VARIABLE,
    SCHEMA_DEFAULT,
    Commands,
    Context,
    ExitCode,
    InfrastructureError,
    UsageError,
    add_command,
)
from conformance.cli.tasks import duration_flag
from kernel.specs import HARD_LIMITS, BudgetError, check_in_range

if TYPE_CHECKING:
    from runners.cluster.worker_host import WorkerHost
    from runners.worker.ports import ControlPlaneClient

KILL_POINT_VARIABLE: Final = "QL3_WORKER_KILL_POINT"
_POLL_S: Final = 0.1


def register(commands: Commands) -> None:
    parser = add_command(
        commands,
        "worker",
        help="run a cluster Worker host in the foreground (SIGTERM or Ctrl-C drains it)",
        handler=run,
    )
    parser.add_argument(
        "--dsn", metavar="DSN", default=None, help=f"the cluster database (default ${DSN_VARIABLE})"
    )
    parser.add_argument(
        "--schema", metavar="NAME", default=None, help=f"the schema (default {SCHEMA_DEFAULT})"
    )
    parser.add_argument(
        "--journal",
        metavar="DIR|sqlite:DIR",
        required=True,
        help="the Worker's state directory: its journal (file adapter, or sqlite:), receipts "
        "and session",
    )
    parser.add_argument(
        "--executor-type",
        metavar="TYPE",
        action="append",
        required=True,
        help="an executor type this Worker runs (repeatable), e.g. local.posix",
    )
    parser.add_argument("--worker-id", metavar="ID", default=None, help="default: host + dir")
    parser.add_argument(
        "--capacity", metavar="N", type=int, default=None, help="offers held at once (default 8)"
    )
    parser.add_argument(
        "--retention",
        metavar="DUR",
        default=None,
        required=True,
        help="how long a finished journal record is kept (1m..30d; SPEC §3.14 sets no default: "
        "the journal holds 64 records)",
    )


def run(args: argparse.Namespace, ctx: Context) -> int:
    # Imported here: psycopg and the cluster runner load only for this command.
    from conformance.cli.cluster import cluster_target  # noqa: PLC0415
    from runners.cluster.worker_host import (  # noqa: PLC0415
        DEFAULT_CAPACITY,
        HostCycle,
        HostRefused,
        HostSettings,
        JournalLocation,
        WorkerHost,
    )

    if not args.dsn and not os.environ.get(DSN_VARIABLE):
        raise UsageError(f"qlk worker needs --dsn DSN (or ${DSN_VARIABLE})")
    target = cluster_target(args, required=True)
    assert target is not None
    try:
        location = JournalLocation.parse(args.journal)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    capacity = DEFAULT_CAPACITY if args.capacity is None else args.capacity
    if not 1 <= capacity <= 64:
        raise UsageError(f"--capacity {capacity}: give 1..64")
    retention_ms = _retention(args.retention)
    settings = HostSettings(
        dsn=target.dsn,
        schema=target.schema,
        journal=location,
        executor_types=tuple(dict.fromkeys(args.executor_type)),
        worker_id=args.worker_id,
        capacity=capacity,
        retention_ms=retention_ms,
    )
    lock = threading.Lock()

    def on_cycle(cycle: HostCycle) -> None:
        line = _cycle_line(cycle)
        if line is not None:
            with lock:
                print(f"cycle {cycle.ordinal}: {line}", file=ctx.out, flush=True)

    host = WorkerHost(settings, on_cycle=on_cycle, wrap_client=_kill_point())
    signals: list[int] = []
    wake = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        signals.append(signum)
        wake.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            session = host.start()
        except HostRefused as refused:
            raise InfrastructureError(str(refused)) from None
        except Exception as exc:  # the database: one line, never a traceback (E-7)
            raise InfrastructureError(
                f"--dsn {target.where}: the Worker host could not start ({type(exc).__name__})"
            ) from None
        print(
            f"qlk worker: {session.worker_id} session {session.session_id} generation "
            f"{session.generation} on {target.where} schema {target.schema}; "
            "SIGTERM or Ctrl-C drains it",
            file=ctx.err,
            flush=True,
        )
        _until_stopped(host, signals, wake, ctx)
    finally:
        host.stop()
        for sig, old in previous.items():
            signal.signal(sig, old)
    print(f"qlk worker: {host.worker_id} stopped", file=ctx.err, flush=True)
    return ExitCode.INTERRUPTED if signal.SIGINT in signals else ExitCode.OK


def _until_stopped(
    host: WorkerHost, signals: list[int], wake: threading.Event, ctx: Context
) -> None:
    """The first signal drains, a drained host stops, a second signal stops at once."""
    draining = False
    while True:
        wake.wait(_POLL_S)
        wake.clear()
        if len(signals) >= 2:
            print("qlk worker: stopping now (second signal)", file=ctx.err, flush=True)
            return
        if signals and not draining:
            host.drain()
            draining = True
            print("qlk worker: draining (no new work)", file=ctx.err, flush=True)
        if draining and host.drained():
            return


def _retention(text: str | None) -> int | None:
    value = duration_flag("--retention", text)
    if value is None:
        return None
    try:
        return check_in_range(value, HARD_LIMITS.terminal_retention_ms, field="--retention")
    except BudgetError:
        raise UsageError(f"--retention {text}: give 1m..30d") from None


def _cycle_line(cycle: object) -> str | None:
    delivered = len(getattr(cycle, "delivered", ()))
    completions = getattr(cycle, "completions", None)
    settled = 0 if completions is None else len(completions.results)
    parts = [f"{name} {n}" for name, n in (("delivered", delivered), ("settled", settled)) if n]
    return ", ".join(parts) if parts else None


def _kill_point() -> Callable[[ControlPlaneClient], ControlPlaneClient] | None:
    """The test-only kill point (module docstring), or None."""
    if os.environ.get(KILL_POINT_VARIABLE) != "before_complete":
        return None

    def wrap(inner: ControlPlaneClient) -> ControlPlaneClient:
        return _KillBeforeComplete(inner)  # type: ignore[return-value]

    return wrap


class _KillBeforeComplete:
    """Delegates every call; SIGKILLs this process at the first `complete` (no cleanup)."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def complete(self, submission: object) -> object:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable: SIGKILL is not deliverable late")  # pragma: no cover


__all__ = ["KILL_POINT_VARIABLE", "SCHEMA_DEFAULT", "register", "run"]
