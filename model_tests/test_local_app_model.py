"""The local application's cycles under the active Hypothesis profile (issue 15 item 5;
`model_tests/local_app_machine.py`).

A real `LocalApplication` on a real SQLite file, stepped schedulers, a fake clock and real `true`
and `false` children, on both local profiles. `ci` (default, derandomized) runs the
`LOCAL_APP_BUDGETS` row of each profile; `deep` (`QL3_HYPOTHESIS_PROFILE=deep`) the larger one.
Then: the budgets reached every path that matters on both profiles; every machine run's step log
is written where the environment says and replays as data; two planted bugs (a control cycle
that ignores the drain, a scheduler that dispatches five times per cycle) are caught. Last, the
launcher defect the model found (LR-4, B-52: an ended Attempt without a receipt watched for
ever) stays reproduced as a regression test.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from kernel import Actor, CancelReason, RequestCancel
from kernel.specs import Profile, ProfileBudget, RunStatus
from kernel.task import TaskDefinition, define_task
from model_tests.harness import STATS
from model_tests.local_app_machine import (
    NAME,
    REACHED,
    RULES,
    T0,
    TRACE_DIR_ENV,
    LocalAppMachine,
    ModelViolation,
    Stepped,
    local_app_settings,
    read_lines,
    replay,
)
from runners.edge.store import EdgeStore
from runners.edge.tasks import EdgeTaskStore
from runners.engine import execute
from runners.lifecycle import CycleContext
from runners.local.app import LocalApplication
from runners.local.control import ControlReport, LocalExecutionControl
from runners.local.launcher import LocalLauncher
from runners.local.reads import run_status_counts
from runners.local.schedule import submit
from runners.local.scheduler import LocalScheduler

pytestmark = pytest.mark.slow  # real children and a model search: ~35 s in all

MODEL_IDS = (
    "CAD-01",
    "CAD-02",
    "CAD-03",
    "CAD-05",
    "CAD-08",
    "CAD-12",
    "CAD-14",
    "RETRY-03",
    "RETRY-05",
    "RETRY-14",
    "RETRY-18",
    "RUN-01",
    "RUN-08",
)


class EdgeLocalAppMachine(LocalAppMachine):
    PROFILE = Profile.EDGE


class StandaloneLocalAppMachine(LocalAppMachine):
    PROFILE = Profile.STANDALONE


# The budgeted runs of this session: profile -> (steps, seconds), and what they reached.
BUDGETED: dict[Profile, tuple[int, float]] = {}
BUDGET_REACHED: dict[Profile, Counter[str]] = {}


def _budgeted(machine: type[LocalAppMachine], run: Callable[[], None]) -> None:
    counts = STATS.of(NAME)
    steps, reached = counts.steps, Counter(REACHED)
    started = time.perf_counter()
    try:
        run()
    finally:
        done, seconds = BUDGETED.get(machine.PROFILE, (0, 0.0))
        BUDGETED[machine.PROFILE] = (
            done + counts.steps - steps,
            seconds + time.perf_counter() - started,
        )
        BUDGET_REACHED.setdefault(machine.PROFILE, Counter()).update(Counter(REACHED) - reached)


@pytest.mark.spec(*MODEL_IDS)
class TestLocalAppEdge(EdgeLocalAppMachine.TestCase):  # type: ignore[misc,valid-type]
    """Edge (5 s cadences, 1 start per scheduler cycle, a lost-retry page of 2): after every
    step O-1/CAD-01 start order, CAD-02 control phases, CAD-03 lost-retry page, CAD-05 no
    lost retry while draining, CAD-12 scheduler budgets, CAD-14 lost retry only from execution
    control, O-4/CAD-08 stop order, no Attempt spawned twice (RETRY-18), the Run invariants on
    the file (RUN-01, RUN-08: terminal stays terminal; RETRY-03/05); at teardown every Run
    whose children ended is terminal."""

    settings = local_app_settings(EdgeLocalAppMachine)

    def runTest(self) -> None:
        _budgeted(EdgeLocalAppMachine, super().runTest)


@pytest.mark.spec(*MODEL_IDS)
class TestLocalAppStandalone(StandaloneLocalAppMachine.TestCase):  # type: ignore[misc,valid-type]
    """The same machine and properties on standalone (1 s cadences, 4 starts per scheduler
    cycle, a lost-retry page of 16)."""

    settings = local_app_settings(StandaloneLocalAppMachine)

    def runTest(self) -> None:
        _budgeted(StandaloneLocalAppMachine, super().runTest)


#: What each profile's budget must reach (the rest is printed: stops, adoptions and receipt
#: deletions depend on a child still running at the right step).
MUST_REACH = (
    "spawns",
    "completions",
    "convergences",
    "lost_retry_scanned",
    "lost_retry_requeued",
    "lost_retry_failed",
    "restarts",
    "draining_cycles",
)
# Cron fires need the fake clock past a minute boundary with a cron task present: reached on
# some runs and printed, not required (tests/runners/local/test_schedule_phase.py covers them).


@pytest.mark.spec("CAD-03", "CAD-12")
def test_the_budget_reached_every_path_on_both_profiles() -> None:
    """The budgeted runs (run here when their tests did not run in this session) spawned and
    completed children, converged cancellations, retried and failed lost Runs, restarted,
    drained and admitted cron fires on both profiles, and filled edge's lost-retry page of 2
    (`has_more`); the figures are printed."""
    machines: tuple[type[LocalAppMachine], ...] = (
        EdgeLocalAppMachine,
        StandaloneLocalAppMachine,
    )
    for machine in machines:
        if machine.PROFILE not in BUDGETED:

            def run(m: type[LocalAppMachine] = machine) -> None:
                run_state_machine_as_test(m, settings=local_app_settings(m))

            _budgeted(machine, run)
    print(f"\nlocal app model ({settings.get_current_profile_name()}):")
    for profile, (steps, seconds) in sorted(BUDGETED.items()):
        reached = dict(sorted(BUDGET_REACHED[profile].items()))
        print(f"  {profile.value}: {steps} steps in {seconds:.1f} s; {reached}")
    for profile, reached in BUDGET_REACHED.items():
        missing = [key for key in MUST_REACH if reached[key] == 0]
        assert not missing, (profile, missing)
    assert BUDGET_REACHED[Profile.EDGE]["lost_retry_full_pages"] > 0


# -- step logs -----------------------------------------------------------------------------------
HEADER_KEYS = {"name", "kind", "profile", "serial", "kernel_version", "description"}
STEP_KEYS = {"step", "rule", "args", "clock_ms", "observed"}


def _small(examples: int, steps: int) -> settings:
    """A derandomized search without shrinking (fast and reproducible)."""
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


@pytest.mark.spec("CAD-01", "CAD-02")
def test_every_machine_run_records_its_steps_and_a_recording_replays_as_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `QL3_MODEL_TRACE_DIR` set, each example's machine run is written as JSON Lines
    (a header, then one object per step, numbered from 0, naming a rule with its arguments);
    the longest recording, replayed as data on a fresh machine (same rules, same arguments,
    invariants after each step, teardown's settle), passes and records the same steps."""
    logs = tmp_path / "logs"
    monkeypatch.setenv(TRACE_DIR_ENV, str(logs))
    run_state_machine_as_test(EdgeLocalAppMachine, settings=_small(6, 12))
    paths = sorted(logs.glob("*.jsonl"))
    assert len(paths) >= 6
    recordings = []
    for path in paths:
        assert path.name.startswith("CAD-01-local-app-edge-")
        lines = read_lines(path)
        header, steps = lines[0], lines[1:]
        assert set(header) == HEADER_KEYS
        assert (header["kind"], header["profile"]) == ("local_app_model", "edge")
        assert steps, path.name
        assert steps[0]["rule"] == "setup"
        for index, step in enumerate(steps):
            assert set(step) == STEP_KEYS
            assert step["step"] == index
            assert step["rule"] in RULES
            assert isinstance(step["args"], dict)
        recordings.append(lines)
    assert {step["rule"] for lines in recordings for step in lines[1:]} >= {
        "setup",
        "scheduler_cycle",
    }
    monkeypatch.delenv(TRACE_DIR_ENV)
    longest = max(recordings, key=len)
    replays = tmp_path / "replays"
    again = replay(longest, TRACE_DIR=str(replays))
    assert [(s["rule"], s["args"]) for s in again.lines] == [
        (s["rule"], s["args"]) for s in longest[1:]
    ]
    [written] = replays.glob("*.jsonl")
    assert len(read_lines(written)) == len(longest)


# -- planted bugs (TEST ONLY) --------------------------------------------------------------------
class DrainBlindControl(LocalExecutionControl):
    """*** PLANTED BUG, for the model's self-check only. *** Ignores that a stop is draining,
    so a drain runs the lost-retry page (O-2, CAD-05)."""

    def __call__(self, context: CycleContext) -> ControlReport:
        return super().__call__(CycleContext(context.ordinal, lambda: False))


class FiveDispatchScheduler(LocalScheduler):
    """*** PLANTED BUG, for the model's self-check only. *** Calls the dispatcher five times
    per cycle, whatever the profile's `scheduler_dispatch_activations` (CAD-12)."""

    def __init__(
        self,
        store: EdgeStore,
        tasks: EdgeTaskStore,
        launcher: LocalLauncher,
        budget: ProfileBudget,
        clock: Callable[[], int],
    ) -> None:
        super().__init__(store, tasks, launcher, budget, clock)
        self._activations = 5


@pytest.mark.spec("CAD-05")
def test_the_model_catches_a_control_cycle_that_ignores_the_drain() -> None:
    """With the planted control cycle the first draining cycle reads the lost-retry source."""
    machine = EdgeLocalAppMachine.configured(CONTROL=DrainBlindControl)
    with pytest.raises(ModelViolation) as caught:
        run_state_machine_as_test(machine, settings=_small(30, 15))
    assert str(caught.value).startswith("CAD-05: draining cycle ")


@pytest.mark.spec("CAD-12")
def test_the_model_catches_a_scheduler_that_dispatches_five_times() -> None:
    """With the planted scheduler the first scheduler cycle calls the dispatcher 5 times, more
    than standalone's 4."""
    machine = StandaloneLocalAppMachine.configured(SCHEDULER=FiveDispatchScheduler)
    with pytest.raises(ModelViolation) as caught:
        run_state_machine_as_test(machine, settings=_small(30, 15))
    assert str(caught.value).startswith("CAD-12: scheduler cycle ")


# -- what the model found ------------------------------------------------------------------------
@pytest.mark.spec("CAD-02")
def test_a_run_cancelled_on_a_slow_cycle_leaves_the_launcher_watching_nothing(
    tmp_path: Path,
) -> None:
    """Found by this model (teardown's B-52 check), fixed in the launcher (`finished()` keeps
    reporting an ended Attempt until it is forgotten). A running Run is cancelled; edge's slow
    cycle 12 stops the process (L5: `cancelled`) and its cleanup deletes the receipt the wrapper
    published, since the Attempt is terminal (CAD-15 allows it). The next cycle's `finished()`
    reaps the wrapper and offers the Attempt once without a receipt (the grace starts); it must
    be offered again until the grace ends, then forgotten and reported `without_receipt`, so
    that the launcher watches nothing and `idle()` (`qlk serve --until-idle`) holds once every
    Run is terminal."""
    now = [T0]
    stepped = Stepped()
    app = LocalApplication(
        tmp_path / "ql3.db", Profile.EDGE, clock=lambda: now[0], schedulers=stepped
    )
    try:
        definition = define_task("nap", ["sleep", "60"])
        assert isinstance(definition, TaskDefinition)
        app.tasks.add(definition, now[0])
        submit(app.store, app.tasks, "nap", now_ms=now[0], run_id="run-1", attempt_id="att-1")
        app.start()  # execution-control cycle 1
        stepped.fire("scheduler")  # launches att-1
        for _ in range(10):  # execution-control cycles 2..11
            stepped.fire("execution_control")
        execute(app.store, RequestCancel("run-1", CancelReason.USER, Actor.USER), now[0])
        stepped.fire("execution_control")  # 12 (slow: stop, then cleanup)
        assert run_status_counts(app.store) == {RunStatus.CANCELLED: 1}
        deadline = time.monotonic() + 30  # the stopped child exits in milliseconds
        while app.launcher.tracked and time.monotonic() < deadline:
            now[0] += 1_000  # past the 100 ms receipt publish grace
            stepped.fire("execution_control")
            time.sleep(0.02)
        assert app.launcher.tracked == 0  # before the fix: 1, for ever
        assert app.idle()
    finally:
        app.stop()
