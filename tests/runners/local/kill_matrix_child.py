"""The child process of `test_local_kill_matrix.py`: the local application exactly as `qlk serve`
runs it, SIGKILLed by itself at the K-th transaction boundary of one cycle phase.

    python -m tests.runners.local.kill_matrix_child DB PROFILE PHASE K

Before the application opens its store, this process (and only this one) instruments:

- the current phase, per thread (the two lifecycles run on their own threads, startup recovery
  and the first execution-control cycle on the main one): `startup_recovery` (the O-1 startup
  recovery), `completion`, `cancellation`, `lost_retry`, `cleanup` (the O-2 steps), `schedule`
  (the O-3 trigger-schedule phase), `dispatch` (one claimed-dispatcher call: its page and spec
  reads) and, nested inside it, `activation` (the dispatcher's L1 and L2 writes);
- the transaction boundaries, through the trace callback of the store's one connection (it runs
  when a statement starts, before it has any effect): every `BEGIN` and `COMMIT` run while the
  current phase is PHASE. The dispatch phase has no transaction of its own (its writes are
  `activation`), so there each statement, an autocommit read and thus its own transaction,
  is the boundary. Killing before a `COMMIT` leaves its transaction uncommitted; killing before
  a `BEGIN` (or a read) is just after the previous commit.

At the K-th boundary it prints where it is on stderr and sends itself SIGKILL. If the phase can
no longer reach K (startup recovery has returned, or the application is idle), it stops the O-4
way and exits 0 after a line starting `not reached` (the matrix counts that as no kill).
"""

from __future__ import annotations

import functools
import os
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, ParamSpec, TypeVar

from rich.console import Console

from conformance.cli.common import Context
from conformance.cli.serve import IDLE_POLL_S, _Printer
from kernel.specs import Profile
from runners.edge import connection
from runners.local import app as app_module
from runners.local import dispatcher, scheduler
from runners.local.app import LocalApplication
from runners.local.control import LocalExecutionControl
from runners.local.scheduler import LocalScheduler

P = ParamSpec("P")
R = TypeVar("R")

#: The phases this child can be told to die in.
PHASES: Final = (
    "startup_recovery",
    "completion",
    "cancellation",
    "lost_retry",
    "cleanup",
    "schedule",
    "dispatch",
    "activation",
    # The Workflow phases (issue 18; test_local_workflow_kill_matrix.py): phase 1's stops and
    # convergences, the frontier, Task admission, the Task half of dispatch (its prepare and
    # handle writes) and the Workflow Task startup recovery.
    "workflow_cancellation",
    "frontier",
    "task_admission",
    "task_activation",
    "task_recovery",
)
#: The phases whose boundaries are their autocommit reads (they open no transaction).
READ_PHASES: Final = frozenset({"dispatch"})
#: A child that neither dies nor goes idle within this long is stuck: exit 3, said on stderr.
STUCK_S: Final = 300.0

_local = threading.local()


def _stack() -> list[str]:
    stack: list[str] | None = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def say(line: str) -> None:
    """One line on stderr in one write (the lifecycle threads print too)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def current_phase() -> str | None:
    stack = _stack()
    return stack[-1] if stack else None


def in_phase(name: str, fn: Callable[P, R]) -> Callable[P, R]:
    """`fn`, running with `name` as this thread's current phase (nested phases stack)."""

    @functools.wraps(fn)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        stack = _stack()
        stack.append(name)
        try:
            return fn(*args, **kwargs)
        finally:
            stack.pop()

    return wrapped


class BoundaryKiller:
    """Counts PHASE's transaction boundaries; SIGKILLs this process before the K-th runs."""

    def __init__(self, phase: str, k: int) -> None:
        self.phase = phase
        self.k = k
        self.seen = 0
        self._lock = threading.Lock()

    def boundary(self, statement: str) -> str | None:
        """What `statement` is as a boundary of PHASE (`BEGIN`, `COMMIT`, `read <name>`), or
        None when it is none."""
        if current_phase() != self.phase:
            return None
        lines = [line.strip() for line in statement.strip().splitlines()]
        code = next((line for line in lines if line and not line.startswith("--")), "")
        word = code.split(None, 1)[0].rstrip(";").upper() if code else ""
        if word in ("BEGIN", "COMMIT"):
            return word
        if self.phase in READ_PHASES:
            comment = next((line[2:].strip() for line in lines if line.startswith("--")), code)
            return f"read {comment[:50]}"
        return None

    def __call__(self, statement: str) -> None:
        kind = self.boundary(statement)
        if kind is None:
            return
        with self._lock:
            self.seen += 1
            if self.seen != self.k:
                return
        say(
            f"kill matrix: SIGKILL at phase {self.phase} boundary {self.k} [{kind}] "
            f"on thread {threading.current_thread().name}"
        )
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # SIGKILL to oneself is delivered at once; never go on meanwhile


def instrument(killer: BoundaryKiller) -> None:
    """Wrap each phase's entry point and trace every connection the store opens."""
    # By the name each caller looks up: app.py, scheduler.py and dispatcher.py import these
    # functions by name; the cycle steps are methods.
    entry_points: tuple[tuple[object, str, str], ...] = (
        (app_module, "local_startup_recovery", "startup_recovery"),
        (LocalExecutionControl, "_completions", "completion"),
        (LocalExecutionControl, "_cancellation", "cancellation"),
        (LocalExecutionControl, "_lost_retry", "lost_retry"),
        (LocalExecutionControl, "_cleanup", "cleanup"),
        (LocalScheduler, "_trigger_schedule", "schedule"),
        (scheduler, "dispatch_once", "dispatch"),
        (dispatcher, "execute", "activation"),  # ActivateLocal (L1) and RecordLocalHandle (L2)
        (LocalScheduler, "_workflow_cancellation", "workflow_cancellation"),
        (LocalScheduler, "_workflow_frontier", "frontier"),
        (LocalScheduler, "_task_admission", "task_admission"),
        (LocalScheduler, "_task_once", "task_activation"),  # PrepareTask and RecordTaskHandle
        (app_module, "task_startup_recovery", "task_recovery"),
    )
    for owner, attribute, name in entry_points:
        setattr(owner, attribute, in_phase(name, getattr(owner, attribute)))
    original_connect = connection.connect

    def traced_connect(path: Path, synchronous: str, busy_timeout_ms: int) -> sqlite3.Connection:
        conn = original_connect(path, synchronous, busy_timeout_ms)
        conn.set_trace_callback(killer)
        return conn

    connection.connect = traced_connect


def main(db: str, profile: str, phase: str, k: int) -> int:
    assert phase in PHASES, f"unknown phase {phase!r}: one of {', '.join(PHASES)}"
    assert k >= 1, "K counts from 1"
    say(f"kill matrix child: phase {phase} K={k} profile {profile} pid {os.getpid()}")
    killer = BoundaryKiller(phase, k)
    instrument(killer)
    # The lines `qlk serve` prints (starts, completions, stops; incidents), all on stderr.
    console = Console(file=sys.stderr)
    printer = _Printer(Context(sys.stderr, sys.stderr, console, console))
    app = LocalApplication(
        Path(db), Profile(profile), on_cycle=printer.cycle, report=printer.incident
    )
    startup = app.start()
    say(
        f"started: resolved {len(startup.resolved)}, adopted {len(startup.adopted)}, "
        f"orphaned {startup.orphaned}"
    )
    deadline = time.monotonic() + STUCK_S
    recovery = phase in ("startup_recovery", "task_recovery")
    reason = "startup recovery returned" if recovery else ""
    while not reason:
        time.sleep(IDLE_POLL_S)
        if app.idle():
            reason = "the application is idle"
        elif time.monotonic() > deadline:
            say(f"stuck: not idle within {STUCK_S} s")
            app.stop()
            return 3
    app.stop()
    say(f"not reached: phase {phase} K={k}: {reason} after {killer.seen} boundaries")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
