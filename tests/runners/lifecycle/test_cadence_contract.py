"""The lifecycle contract L-1..L-9 (SPEC §6.1; CAD-04, CAD-13), one suite for every lifecycle.

Every cadence lifecycle of the project is a `CadenceLifecycle` around a cycle of its own; each
joins `LIFECYCLES` below with a factory that builds it around the test's `Probe` (a cycle step
that can block, raise or look at its context), so the same tests run against each. The timing
tests step a `SteppedScheduler` (no sleeps); the thread tests use the real `DaemonScheduler` and
wait on events, each wait bounded by a generous deadline that names what it waited for.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from kernel.specs import (
    BudgetError,
    CadenceCode,
    CadenceRefused,
    CadenceState,
    CadenceStep,
    CadenceTrigger,
    cadence_config,
)
from runners.lifecycle import (
    CadenceLifecycle,
    CycleContext,
    CycleFailed,
    CycleReport,
    CycleSucceeded,
    DaemonScheduler,
    LifecycleIncident,
    Scheduler,
    SteppedScheduler,
)

INTERVAL_MS = 1_000
INITIAL_MS = 250
STOP_TIMEOUT_MS = 5_000
DEADLINE_S = 30.0  # a generous bound for any wait on another thread


@dataclass
class Probe:
    """The test's hand inside a cycle: counts entries, can block until released, can raise."""

    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    block: bool = False
    fail_with: BaseException | None = None
    calls: int = 0
    contexts: list[CycleContext] = field(default_factory=list)
    during: Callable[[CycleContext], None] | None = None

    def __call__(self, context: CycleContext) -> int:
        self.calls += 1
        self.contexts.append(context)
        self.entered.set()
        if self.during is not None:
            self.during(context)
        if self.block and not self.release.wait(DEADLINE_S):
            raise AssertionError("the test never released the cycle")
        if self.fail_with is not None:
            raise self.fail_with
        return context.ordinal


@dataclass
class Recorder:
    reports: list[CycleReport[Any]] = field(default_factory=list)
    incidents: list[LifecycleIncident] = field(default_factory=list)
    decisions: list[tuple[CadenceState, CadenceTrigger, CadenceStep | CadenceRefused]] = field(
        default_factory=list
    )

    def saw(self, source: CadenceState, trigger: CadenceTrigger) -> bool:
        return any(s is source and t is trigger for s, t, _ in self.decisions)


Factory = Callable[[Probe, Scheduler, Recorder], CadenceLifecycle[Any]]


def _core(probe: Probe, scheduler: Scheduler, recorder: Recorder) -> CadenceLifecycle[Any]:
    return CadenceLifecycle(
        "contract",
        probe,
        cadence_config(INTERVAL_MS, stop_timeout_ms=STOP_TIMEOUT_MS, initial_delay_ms=INITIAL_MS),
        scheduler=scheduler,
        on_cycle=recorder.reports.append,
        report=recorder.incidents.append,
        trace=lambda s, t, step: recorder.decisions.append((s, t, step)),
    )


#: Every lifecycle of the project, built around a probe (the applications' lifecycles join here).
LIFECYCLES = [pytest.param(_core, id="core")]

pytestmark = pytest.mark.spec("CAD-13")


def state(lifecycle: CadenceLifecycle[Any]) -> CadenceState:
    """The state now (a call, so that a type checker does not carry one reading past a call)."""
    return lifecycle.state


def _thread_of(scheduler: DaemonScheduler) -> threading.Thread | None:
    return scheduler.thread


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {DEADLINE_S} s for {what}")
        time.sleep(0.001)


def _thread(target: Callable[[], object], results: list[object]) -> threading.Thread:
    thread = threading.Thread(target=lambda: results.append(target()), daemon=True)
    thread.start()
    return thread


# -- L-1 -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("factory", LIFECYCLES)
def test_l1_inert_until_start_and_a_second_start_is_a_no_op(factory: Factory) -> None:
    scheduler, probe, recorder = SteppedScheduler(), Probe(), Recorder()
    lifecycle = factory(probe, scheduler, recorder)
    assert state(lifecycle) is CadenceState.INERT
    assert scheduler.armed == []
    assert scheduler.advance(10 * INTERVAL_MS) == 0
    assert probe.calls == 0
    assert lifecycle.start() is None
    assert lifecycle.start() is None
    assert scheduler.armed == [INITIAL_MS]  # one timer, armed once
    assert state(lifecycle) is CadenceState.WAITING


@pytest.mark.parametrize("factory", LIFECYCLES)
def test_l1_constructing_starts_no_thread(factory: Factory) -> None:
    before = threading.active_count()
    scheduler = DaemonScheduler("contract")
    lifecycle = factory(Probe(), scheduler, Recorder())
    assert threading.active_count() == before
    assert scheduler.thread is None
    lifecycle.start()
    thread = _thread_of(scheduler)
    assert thread is not None  # created by start(): the lifecycle's one thread
    assert thread.daemon  # L-3
    assert threading.active_count() == before + 1
    assert lifecycle.stop().drained
    thread.join(DEADLINE_S)
    assert not thread.is_alive()


# -- L-2, L-4, L-8 ---------------------------------------------------------------------------------
@pytest.mark.parametrize("factory", LIFECYCLES)
def test_l2_l4_one_timer_armed_only_after_the_cycle_settles(factory: Factory) -> None:
    scheduler, recorder = SteppedScheduler(), Recorder()
    probe = Probe()
    seen_pending: list[int | None] = []

    def slow(context: CycleContext) -> None:
        seen_pending.append(scheduler.pending_ms)  # no timer while a cycle runs (L-2)
        scheduler.now_ms += 3 * INTERVAL_MS  # a cycle longer than the interval

    probe.during = slow
    lifecycle = factory(probe, scheduler, recorder)
    lifecycle.start()
    assert scheduler.advance(INITIAL_MS) == 1
    # The next cycle is `interval` after the slow one ended, not after it began (no fixed rate).
    assert scheduler.pending_ms == INITIAL_MS + 3 * INTERVAL_MS + INTERVAL_MS
    assert scheduler.advance(4 * INTERVAL_MS) == 1
    assert seen_pending == [None, None]
    assert scheduler.armed == [INITIAL_MS, INTERVAL_MS, INTERVAL_MS]
    assert [c.ordinal for c in probe.contexts] == [1, 2]
    assert [r.duration_ms for r in recorder.reports] == [3 * INTERVAL_MS] * 2


@pytest.mark.parametrize("factory", LIFECYCLES)
def test_l8_a_failed_cycle_is_reported_and_the_next_comes_at_the_interval(
    factory: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler, recorder = SteppedScheduler(), Recorder()
    probe = Probe(fail_with=RuntimeError("token=s3cr3t-value"))
    lifecycle = factory(probe, scheduler, recorder)
    lifecycle.start()
    assert scheduler.advance(INITIAL_MS) == 1
    assert scheduler.pending_ms == INITIAL_MS + INTERVAL_MS  # not sooner: no hot retry loop
    assert scheduler.advance(INTERVAL_MS - 1) == 0
    assert scheduler.advance(1) == 1
    assert recorder.incidents == [LifecycleIncident("contract", "cycle_failed", "RuntimeError")] * 2
    assert [r.result for r in recorder.reports] == [
        CycleFailed(1, "RuntimeError"),
        CycleFailed(2, "RuntimeError"),
    ]
    # S-1: the exception's text reaches nothing the lifecycle reports or logs.
    assert "s3cr3t" not in repr(recorder.incidents) + repr(recorder.reports) + caplog.text


@pytest.mark.parametrize("factory", LIFECYCLES)
def test_l7_callback_errors_are_reported_and_change_nothing(
    factory: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler, recorder = SteppedScheduler(), Recorder()
    probe = Probe()
    lifecycle = factory(probe, scheduler, recorder)

    def broken_metrics(_report: CycleReport[Any]) -> None:
        raise ValueError("metrics sink down")

    def broken_reporter(_incident: LifecycleIncident) -> None:
        raise OSError("log sink down")

    lifecycle._on_cycle = broken_metrics
    assert lifecycle.run_once() == CycleSucceeded(1, 1)
    assert recorder.incidents == [LifecycleIncident("contract", "callback_failed", "ValueError")]
    lifecycle._report = broken_reporter
    with caplog.at_level(logging.WARNING, logger="ql3.lifecycle"):
        lifecycle.start()
        assert scheduler.advance(INITIAL_MS) == 1
    assert "report callback failed (OSError)" in caplog.text
    assert "callback_failed (ValueError)" in caplog.text
    assert scheduler.pending_ms == INITIAL_MS + INTERVAL_MS  # the schedule did not move
    assert probe.calls == 2


# -- L-5, CAD-04 -----------------------------------------------------------------------------------
@pytest.mark.spec("CAD-04")
@pytest.mark.parametrize("started", [True, False], ids=["started", "inert"])
@pytest.mark.parametrize("factory", LIFECYCLES)
def test_cad04_overlapping_run_once_calls_share_one_cycle_and_one_result(
    factory: Factory, started: bool
) -> None:
    scheduler, recorder = SteppedScheduler(), Recorder()
    probe = Probe(block=True)
    lifecycle = factory(probe, scheduler, recorder)
    if started:
        lifecycle.start()
    results: list[object] = []
    first = _thread(lifecycle.run_once, results)
    assert probe.entered.wait(DEADLINE_S), "the first run_once never began its cycle"
    others = [_thread(lifecycle.run_once, results) for _ in range(3)]
    # A tick of the (cancelled) timer while the cycle runs begins nothing either.
    lifecycle._tick()
    _wait(
        lambda: sum(t is CadenceTrigger.RUN_ONCE for _, t, _ in recorder.decisions) == 4,
        "the three joiners to ask",
    )
    probe.release.set()
    for thread in (first, *others):
        thread.join(DEADLINE_S)
    assert probe.calls == 1
    assert lifecycle.cycles == 1
    assert len(results) == 4
    assert all(r is results[0] for r in results)
    assert results[0] == CycleSucceeded(1, 1)
    if started:
        assert state(lifecycle) is CadenceState.WAITING
        assert scheduler.pending_ms is not None
    else:  # a hand-driven cycle arms nothing (L-1)
        assert state(lifecycle) is CadenceState.INERT
        assert scheduler.armed == []


@pytest.mark.parametrize("factory", LIFECYCLES)
def test_l5_run_once_while_waiting_runs_now_and_keeps_one_timer(factory: Factory) -> None:
    scheduler, probe, recorder = SteppedScheduler(), Probe(), Recorder()
    pending: list[int | None] = []
    probe.during = lambda _context: pending.append(scheduler.pending_ms)
    lifecycle = factory(probe, scheduler, recorder)
    lifecycle.start()
    assert lifecycle.run_once() == CycleSucceeded(1, 1)
    assert pending == [None]  # the timer was cancelled before the cycle began (L-2)
    assert scheduler.armed == [INITIAL_MS, INTERVAL_MS]  # cancelled, re-armed after the cycle
    assert scheduler.advance(INITIAL_MS) == 0  # the initial timer was cancelled
    assert scheduler.advance(INTERVAL_MS) == 1


# -- L-6 -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("factory", LIFECYCLES)
def test_l6_stop_cancels_the_timer_and_nothing_runs_afterwards(factory: Factory) -> None:
    scheduler, probe, recorder = SteppedScheduler(), Probe(), Recorder()
    lifecycle = factory(probe, scheduler, recorder)
    lifecycle.start()
    result = lifecycle.stop()
    assert result.drained
    assert state(lifecycle) is CadenceState.STOPPED
    assert scheduler.pending_ms is None
    assert scheduler.closed
    assert scheduler.advance(10 * INTERVAL_MS) == 0
    assert probe.calls == 0
    assert lifecycle.stop() is result  # later calls share the first result
    assert lifecycle.run_once() == CadenceRefused(CadenceCode.STOPPED)
    assert lifecycle.start() == CadenceRefused(CadenceCode.STOPPED)
    assert probe.calls == 0


@pytest.mark.parametrize("factory", LIFECYCLES)
def test_l6_stop_waits_at_most_the_stop_timeout_for_a_hung_cycle(factory: Factory) -> None:
    scheduler, recorder = SteppedScheduler(), Recorder()
    probe = Probe(block=True)
    lifecycle = factory(probe, scheduler, recorder)
    lifecycle.start()
    results: list[object] = []
    cycle = _thread(lambda: scheduler.advance(INITIAL_MS), results)
    assert probe.entered.wait(DEADLINE_S)
    stopped_at = scheduler.now_ms
    result = lifecycle.stop()
    assert not result.drained
    assert scheduler.now_ms - stopped_at == STOP_TIMEOUT_MS  # it waited the stop timeout, no more
    assert state(lifecycle) is CadenceState.STOPPED
    assert scheduler.closed
    assert probe.contexts[0].draining
    probe.release.set()
    cycle.join(DEADLINE_S)
    # The hung cycle settled after stop gave up: no timer, no new cycle.
    assert scheduler.armed == [INITIAL_MS]
    assert state(lifecycle) is CadenceState.STOPPED
    assert lifecycle.stop() is result


@pytest.mark.parametrize("factory", LIFECYCLES)
def test_l6_concurrent_stops_share_one_drained_result(factory: Factory) -> None:
    scheduler, recorder = DaemonScheduler("contract"), Recorder()
    probe = Probe(block=True)
    lifecycle = factory(probe, scheduler, recorder)
    results: list[object] = []
    lifecycle.start()  # the cycle runs on the lifecycle's own thread
    assert probe.entered.wait(DEADLINE_S), "the timer never fired"
    stops = [_thread(lifecycle.stop, results) for _ in range(3)]
    _wait(
        lambda: sum(t is CadenceTrigger.STOP for _, t, _ in recorder.decisions) == 3,
        "the three stops to ask",
    )
    assert state(lifecycle) is CadenceState.STOPPING
    assert probe.contexts[0].draining  # O-2: the cycle can see that a stop waits for it
    probe.release.set()
    for thread in stops:
        thread.join(DEADLINE_S)
    assert scheduler.thread is not None
    scheduler.thread.join(DEADLINE_S)
    assert not scheduler.thread.is_alive()
    assert scheduler.closed
    assert [r.result for r in recorder.reports] == [CycleSucceeded(1, 1)]
    stop_results = results
    assert len(stop_results) == 3
    assert all(r is stop_results[0] for r in stop_results)
    assert getattr(stop_results[0], "drained", None) is True
    assert state(lifecycle) is CadenceState.STOPPED
    assert probe.calls == 1


# -- L-3 -------------------------------------------------------------------------------------------
def test_l3_the_timer_thread_does_not_keep_the_process_alive() -> None:
    script = (
        "from kernel.specs import cadence_config\n"
        "from runners.lifecycle import CadenceLifecycle\n"
        "lc = CadenceLifecycle('held', lambda c: None, cadence_config(250, stop_timeout_ms=1000))\n"
        "lc.start()\n"
        "print('started', flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S * 2,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "started\n"


# -- L-9 -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "field_name"),
    [
        ({"interval_ms": 249, "stop_timeout_ms": 1}, "interval_ms"),
        ({"interval_ms": 24 * 3_600_000 + 1, "stop_timeout_ms": 1}, "interval_ms"),
        ({"interval_ms": 1_000, "stop_timeout_ms": 0}, "stop_timeout_ms"),
        ({"interval_ms": 1_000, "stop_timeout_ms": 60_001}, "stop_timeout_ms"),
        ({"interval_ms": 1_000, "stop_timeout_ms": 5, "initial_delay_ms": -1}, "initial_delay_ms"),
        (
            {"interval_ms": 1_000, "stop_timeout_ms": 5, "initial_delay_ms": 1_001},
            "initial_delay_ms",
        ),
        ({"interval_ms": 1_000.0, "stop_timeout_ms": 5}, "interval_ms"),
        ({"interval_ms": True, "stop_timeout_ms": 5}, "interval_ms"),
    ],
)
def test_l9_out_of_range_timing_is_refused_at_construction(
    kwargs: dict[str, Any], field_name: str
) -> None:
    with pytest.raises(BudgetError) as caught:
        cadence_config(**kwargs)
    assert caught.value.field == field_name


def test_l9_the_bounds_themselves_are_accepted() -> None:
    low = cadence_config(250, stop_timeout_ms=1, initial_delay_ms=0)
    high = cadence_config(24 * 3_600_000, stop_timeout_ms=60_000, initial_delay_ms=24 * 3_600_000)
    assert (low.interval_ms, high.stop_timeout_ms) == (250, 60_000)
