"""A Hypothesis model of the local application's cycles (issue 15 item 5; SPEC §6.2 O-1..O-4,
§6.5 CAD-01, CAD-02, CAD-03, CAD-05, CAD-08, CAD-12, CAD-14).

The system under model is the real `LocalApplication` (`runners/local/app.py`) on a real SQLite
file in a temporary directory made per machine run, with real child processes (`true` and
`false` only, so they end in milliseconds). Around it:

- a fake clock (the application's `clock` parameter): a counter that only the `advance_clock`
  rule moves, so every command, cron fire and cycle of one step sees the same time;
- stepped schedulers (`runners.lifecycle.SteppedScheduler`, one per lifecycle): nothing cycles
  unless a rule fires exactly one cycle of one lifecycle;
- a counting wrapper around the store's lost-retry source (`lost_retry_candidates`, the one read
  a lost-retry page makes), recording for every call which rule was running and which runtime
  module called it (`runners.local.control`, `.scheduler` or `.startup`, found on the stack).

Setup draws 1-2 tasks and submits 1-4 Runs before the first `start()`. Rules: add a task (`true`
or `false`, optionally the retry policy `PolicyDefinition(3, True, IDEMPOTENT, 0, 0)`,
optionally the cron `* * * * *`); submit 1-3 Runs of a task (`runners.local.schedule.submit`);
request cancellation of a Run, optionally of a `running` one (`RequestCancel` through
`runners.engine.execute`); make 1-3 queued Runs `lost` the way a restart does (L1, then trusted
not-running evidence with no receipt, as `tests/runners/local/test_local_app.py::_lost_runs`);
advance the clock; fire one scheduler cycle; fire one execution-control cycle (usually after a
bounded wait until every spawned launch wrapper has exited, asked with `waitid(WNOWAIT)`: it
reaps nothing, where polling `launcher.finished()` would reap and change what the cycle sees);
run a draining execution-control cycle (`CycleContext(n, lambda: True)` on a cycle object of
the application's class); stop and restart on the same file (a new `LocalApplication`, whose
`start()` runs startup recovery). Bounds keep one example well under a few seconds: at most
`MAX_TASKS` tasks, `MAX_SUBMITTED` submitted Runs (cron fires add more), scheduler cycles only
while fewer than `MAX_SPAWNS` children were spawned or no Run is queued (a spawn costs a Python
launch wrapper, ~0.3 s on a loaded 2-core machine), at most `MAX_RESTARTS` restarts.

Invariants, after every step; each `ModelViolation` message starts with its SPEC id:

- O-1/CAD-01: `start()` performed exactly the steps of O-1 in order (the literal SPEC order and
  the kernel's `LOCAL_START`); the first cycle report after each start is the execution-control
  cycle 1, reported when only startup recovery had completed (REC-09); every scheduler cycle
  comes after all of O-1;
- CAD-02: each execution-control report's phases are `local_control_phases(ordinal, draining,
  every_nth)` of the kernel, an ordered subsequence of O-2; ordinals are consecutive per
  lifecycle and start; a report carries a lost-retry result exactly when it ran that phase;
- CAD-03: a cycle's lost-retry page scanned at most the profile's
  `execution_control_lost_retry_per_cycle`, asked the source for exactly that limit, once, and
  its counts balance (RETRY-14);
- CAD-05: a draining cycle has no lost-retry phase and made no lost-retry source call;
- CAD-12: a scheduler cycle runs the phases of O-3 in order, calls the dispatcher at most
  `scheduler_dispatch_activations` times (so starts at most that many Runs) and its trigger
  schedule read and fired at most the `scheduler_trigger_schedule` budget;
- CAD-14: only the execution-control cycle calls the lost-retry source (never a scheduler cycle,
  never startup recovery);
- O-4/CAD-08: `stop()` performed the O-4 steps in order after O-1, drained, closed the store,
  and a second `stop()` returns the same result object;
- RETRY-18 (and D-1): no Attempt id appears twice in the launcher's `spawns.log`, and each line
  names an existing Attempt of its Run;
- RUN-01: every Run aggregate read from the file satisfies I-1..I-4, I-6..I-9 (the kernel's
  `check_invariants`); RUN-08: I-5 between consecutive steps (`i5_finality`: a terminal Run,
  a final Attempt never changes; nothing is removed), so every terminal Run stays terminal;
  RETRY-03/RETRY-05: a Run has at most `max_attempts` Attempts (1 without a policy), and a Run
  failed by lost retry carries `RUN_LOST_RETRY_DISABLED` (no policy) or
  `RUN_LOST_RETRY_EXHAUSTED`;
- O-2/O-3: no cycle raised (the lifecycle would absorb it, L-8).

Teardown (`settle`, skipped when a step already failed): wait (bounded) until every spawned
wrapper has exited, move the clock past the receipt publish grace, run `SETTLE_CYCLES`
execution-control cycles; then every Run whose spawned latest Attempt ended is terminal (CAD-02,
L3), unless the latest startup recovery left that Attempt unresolved (e.g. `unknown` after two
inconsistent inspections: only the next startup may decide), and the launcher watches nothing
(B-52, LR-4: an Attempt whose process ended is completed, or offered for the grace and then no
longer watched). Then, if needed, one restart and more cycles: every Run whose latest Attempt
was spawned is terminal. `REACHED` counts what the runs of
this process reached (spawns, completions, lost retries, cron fires, ...).

Step log: every machine run keeps one JSON object per step in memory (`machine.lines`): a header
`{"name", "kind": "local_app_model", "profile", "serial", "kernel_version", "description"}`, then
`{"step", "rule", "args", "clock_ms", "observed"}` per step (`args` are exactly the rule's
arguments; `observed` holds Run counts by status, the spawn count and the step's outcomes). As in
`model_tests/worker_machine.py`, with `TRACE_DIR` (class knob) or `QL3_MODEL_TRACE_DIR` set,
teardown writes it to `<dir>/CAD-01-local-app-<profile>-<serial>.jsonl`. It is a model step log,
not a §7 conformance trace (the trace schema has no local-application component). `replay(lines)`
runs a recording again as data on a fresh machine (the same rules with the same arguments, the
invariants after each); children make timing part of a run, so a replay may differ in what it
observed, never in the properties.

Running it: `LocalAppMachine.TestCase` with `local_app_settings(LocalAppMachine)` (budgets per
Hypothesis profile and deployment profile in `LOCAL_APP_BUDGETS`); knobs through
`LocalAppMachine.configured(PROFILE=Profile.EDGE, CONTROL=..., SCHEDULER=..., TRACE_DIR=...)`,
where `CONTROL` and `SCHEDULER` replace the cycle classes the application
builds (the planted-bug tests use them); `MAX_*` bound a run.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, ClassVar, Final
from unittest import mock

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

import kernel
from kernel import (
    ActivateLocal,
    Actor,
    CancelReason,
    NotRunningEvidence,
    Page,
    PolicyDefinition,
    RecoverLocalStartup,
    RequestCancel,
    RunAggregate,
    Safety,
)
from kernel.specs import (
    LOCAL_CONTROL_CYCLE,
    LOCAL_SCHEDULER_CYCLE,
    LOCAL_START,
    LOCAL_STOP,
    LocalControlPhase,
    Profile,
    local_control_phases,
)
from kernel.specs.codes import Code
from kernel.specs.invariants import check_invariants, i5_finality
from kernel.specs.states import AttemptStatus, RunStatus
from kernel.task import LOCAL_EXECUTOR_TYPE, TaskDefinition, TaskRefused, define_task
from model_tests.harness import STATS, ModelViolation, require
from model_tests.machines import Budget, budget_settings
from runners.engine import execute
from runners.lifecycle import (
    CycleContext,
    CycleReport,
    CycleResult,
    CycleSucceeded,
    LifecycleIncident,
    SteppedScheduler,
)
from runners.local import app as app_module
from runners.local.app import ApplicationStopped, LocalApplication
from runners.local.control import ControlReport, LocalExecutionControl
from runners.local.reads import run_status_counts
from runners.local.schedule import submit
from runners.local.scheduler import LocalScheduler, SchedulerReport
from runners.worker.posix.executor import DurableHandle, HandleError

__all__ = [
    "LOCAL_APP_BUDGETS",
    "NAME",
    "REACHED",
    "RULES",
    "T0",
    "TRACE_DIR_ENV",
    "FakeClock",
    "LocalAppMachine",
    "ModelViolation",
    "Stepped",
    "local_app_settings",
    "read_lines",
    "replay",
]

NAME: Final = "local_app"
TRACE_DIR_ENV: Final = "QL3_MODEL_TRACE_DIR"
T0: Final = 1_700_000_000_000
CRON: Final = "* * * * *"
RETRY_POLICY: Final = PolicyDefinition(3, True, Safety.IDEMPOTENT, 0, 0)

#: O-1, O-4, O-2 and O-3 as SPEC §6.2 states them, written out here (not read from the kernel's
#: tables), so that a change to the kernel's sequences changes what this model sees.
O1: Final = ("startup_recovery", "first_control_cycle", "start_control", "start_scheduler")
O4: Final = ("drain_scheduler", "drain_control", "close_storage")
O2: Final = ("completions", "cancellation", "lost_retry", "cleanup")
O3: Final = (
    "cancellation_convergence",
    "trigger_schedule",
    "workflow_frontier",
    "task_admission",
    "dispatch",
)

CONTROL_LIFECYCLE: Final = "execution_control"
SCHEDULER_LIFECYCLE: Final = "scheduler"
CONTROL_MODULE: Final = "runners.local.control"
CALLER_MODULES: Final = frozenset(
    {CONTROL_MODULE, "runners.local.scheduler", "runners.local.startup"}
)

#: Bounded waits for children that end in milliseconds (a loaded machine): the control rule's
#: wait before its cycle, and teardown's wait for every spawned child.
CHILD_WAIT_S: Final = 10.0
SETTLE_WAIT_S: Final = 30.0
POLL_S: Final = 0.005
SETTLE_CYCLES: Final = 2

CLOCK_STEPS: Final = (1, 250, 1_000, 5_000, 60_000, 60_000)
#: Draining cycle ordinals: plain ones and slow ones of both profiles (every 12th / 60th).
DRAIN_ORDINALS: Final = (1, 2, 3, 12, 60)

#: The rule names a recording may hold (what `replay` may call).
RULES: Final = frozenset(
    {
        "setup",
        "add_task",
        "submit_runs",
        "cancel",
        "make_lost",
        "advance_clock",
        "scheduler_cycle",
        "control_cycle",
        "draining_cycle",
        "restart",
    }
)

#: Per Hypothesis profile and deployment profile. A spawn (a Python launch wrapper) costs ~0.3 s
#: on a loaded 2-core machine, and standalone starts up to 4 per scheduler cycle.
LOCAL_APP_BUDGETS: Final[Mapping[str, Mapping[Profile, Budget]]] = {
    # ci: deterministic (derandomized): ~15 s per profile on this 2-core machine.
    "ci": {Profile.EDGE: Budget(40, 25), Profile.STANDALONE: Budget(30, 25)},
    "dev": {Profile.EDGE: Budget(40, 25), Profile.STANDALONE: Budget(30, 25)},
    # deep: randomized, more and longer runs.
    "deep": {Profile.EDGE: Budget(300, 40), Profile.STANDALONE: Budget(200, 40)},
}

_serials = itertools.count(1)


#: What the machine runs of this process reached (the budget test asserts each is > 0):
#: spawns, completions, lost-retry candidates scanned / full pages (`has_more`) / retries
#: scheduled and requeued / failures, convergences, stops, receipts deleted, cron admissions,
#: draining cycles, restarts, Attempts adopted by startup recovery.
REACHED: Counter[str] = Counter()


def local_app_settings(machine: type[LocalAppMachine], profile: str | None = None) -> settings:
    """The active Hypothesis profile's settings with this machine's budget."""
    name = profile if profile is not None else settings.get_current_profile_name()
    budgets = LOCAL_APP_BUDGETS.get(name, LOCAL_APP_BUDGETS["ci"])
    return budget_settings(budgets[machine.PROFILE], profile)


class FakeClock:
    """The application's clock: moves only when the model says so."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


class Stepped:
    """One stepped scheduler per lifecycle, by name (the application asks for each)."""

    def __init__(self) -> None:
        self.by_name: dict[str, SteppedScheduler] = {}

    def __call__(self, name: str) -> SteppedScheduler:
        self.by_name[name] = SteppedScheduler()
        return self.by_name[name]

    def fire(self, name: str) -> None:
        """Exactly one cycle of lifecycle `name`: its armed timer falls due."""
        clock = self.by_name[name]
        pending = clock.pending_ms
        require(pending is not None, "O-1", f"{name}: no timer armed after start")
        assert pending is not None
        fired = clock.advance(pending - clock.now_ms)
        require(fired == 1, "O-1", f"{name}: {fired} cycles fired for one due timer")


@dataclass(frozen=True, slots=True)
class TaskModel:
    name: str
    fails: bool
    retry: bool
    cron: bool


@dataclass(frozen=True, slots=True)
class LostCall:
    """One call of the lost-retry source: the rule running, the runtime module that called."""

    label: str
    incarnation: int
    caller: str | None
    limit: int


@dataclass(frozen=True, slots=True)
class Seen:
    """One cycle report as `on_cycle` received it, with the O-1 steps done at that moment and
    the lost-retry calls made since the cycle was fired (`calls` indexes `lost_calls`)."""

    incarnation: int
    lifecycle: str
    result: CycleResult[ControlReport | SchedulerReport]
    steps_at: tuple[str, ...]
    calls: tuple[int, int]


@dataclass(frozen=True, slots=True)
class Drain:
    incarnation: int
    ordinal: int
    report: ControlReport
    calls: tuple[LostCall, ...]


@dataclass(frozen=True, slots=True)
class Started:
    incarnation: int
    steps: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Stopped:
    incarnation: int
    steps_before: tuple[str, ...]
    steps_after: tuple[str, ...]
    first: ApplicationStopped
    second: ApplicationStopped
    closed: bool


def _caller() -> str | None:
    """The innermost local runtime module (control, scheduler, startup) on the calling stack."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__")
        if module in CALLER_MODULES:
            return str(module)
        frame = frame.f_back
    return None


def _exited(handle_text: str) -> bool:
    """Whether the wrapper a durable handle names has exited, without reaping it: a child of
    this process is asked with `WNOWAIT`; one that is no child (any more) was reaped."""
    try:
        pid = DurableHandle.parse(handle_text).pid
    except HandleError:
        return True
    try:
        found = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return found is not None


def _steps(app: LocalApplication) -> tuple[str, ...]:
    return tuple(step.value for step in app.steps)


class LocalAppMachine(RuleBasedStateMachine):
    """See the module docstring. Class-level knobs (`configured(...)`): `PROFILE`, `CONTROL`,
    `SCHEDULER`, `TRACE_DIR`, `MAX_TASKS`, `MAX_SUBMITTED`, `MAX_SPAWNS`,
    `MAX_RESTARTS`."""

    PROFILE: ClassVar[Profile] = Profile.STANDALONE
    CONTROL: ClassVar[type[LocalExecutionControl]] = LocalExecutionControl
    SCHEDULER: ClassVar[type[LocalScheduler]] = LocalScheduler
    TRACE_DIR: ClassVar[str | None] = None
    MAX_TASKS: ClassVar[int] = 6
    MAX_SUBMITTED: ClassVar[int] = 8
    MAX_SPAWNS: ClassVar[int] = 5
    MAX_RESTARTS: ClassVar[int] = 2

    def __init__(self) -> None:
        super().__init__()
        self.serial = next(_serials)
        self.ready = False
        self.healthy = True  # False while a step runs, and after one that raised
        self.clock = FakeClock()
        self.incarnation = 0
        self.restarts = 0
        self.tasks: list[TaskModel] = []
        self.submitted = 0
        self.label = "idle"
        self.lost_calls: list[LostCall] = []
        self._calls_mark = 0
        self.seen: list[Seen] = []
        self.drains: list[Drain] = []
        self.starts: list[Started] = []
        self.stops: list[Stopped] = []
        self.incidents: list[LifecycleIncident] = []
        self.aggregates: dict[str, RunAggregate] = {}
        self.lines: list[dict[str, object]] = []
        self._step = 0
        # what the invariants have checked so far
        self._seen_done = 0
        self._calls_done = 0
        self._drains_done = 0
        self._starts_done = 0
        self._stops_done = 0
        self._first_report: set[int] = set()
        self._last_ordinal: dict[tuple[int, str], int] = {}
        self._tmp: Path | None = None
        self.db = Path()
        self.counts = STATS.of(NAME)
        self.counts.instances += 1

    @classmethod
    def configured(cls, **knobs: object) -> type[LocalAppMachine]:
        unknown = sorted(k for k in knobs if not k.isupper() or not hasattr(cls, k))
        if unknown:
            raise TypeError(f"{cls.__name__} has no knob(s) {unknown}")
        return type(f"{cls.__name__}Configured", (cls,), dict(knobs))

    @property
    def budget_activations(self) -> int:
        activations = self.app.budget.scheduler_dispatch_activations
        assert activations is not None
        return activations

    # -- the application ---------------------------------------------------------------------
    @initialize(
        tasks=st.lists(
            st.tuples(st.booleans(), st.booleans(), st.booleans()),
            min_size=1,
            max_size=2,
        ),
        runs=st.integers(1, 4),
    )
    def setup(self, tasks: Sequence[Sequence[bool]], runs: int) -> None:
        """The file, its first tasks and Runs (before the first start), then O-1."""
        self.healthy = False
        self._tmp = Path(tempfile.mkdtemp(prefix="ql3-local-app-model-"))
        self.db = self._tmp / "ql3.db"
        self.ready = True
        self._build()
        for fails, retry, cron in tasks:
            self._add_task(fails, retry, cron)
        made = [self._submit(self.tasks[i % len(self.tasks)]) for i in range(runs)]
        self._start()
        args = {"tasks": [list(t) for t in tasks], "runs": runs}
        self._finish("setup", args, {"runs": made, "startup": self._startup_summary()})

    def _boot(self) -> None:
        """A new `LocalApplication` on the file, then O-1."""
        self._build()
        self._start()

    def _build(self) -> None:
        """A new `LocalApplication` on the file, with new stepped schedulers."""
        self.incarnation += 1
        stepped = Stepped()
        with contextlib.ExitStack() as stack:
            # The planted-bug knobs: the cycle classes the application builds.
            if self.CONTROL is not LocalExecutionControl:
                stack.enter_context(
                    mock.patch.object(app_module, "LocalExecutionControl", self.CONTROL)
                )
            if self.SCHEDULER is not LocalScheduler:
                stack.enter_context(mock.patch.object(app_module, "LocalScheduler", self.SCHEDULER))
            app = LocalApplication(
                self.db,
                self.PROFILE,
                clock=self.clock,
                schedulers=stepped,
                on_cycle=self._on_cycle,
                report=self.incidents.append,
            )
        self._count_lost_retry(app)
        self.app = app
        self.stepped = stepped

    def _start(self) -> None:
        app = self.app
        self.label = "start"
        self._calls_mark = len(self.lost_calls)
        try:
            app.start()
        finally:
            self.label = "idle"
        self.starts.append(Started(self.incarnation, _steps(app)))

    def _count_lost_retry(self, app: LocalApplication) -> None:
        original = app.store.lost_retry_candidates
        incarnation = self.incarnation

        def counting(observed_at_ms: int, limit: int) -> Page[tuple[int, int, int, str]]:
            self.lost_calls.append(LostCall(self.label, incarnation, _caller(), limit))
            return original(observed_at_ms, limit)

        app.store.lost_retry_candidates = counting  # type: ignore[method-assign]

    def _on_cycle(self, report: CycleReport[ControlReport | SchedulerReport]) -> None:
        now = len(self.lost_calls)
        seen = Seen(
            self.incarnation,
            report.lifecycle,
            report.result,
            _steps(self.app),
            (self._calls_mark, now),
        )
        self.seen.append(seen)
        self._calls_mark = now
        value = getattr(report.result, "value", None)
        if isinstance(value, ControlReport):
            _reached(value)
        elif isinstance(value, SchedulerReport):
            REACHED["spawns"] += sum(1 for d in value.dispatches if d.launch is not None)
            if value.schedule is not None:
                REACHED["cron_admitted"] += len(value.schedule.admitted)

    def _fire(self, lifecycle: str, label: str) -> None:
        self.label = label
        self._calls_mark = len(self.lost_calls)
        try:
            self.stepped.fire(lifecycle)
        finally:
            self.label = "idle"

    def _stop(self) -> None:
        app = self.app
        before = _steps(app)
        self.label = "stop"
        try:
            first = app.stop()
            second = app.stop()
        finally:
            self.label = "idle"
        closed = app.store.authority.closed
        self.stops.append(Stopped(self.incarnation, before, _steps(app), first, second, closed))

    def _running_children(self) -> list[str]:
        """Spawned Attempts whose launch wrapper has not exited yet (a receipt alone is not
        enough: the wrapper publishes it, then exits). Asked of the kernel with `WNOWAIT`,
        which reaps nothing: `launcher.finished()` reaps, so polling it would change what the
        next completions step sees."""
        by_attempt = {a.attempt_id: a for agg in self._load_all().values() for a in agg.attempts}
        launcher = self.app.launcher
        running = []
        for _run, attempt_id in self._spawned():
            attempt = by_attempt.get(attempt_id)
            text = None if attempt is None else attempt.executor_handle
            if text is None:
                text = launcher.journaled_identity(attempt_id)
            if text is not None and not _exited(text):
                running.append(attempt_id)
        return running

    def _wait_children(self, seconds: float) -> bool:
        """Wait (bounded) until every spawned child has ended; whether they all did."""
        deadline = time.monotonic() + seconds
        while self._running_children():
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)
        return True

    def _spawned(self) -> list[tuple[str, str]]:
        return self.app.launcher.spawns.entries()

    def _load_all(self) -> dict[str, RunAggregate]:
        store = self.app.store
        run_ids = [str(row["run_id"]) for row in store.project()["runs"]]
        found: dict[str, RunAggregate] = {}
        with store.transaction() as tx:
            for run_id in run_ids:
                agg = tx.load_run(run_id)
                if agg is not None:
                    found[run_id] = agg
        return found

    def _pick(self, pick: int, aggregates: Sequence[RunAggregate]) -> RunAggregate | None:
        return aggregates[pick % len(aggregates)] if aggregates else None

    # -- rules -------------------------------------------------------------------------------
    @precondition(lambda self: len(self.tasks) < self.MAX_TASKS)
    @rule(fails=st.booleans(), retry=st.booleans(), cron=st.sampled_from((False, False, True)))
    def add_task(self, fails: bool, retry: bool, cron: bool) -> None:
        self.healthy = False
        name = self._add_task(fails, retry, cron)
        self._finish("add_task", {"fails": fails, "retry": retry, "cron": cron}, {"task": name})

    def _add_task(self, fails: bool, retry: bool, cron: bool) -> str:
        name = f"t{len(self.tasks)}"
        definition = define_task(
            name,
            ["false" if fails else "true"],
            cron=CRON if cron else None,
            retry_policy=RETRY_POLICY if retry else None,
        )
        assert isinstance(definition, TaskDefinition), definition
        written = self.app.tasks.add(definition, self.clock())
        assert not isinstance(written, TaskRefused), written
        self.tasks.append(TaskModel(name, fails, retry, cron))
        return name

    @precondition(lambda self: bool(self.tasks) and self.submitted < self.MAX_SUBMITTED)
    @rule(task=st.integers(0, 7), count=st.integers(1, 3))
    def submit_runs(self, task: int, count: int) -> None:
        self.healthy = False
        model = self.tasks[task % len(self.tasks)]
        n = min(count, self.MAX_SUBMITTED - self.submitted)
        made = [self._submit(model) for _ in range(n)]
        self._finish("submit_runs", {"task": task, "count": count}, {"runs": made})

    def _submit(self, model: TaskModel) -> str:
        self.submitted += 1
        run_id = f"run-{self.submitted:03d}"
        outcome = submit(
            self.app.store,
            self.app.tasks,
            model.name,
            now_ms=self.clock(),
            run_id=run_id,
            attempt_id=f"att-{self.submitted:03d}-1",
        )
        assert not isinstance(outcome, TaskRefused), outcome
        assert outcome.code is Code.ADMITTED, outcome
        return run_id

    def _has_runs(self) -> bool:
        return self.submitted > 0 or any(t.cron for t in self.tasks)

    @precondition(_has_runs)
    @rule(pick=st.integers(0, 63), running=st.booleans())
    def cancel(self, pick: int, running: bool) -> None:
        """`RequestCancel` (user) of a Run; with `running`, of a `running` one if there is one
        (its wrapper may still be alive, so the next cycle stops it: L5)."""
        self.healthy = False
        runs = sorted(self._load_all().values(), key=_run_key)
        live = [agg for agg in runs if agg.run.status is RunStatus.RUNNING]
        target = self._pick(pick, live if running and live else runs)
        observed: dict[str, object] = {"run": None}
        if target is not None:
            run_id = target.run.run_id
            command = RequestCancel(run_id, CancelReason.USER, Actor.USER)
            outcome = execute(self.app.store, command, self.clock())
            observed = {"run": run_id, "outcome": [outcome.kind.value, outcome.code.value]}
        self._finish("cancel", {"pick": pick, "running": running}, observed)

    @precondition(_has_runs)
    @rule(pick=st.integers(0, 63), count=st.integers(1, 3))
    def make_lost(self, pick: int, count: int) -> None:
        """L1 then trusted not-running evidence with no receipt (§2.1): `lost`, never spawned."""
        self.healthy = False
        queued = [
            agg
            for agg in sorted(self._load_all().values(), key=_run_key)
            if agg.run.status is RunStatus.QUEUED and not agg.run.has_cancel_intent
        ]
        chosen = (
            (queued[pick % len(queued) :] + queued[: pick % len(queued)])[:count] if queued else []
        )
        outcomes = []
        for agg in chosen:
            latest = agg.latest_attempt
            assert latest is not None
            run_id, attempt_id = agg.run.run_id, latest.attempt_id
            now = self.clock()
            activate = ActivateLocal(run_id, attempt_id, LOCAL_EXECUTOR_TYPE, 1, "0" * 64)
            activated = execute(self.app.store, activate, now)
            recovered = None
            if activated.kind.value == "applied":
                recover = RecoverLocalStartup(run_id, attempt_id, NotRunningEvidence())
                recovered = execute(self.app.store, recover, now).code.value
            outcomes.append([run_id, activated.code.value, recovered])
        self._finish("make_lost", {"pick": pick, "count": count}, {"lost": outcomes})

    @rule(ms=st.sampled_from(CLOCK_STEPS))
    def advance_clock(self, ms: int) -> None:
        self.healthy = False
        self.clock.advance(ms)
        self._finish("advance_clock", {"ms": ms}, {})

    def _may_dispatch(self) -> bool:
        """Scheduler cycles while fewer than `MAX_SPAWNS` children were spawned, and after that
        only while no Run is queued (so they still fire cron schedules: the cycle that admits a
        fire may start it, so a run may end with up to `activations` spawns more)."""
        if len(self._spawned()) < self.MAX_SPAWNS:
            return True
        return run_status_counts(self.app.store).get(RunStatus.QUEUED, 0) == 0

    @precondition(_may_dispatch)
    @rule()
    def scheduler_cycle(self) -> None:
        self.healthy = False
        self._fire(SCHEDULER_LIFECYCLE, "scheduler")
        self._finish("scheduler_cycle", {}, self._last_report())

    @rule(wait=st.sampled_from((True, True, True, False)))
    def control_cycle(self, wait: bool) -> None:
        self.healthy = False
        waited = self._wait_children(CHILD_WAIT_S) if wait else None
        self._fire(CONTROL_LIFECYCLE, "control")
        self._finish(
            "control_cycle", {"wait": wait}, {"children_done": waited, **self._last_report()}
        )

    @rule(ordinal=st.sampled_from(DRAIN_ORDINALS))
    def draining_cycle(self, ordinal: int) -> None:
        """A cycle while a stop drains, called directly on a cycle object of the application's
        class (as `tests/runners/local/test_local_app.py` does)."""
        self.healthy = False
        app = self.app
        cycle = self.CONTROL(app.store, app.launcher, app.budget, self.clock)
        before = len(self.lost_calls)
        self.label = "drain"
        try:
            report = cycle(CycleContext(ordinal, lambda: True))
        finally:
            self.label = "idle"
        calls = tuple(self.lost_calls[before:])
        self.drains.append(Drain(self.incarnation, ordinal, report, calls))
        REACHED["draining_cycles"] += 1
        _reached(report)
        self._finish("draining_cycle", {"ordinal": ordinal}, _control_summary(report))

    @precondition(lambda self: self.restarts < self.MAX_RESTARTS)
    @rule()
    def restart(self) -> None:
        """O-4 on the running application, then a new one on the same file (O-1)."""
        self.healthy = False
        self.restarts += 1
        self._stop()
        self._boot()
        REACHED["restarts"] += 1
        if self.app.startup is not None:
            REACHED["adopted"] += len(self.app.startup.adopted)
        self._finish("restart", {}, {"startup": self._startup_summary()})

    # -- the step log ------------------------------------------------------------------------
    def _finish(self, rule_name: str, args: dict[str, object], observed: dict[str, object]) -> None:
        counts = run_status_counts(self.app.store)
        observed = {
            **observed,
            "runs": {status.value: n for status, n in sorted(counts.items())},
            "spawns": len(self._spawned()),
            "incarnation": self.incarnation,
        }
        self.lines.append(
            {
                "step": self._step,
                "rule": rule_name,
                "args": args,
                "clock_ms": self.clock(),
                "observed": observed,
            }
        )
        self._step += 1
        self.counts.steps += 1
        self.healthy = True

    def _startup_summary(self) -> dict[str, object]:
        startup = self.app.startup
        if startup is None:
            return {}
        return {
            "resolved": [list(r) for r in startup.resolved],
            "adopted": list(startup.adopted),
        }

    def _last_report(self) -> dict[str, object]:
        if not self.seen:
            return {}
        result = self.seen[-1].result
        if not isinstance(result, CycleSucceeded):
            return {"failed": getattr(result, "error", "?")}
        value = result.value
        if isinstance(value, ControlReport):
            return _control_summary(value)
        return {
            "ordinal": value.ordinal,
            "started": [d.run_id for d in value.dispatches if d.run_id is not None],
            "launch": [d.launch for d in value.dispatches if d.launch is not None],
            "due": None if value.schedule is None else value.schedule.due,
            "fired": None if value.schedule is None else len(value.schedule.fires),
        }

    def header(self) -> dict[str, object]:
        return {
            "name": f"CAD-01-local-app-{self.PROFILE.value}-{self.serial:05d}",
            "kind": "local_app_model",
            "profile": self.PROFILE.value,
            "serial": self.serial,
            "kernel_version": kernel.__version__,
            "description": (
                f"{type(self).__name__} run (model_tests.local_app_machine): LocalApplication "
                f"cycles on a {self.PROFILE.value} SQLite file with stepped schedulers"
            ),
        }

    def trace_lines(self) -> list[str]:
        return [
            json.dumps(line, sort_keys=True, separators=(",", ":"))
            for line in (self.header(), *self.lines)
        ]

    def _write_trace(self) -> None:
        directory = self.TRACE_DIR or os.environ.get(TRACE_DIR_ENV)
        if not directory or not self.lines:
            return
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        path = target / f"{self.header()['name']}.jsonl"
        path.write_text("\n".join(self.trace_lines()) + "\n", encoding="utf-8")

    # -- invariants --------------------------------------------------------------------------
    @invariant()
    def model_invariants(self) -> None:
        if not self.ready:
            return
        self.healthy = False
        self.check_all()
        self.healthy = True

    def check_all(self) -> None:
        checks: tuple[Callable[[], None], ...] = (
            self.check_o2_o3_no_cycle_failed,
            self.check_o1_cad01_start_order,
            self.check_cad05_drain_makes_no_lost_retry_call,
            self.check_cad14_only_execution_control_calls_lost_retry,
            self.check_cad02_control_phases,
            self.check_cad03_lost_retry_page,
            self.check_cad12_scheduler_budget,
            self.check_o4_cad08_stop_order,
            self.check_run01_run08_retry05_storage,
            self.check_retry18_no_attempt_spawned_twice,
        )
        for check in checks:
            check()
            self.counts.invariant_checks += 1
        self._seen_done = len(self.seen)
        self._calls_done = len(self.lost_calls)
        self._drains_done = len(self.drains)
        self._starts_done = len(self.starts)
        self._stops_done = len(self.stops)

    def _new_seen(self) -> list[Seen]:
        return self.seen[self._seen_done :]

    def _control_reports(self) -> Iterator[tuple[Seen, ControlReport]]:
        for seen in self._new_seen():
            if isinstance(seen.result, CycleSucceeded) and isinstance(
                seen.result.value, ControlReport
            ):
                yield seen, seen.result.value

    def check_o2_o3_no_cycle_failed(self) -> None:
        """O-2/O-3: no cycle raised (the lifecycle absorbs it and reports it, L-8)."""
        for seen in self._new_seen():
            spec = "O-2" if seen.lifecycle == CONTROL_LIFECYCLE else "O-3"
            require(
                isinstance(seen.result, CycleSucceeded),
                spec,
                f"{seen.lifecycle} cycle {seen.result.ordinal} raised "
                f"{getattr(seen.result, 'error', '?')}",
            )
        require(not self.incidents, "O-2", f"lifecycle incidents: {self.incidents}")

    def check_o1_cad01_start_order(self) -> None:
        """O-1, CAD-01 (and REC-09): startup recovery, the first execution-control cycle, then
        the lifecycles, the scheduler last; the first report of every start is the execution-
        control cycle 1, reported when only startup recovery had completed."""
        require(
            tuple(step.value for step in LOCAL_START) == O1,
            "CAD-01",
            f"the kernel's LOCAL_START {LOCAL_START} is not O-1",
        )
        for started in self.starts[self._starts_done :]:
            require(
                started.steps == O1,
                "CAD-01",
                f"start {started.incarnation} performed {started.steps}, not O-1 {O1}",
            )
        for seen in self._new_seen():
            if seen.incarnation not in self._first_report:
                self._first_report.add(seen.incarnation)
                require(
                    seen.lifecycle == CONTROL_LIFECYCLE and seen.result.ordinal == 1,
                    "CAD-01",
                    f"the first cycle after start {seen.incarnation} is {seen.lifecycle} "
                    f"{seen.result.ordinal}, not execution control 1",
                )
                require(
                    seen.steps_at == O1[:1],
                    "CAD-01",
                    f"the first execution-control cycle reported after steps {seen.steps_at}, "
                    "not right after startup recovery",
                )
            if seen.lifecycle == SCHEDULER_LIFECYCLE:
                require(
                    seen.steps_at[: len(O1)] == O1,
                    "CAD-01",
                    f"a scheduler cycle ran after only {seen.steps_at}",
                )

    def check_cad05_drain_makes_no_lost_retry_call(self) -> None:
        """CAD-05: a draining execution-control cycle has no lost-retry phase and never calls
        the lost-retry source (O-2: a stop drain never creates retry work)."""
        for drain in self.drains[self._drains_done :]:
            require(
                not drain.calls,
                "CAD-05",
                f"draining cycle {drain.ordinal} called the lost-retry source "
                f"{len(drain.calls)} time(s)",
            )
            require(
                LocalControlPhase.LOST_RETRY not in drain.report.phases
                and drain.report.lost_retry is None,
                "CAD-05",
                f"draining cycle {drain.ordinal} ran phases {drain.report.phases}",
            )
            expected = local_control_phases(
                drain.ordinal, draining=True, every_nth_cycle=self._every_nth()
            )
            require(
                drain.report.phases == expected,
                "CAD-02",
                f"draining cycle {drain.ordinal}: phases {drain.report.phases}, the kernel "
                f"gives {expected}",
            )

    def check_cad14_only_execution_control_calls_lost_retry(self) -> None:
        """CAD-14: only the execution-control cycle reads the lost-retry source: no scheduler
        cycle and no startup recovery does (no second lost-retry cadence)."""
        for call in self.lost_calls[self._calls_done :]:
            require(
                call.label != "scheduler" and call.caller == CONTROL_MODULE,
                "CAD-14",
                f"the lost-retry source was called by {call.caller} during {call.label}",
            )

    def _every_nth(self) -> int:
        slow = self.app.budget.execution_control_slow_cleanup
        assert slow is not None
        return slow.every_nth_cycle

    def check_cad02_control_phases(self) -> None:
        """CAD-02: each execution-control cycle runs exactly the kernel's
        `local_control_phases` for its ordinal (an ordered subsequence of O-2); ordinals count
        1, 2, ... per start; the lost-retry result is there exactly when its phase ran."""
        every = self._every_nth()
        require(
            tuple(p.value for p in LOCAL_CONTROL_CYCLE) == O2,
            "CAD-02",
            f"the kernel's LOCAL_CONTROL_CYCLE {LOCAL_CONTROL_CYCLE} is not O-2",
        )
        for seen, report in self._control_reports():
            expected = local_control_phases(report.ordinal, draining=False, every_nth_cycle=every)
            require(
                report.phases == expected,
                "CAD-02",
                f"control cycle {report.ordinal}: phases {report.phases}, the kernel gives "
                f"{expected}",
            )
            names = [p.value for p in report.phases]
            require(
                names == [p for p in O2 if p in names],
                "CAD-02",
                f"control cycle {report.ordinal}: phases {names} out of O-2 order",
            )
            key = (seen.incarnation, CONTROL_LIFECYCLE)
            require(
                report.ordinal == seen.result.ordinal == self._last_ordinal.get(key, 0) + 1,
                "CAD-02",
                f"control cycle ordinal {report.ordinal} after {self._last_ordinal.get(key, 0)}",
            )
            self._last_ordinal[key] = report.ordinal
            ran = LocalControlPhase.LOST_RETRY in report.phases
            require(
                ran == (report.lost_retry is not None),
                "CAD-02",
                f"control cycle {report.ordinal}: lost-retry phase {ran}, result "
                f"{report.lost_retry}",
            )

    def check_cad03_lost_retry_page(self) -> None:
        """CAD-03: one execution-control cycle handles at most the profile's lost-retry page
        (2 edge / 16 standalone): one source call with that limit, `scanned <= limit`, and the
        page's counts balance (RETRY-14)."""
        limit = self.app.budget.execution_control_lost_retry_per_cycle
        assert limit is not None
        for seen, report in self._control_reports():
            start, end = seen.calls
            calls = [c for c in self.lost_calls[start:end] if c.caller == CONTROL_MODULE]
            ran = LocalControlPhase.LOST_RETRY in report.phases
            require(
                len(calls) == (1 if ran else 0),
                "CAD-03",
                f"control cycle {report.ordinal} made {len(calls)} lost-retry source calls",
            )
            require(
                all(c.limit == limit for c in calls),
                "CAD-03",
                f"control cycle {report.ordinal} asked for {[c.limit for c in calls]}, the "
                f"profile's page is {limit}",
            )
            page = report.lost_retry
            if page is None:
                continue
            require(
                page.scanned <= limit,
                "CAD-03",
                f"control cycle {report.ordinal} scanned {page.scanned} > {limit}",
            )
            require(page.balanced, "RETRY-14", f"control cycle {report.ordinal}: {page}")

    def check_cad12_scheduler_budget(self) -> None:
        """CAD-12 (and O-3): a scheduler cycle runs O-3's phases in order, calls the dispatcher
        at most `scheduler_dispatch_activations` times (each starts at most one Run), and its
        trigger-schedule phase reads and fires at most the `scheduler_trigger_schedule` budget.
        No scheduler cycle calls the lost-retry source (CAD-14)."""
        budget = self.app.budget
        trigger = budget.scheduler_trigger_schedule
        assert trigger is not None
        activations = self.budget_activations
        for seen in self._new_seen():
            value = getattr(seen.result, "value", None)
            if not isinstance(value, SchedulerReport):
                continue
            phases = tuple(p.value for p in value.phases)
            require(
                phases == O3 and tuple(value.phases) == LOCAL_SCHEDULER_CYCLE,
                "CAD-12",
                f"scheduler cycle {value.ordinal}: phases {phases}, not O-3",
            )
            started = [d.run_id for d in value.dispatches if d.run_id is not None]
            require(
                len(value.dispatches) <= activations and len(started) <= activations,
                "CAD-12",
                f"scheduler cycle {value.ordinal}: {len(value.dispatches)} dispatcher calls "
                f"starting {len(started)} Runs, budget {activations}",
            )
            schedule = value.schedule
            require(schedule is not None, "CAD-12", f"scheduler cycle {value.ordinal}: no schedule")
            assert schedule is not None
            require(
                schedule.due <= trigger.max_items
                and len(schedule.fires) <= trigger.max_items
                and len(schedule.admitted) <= trigger.max_items,
                "CAD-12",
                f"scheduler cycle {value.ordinal}: {schedule.due} due read, "
                f"{len(schedule.fires)} fires, budget {trigger.max_items}",
            )
            start, end = seen.calls
            require(
                start == end,
                "CAD-14",
                f"scheduler cycle {value.ordinal} made {end - start} lost-retry source calls",
            )

    def check_o4_cad08_stop_order(self) -> None:
        """O-4, CAD-08: scheduler drain, execution-control drain, storage close, after O-1;
        the stop drained, closed the store, and a second `stop()` shares the first result."""
        require(
            tuple(step.value for step in LOCAL_STOP) == O4,
            "CAD-08",
            f"the kernel's LOCAL_STOP {LOCAL_STOP} is not O-4",
        )
        for stopped in self.stops[self._stops_done :]:
            require(
                stopped.steps_before == O1 and stopped.steps_after == O1 + O4,
                "CAD-08",
                f"stop {stopped.incarnation}: steps {stopped.steps_after}, not O-1 + O-4",
            )
            require(
                stopped.second is stopped.first,
                "CAD-08",
                f"stop {stopped.incarnation}: a second stop returned {stopped.second}, the "
                f"first {stopped.first}",
            )
            require(stopped.first.drained, "CAD-08", f"stop {stopped.incarnation} not drained")
            require(stopped.closed, "CAD-08", f"stop {stopped.incarnation}: storage open")

    def check_retry18_no_attempt_spawned_twice(self) -> None:
        """RETRY-18 and D-1: the launcher's registration (`spawns.log`, written before every
        spawn, kept across restarts) names no Attempt twice, and each line an existing Attempt
        of its Run."""
        entries = self._spawned()
        twice = sorted(a for a, n in Counter(a for _r, a in entries).items() if n > 1)
        require(not twice, "RETRY-18", f"Attempts spawned more than once: {twice}")
        aggregates = self.aggregates
        for run_id, attempt_id in entries:
            agg = aggregates.get(run_id)
            if agg is None:
                continue  # a Run admitted after the storage read of this check
            require(
                agg.attempt(attempt_id) is not None,
                "RETRY-18",
                f"spawned Attempt {attempt_id} is not an Attempt of {run_id}",
            )

    def check_run01_run08_retry05_storage(self) -> None:
        """RUN-01: every Run aggregate on the file satisfies the state invariants; RUN-08: I-5
        against the previous step (a terminal Run and a final Attempt never change; nothing is
        removed); RETRY-05: at most `max_attempts` Attempts (1 without a policy); RETRY-03 and
        RETRY-05: a Run failed by lost retry carries DISABLED (no policy) or EXHAUSTED."""
        now = self._load_all()
        missing = sorted(set(self.aggregates) - set(now))
        require(not missing, "RUN-08", f"Runs removed: {missing}")
        for run_id, agg in now.items():
            broken = check_invariants(agg)
            require(not broken, "RUN-01", "; ".join(str(v) for v in broken))
            before = self.aggregates.get(run_id)
            if before is not None:
                changed = i5_finality(before, agg)
                require(not changed, "RUN-08", "; ".join(str(v) for v in changed))
                require(
                    not before.run.status.terminal or agg.run.status is before.run.status,
                    "RUN-08",
                    f"terminal Run {run_id} went {before.run.status} -> {agg.run.status}",
                )
            limit = 1 if agg.policy is None else agg.policy.max_attempts
            require(
                len(agg.attempts) <= limit,
                "RETRY-05",
                f"Run {run_id} has {len(agg.attempts)} Attempts, max_attempts {limit}",
            )
            latest = agg.latest_attempt
            if (
                agg.run.status is RunStatus.FAILED
                and latest is not None
                and latest.status is AttemptStatus.LOST
            ):
                code = (
                    Code.RUN_LOST_RETRY_DISABLED
                    if agg.policy is None
                    else Code.RUN_LOST_RETRY_EXHAUSTED
                )
                require(
                    agg.run.error_code == code.value,
                    "RETRY-03" if agg.policy is None else "RETRY-05",
                    f"lost Run {run_id} failed with {agg.run.error_code}, not {code.value}",
                )
        self.aggregates = now

    # -- teardown ----------------------------------------------------------------------------
    def settle(self) -> None:
        """Every spawned child ends (bounded); the clock passes the receipt publish grace;
        `SETTLE_CYCLES` control cycles then complete every watched Attempt (CAD-02, L3) and
        leave the launcher watching nothing (LR-4, B-52); after at most one restart (for what
        startup recovery left `unknown`), every Run whose latest Attempt was spawned is
        terminal."""
        running = [] if self._wait_children(SETTLE_WAIT_S) else self._running_children()
        require(not running, "D-1", f"children of {running} still run after {SETTLE_WAIT_S} s")
        grace = self.app.budget.receipt_publish_grace_ms or 0
        self.clock.advance(grace + 1)
        self._settle_cycles()
        startup = self.app.startup
        left = set() if startup is None else {a for a, _k, _c in startup.resolved}
        left -= set(() if startup is None else startup.adopted)
        for run_id in self._unsettled():
            latest = self.aggregates[run_id].latest_attempt
            assert latest is not None
            require(
                latest.attempt_id in left,
                "CAD-02",
                f"Run {run_id} is {self.aggregates[run_id].run.status} after {SETTLE_CYCLES} "
                f"control cycles although the child of its Attempt {latest.attempt_id} ended "
                "(L3)",
            )
        watched = self.app.launcher.tracked
        if watched:
            raise ModelViolation(
                f"B-52: the launcher still watches {watched} Attempt(s) after every child "
                f"ended, the grace passed and {SETTLE_CYCLES} control cycles ran (LR-4: "
                "offered again for the grace, then no longer watched and reported); "
                "idle() cannot hold"
            )
        if self._unsettled():
            self.restarts += 1
            self._stop()
            self._boot()
            self.check_all()
            self._settle_cycles()
        unsettled = self._unsettled()
        require(
            not unsettled,
            "CAD-02",
            f"Runs whose spawned latest Attempt ended are not terminal after startup recovery "
            f"and {SETTLE_CYCLES} control cycles: {unsettled}",
        )

    def _settle_cycles(self) -> None:
        for _ in range(SETTLE_CYCLES):
            self._fire(CONTROL_LIFECYCLE, "control")
            self.check_all()

    def _unsettled(self) -> list[str]:
        """Runs whose latest Attempt was spawned and that are not terminal (per the last
        storage check)."""
        spawned = {attempt for _run, attempt in self._spawned()}
        return sorted(
            agg.run.run_id
            for agg in self.aggregates.values()
            if agg.latest_attempt is not None
            and agg.latest_attempt.attempt_id in spawned
            and not agg.run.status.terminal
        )

    def teardown(self) -> None:
        if not self.ready:
            return
        try:
            if self.healthy:
                self.settle()
        finally:
            self.ready = False
            with contextlib.suppress(Exception):
                self.app.stop()
            self._write_trace()
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)


def _run_key(agg: RunAggregate) -> str:
    return agg.run.run_id


def _reached(report: ControlReport) -> None:
    REACHED["completions"] += len(report.completions)
    REACHED["convergences"] += len(report.convergences)
    REACHED["stops"] += len(report.stops)
    REACHED["receipts_deleted"] += report.receipts_deleted
    page = report.lost_retry
    if page is not None:
        REACHED["lost_retry_scanned"] += page.scanned
        REACHED["lost_retry_full_pages"] += page.has_more
        REACHED["lost_retry_scheduled"] += page.scheduled
        REACHED["lost_retry_requeued"] += page.requeued
        REACHED["lost_retry_failed"] += page.failed


def _control_summary(report: ControlReport) -> dict[str, object]:
    page = report.lost_retry
    return {
        "ordinal": report.ordinal,
        "phases": [p.value for p in report.phases],
        "completions": [list(c) for c in report.completions],
        "convergences": [list(c) for c in report.convergences],
        "stops": [list(c) for c in report.stops],
        "lost_retry": None if page is None else [page.scanned, page.has_more],
        "errors": list(report.errors),
    }


# -- recordings as data --------------------------------------------------------------------------
def read_lines(path: Path) -> list[dict[str, Any]]:
    """One recording: the header, then one object per step."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def replay(lines: Sequence[Mapping[str, Any]], **knobs: object) -> LocalAppMachine:
    """Run a recording again on a fresh machine of its profile: each step's rule with its
    recorded arguments, the invariants after each, then teardown (`settle`). Returns the
    machine (its own `lines` are the replay's recording)."""
    header, steps = lines[0], lines[1:]
    machine_cls = LocalAppMachine.configured(PROFILE=Profile(header["profile"]), **knobs)
    machine = machine_cls()
    try:
        for step in steps:
            name = step["rule"]
            if name not in RULES:
                raise ValueError(f"step {step['step']}: unknown rule {name!r}")
            getattr(machine, name)(**step["args"])
            machine.model_invariants()
    finally:
        machine.teardown()
    return machine
