"""The Approved Action runtime lifecycle (SPEC §5.5, §0.4 L-1..L-9; AA-05, AA-06, AA-09, AA-10,
AA-11, AA-12, AA-13).

The timing tests step a `SteppedScheduler` (a fake clock, no sleeps). One test uses the real
daemon-thread scheduler with events (AA-11/AA-12), every wait bounded by a generous guard; one
runs a child interpreter to see that a started lifecycle does not keep the process alive.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from kernel.approved_action.pages import ActionCursor, Phase
from kernel.approved_action.paging import PhaseBudget, ResumeCursors
from kernel.approved_action.policy import (
    ApprovedActionConfig,
    ApprovedActionState,
    ProfileNotSupported,
    approved_action_config,
)
from kernel.specs import CadenceCode, CadenceRefused, CadenceState
from kernel.specs.codes import Code
from model_tests.approved_action_supervisor_machine import (
    GUARD_S,
    SECRET,
    CallLog,
    FakeDispatch,
    FakeRecovery,
    Fault,
)
from runners.approved_action import (
    ApprovedActionRuntimeLifecycle,
    ApprovedActionRuntimeSupervisor,
)
from runners.lifecycle import (
    CycleFailed,
    CycleReport,
    CycleResult,
    CycleSucceeded,
    DaemonScheduler,
    LifecycleIncident,
    Scheduler,
    SteppedScheduler,
)

INTERVAL_MS = 1_000
STOP_TIMEOUT_MS = 5_000


def _config(
    interval: int = INTERVAL_MS, stop_timeout: int = STOP_TIMEOUT_MS, delay: int = 0
) -> ApprovedActionConfig:
    return approved_action_config(
        interval, stop_timeout, delay, PhaseBudget(2, 1), PhaseBudget(2, 1)
    )


@dataclass
class Rig:
    scheduler: Scheduler = field(default_factory=SteppedScheduler)
    config: ApprovedActionConfig = field(default_factory=_config)
    reports: list[CycleReport[Any]] = field(default_factory=list)
    incidents: list[LifecycleIncident] = field(default_factory=list)
    log: CallLog = field(default_factory=CallLog)

    def __post_init__(self) -> None:
        self.recovery = FakeRecovery(self.log, self._slow)
        self.dispatch = FakeDispatch(self.log, self._slow)
        self.supervisor = ApprovedActionRuntimeSupervisor(self.recovery, self.dispatch, self.config)
        self.lifecycle = ApprovedActionRuntimeLifecycle(
            self.supervisor,
            self.config,
            scheduler=self.scheduler,
            on_cycle=self.reports.append,
            report=self.incidents.append,
        )

    @property
    def stepped(self) -> SteppedScheduler:
        assert isinstance(self.scheduler, SteppedScheduler)
        return self.scheduler

    def _slow(self, ms: int) -> None:
        self.stepped.now_ms += ms

    # Calls, not attributes, so that a type checker does not carry one reading past a step.
    def pending(self) -> int | None:
        return self.stepped.pending_ms

    def last(self) -> CycleResult[Any]:
        return self.reports[-1].result

    def cursors(self) -> ResumeCursors:
        return self.supervisor.cursors

    def cursors_asked(self, phase: Phase) -> list[ActionCursor | None]:
        return [c.cursor for c in self.log.calls if c.phase is phase]


def state(lifecycle: ApprovedActionRuntimeLifecycle) -> ApprovedActionState:
    """The state now (a call, so that a type checker does not carry one reading past a call)."""
    return lifecycle.state


def _keys(prefix: str, n: int) -> list[ActionCursor]:
    return [ActionCursor(i, f"{prefix}{i:03d}") for i in range(n)]


# -- AA-10 ---------------------------------------------------------------------------------------
@pytest.mark.spec("AA-10")
def test_aa10_no_timer_after_construction_and_repeated_start_schedules_one() -> None:
    rig = Rig()
    assert state(rig.lifecycle) is ApprovedActionState.INERT
    assert rig.stepped.armed == []
    assert rig.stepped.advance(10 * INTERVAL_MS) == 0
    assert rig.log.calls == []
    assert rig.lifecycle.start() is None
    assert rig.lifecycle.start() is None
    assert rig.lifecycle.start() is None
    assert rig.stepped.armed == [0]  # one timer, at the initial delay
    assert state(rig.lifecycle) is ApprovedActionState.SCHEDULED
    assert rig.lifecycle.cadence_state is CadenceState.WAITING


@pytest.mark.spec("AA-10")
def test_aa10_constructing_starts_no_thread() -> None:
    before = threading.active_count()
    scheduler = DaemonScheduler("approved_action")
    rig = Rig(scheduler=scheduler)
    assert threading.active_count() == before
    assert scheduler.thread is None
    assert rig.lifecycle.stop().drained
    assert scheduler.thread is None


# -- AA-11 ---------------------------------------------------------------------------------------
@pytest.mark.spec("AA-11")
def test_aa11_a_slow_cycle_is_never_overlapped_and_the_next_timer_follows_settlement() -> None:
    rig = Rig()
    rig.recovery.slow_ms = 3 * INTERVAL_MS  # a cycle three intervals long
    pending_in_cycle: list[int | None] = []
    states_in_cycle: list[ApprovedActionState] = []

    def watch(_ms: int) -> None:
        pending_in_cycle.append(rig.pending())
        states_in_cycle.append(rig.lifecycle.state)
        rig.stepped.now_ms += 3 * INTERVAL_MS

    rig.recovery.advance = watch
    rig.recovery.faults.extend([Fault.SLOW, Fault.SLOW])
    rig.lifecycle.start()
    assert rig.stepped.advance(0) == 1
    # Armed `interval` after the slow cycle ended, not after it began (no fixed rate, L-4).
    assert rig.pending() == 3 * INTERVAL_MS + INTERVAL_MS
    assert rig.stepped.advance(4 * INTERVAL_MS) == 1
    assert pending_in_cycle == [None, None]  # no timer while a cycle runs (L-2)
    assert states_in_cycle == [ApprovedActionState.CYCLING] * 2
    assert rig.stepped.armed == [0, INTERVAL_MS, INTERVAL_MS]
    assert [r.duration_ms for r in rig.reports] == [3 * INTERVAL_MS] * 2
    assert [c.overlapped for c in rig.log.calls] == [False] * len(rig.log.calls)


@pytest.mark.spec("AA-11")
def test_aa11_the_timer_does_not_keep_the_process_alive() -> None:
    script = (
        "from kernel.approved_action.pages import RecoveryCounters, RecoveryPage\n"
        "from kernel.approved_action.pages import DispatchCounters, DispatchPage\n"
        "from runners.approved_action import ApprovedActionRuntimeLifecycle\n"
        "class R:\n"
        "    def reconcile_batch(self, c, n): return RecoveryPage(RecoveryCounters.zero(), False)\n"
        "class D:\n"
        "    def dispatch_batch(self, c, n): return DispatchPage(DispatchCounters.zero(), False)\n"
        "lc = ApprovedActionRuntimeLifecycle.for_profile('standalone', R(), D())\n"
        "lc.start()\n"
        "print('started', flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=GUARD_S * 2,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "started\n"


# -- AA-12 ---------------------------------------------------------------------------------------
@pytest.mark.spec("AA-12")
def test_aa12_stop_cancels_a_pending_timer_at_once() -> None:
    rig = Rig()
    rig.lifecycle.start()
    assert rig.pending() is not None
    result = rig.lifecycle.stop()
    assert result.drained
    assert rig.pending() is None
    assert rig.stepped.closed
    assert rig.stepped.now_ms == 0  # nothing waited
    assert state(rig.lifecycle) is ApprovedActionState.STOPPED
    assert rig.stepped.advance(10 * INTERVAL_MS) == 0
    assert rig.log.calls == []
    assert rig.lifecycle.start() == CadenceRefused(CadenceCode.STOPPED)
    assert rig.lifecycle.run_once() == CadenceRefused(CadenceCode.STOPPED)
    assert rig.lifecycle.stop() is result


@pytest.mark.spec("AA-12")
@pytest.mark.parametrize("phase", [Phase.RECOVERY, Phase.DISPATCH])
def test_aa12_stop_returns_within_the_stop_timeout_when_the_cycle_hangs(phase: Phase) -> None:
    rig = Rig()
    port = rig.recovery if phase is Phase.RECOVERY else rig.dispatch
    port.faults.append(Fault.BLOCK)
    rig.lifecycle.start()
    ticking = threading.Thread(target=lambda: rig.stepped.advance(0), daemon=True)
    ticking.start()
    assert port.entered.wait(GUARD_S), "the cycle never reached the port"
    assert state(rig.lifecycle) is ApprovedActionState.CYCLING
    stopped_at = rig.stepped.now_ms
    result = rig.lifecycle.stop()
    assert not result.drained
    assert rig.stepped.now_ms - stopped_at == STOP_TIMEOUT_MS  # it waited the stop timeout only
    assert state(rig.lifecycle) is ApprovedActionState.STOPPED
    assert rig.pending() is None
    port.release.set()
    ticking.join(GUARD_S)
    assert not ticking.is_alive()
    assert rig.stepped.armed == [0]  # the hung cycle settled after stop: no new timer
    assert rig.lifecycle.cycles == 1


@pytest.mark.spec("AA-11", "AA-12")
def test_aa11_aa12_on_real_daemon_threads() -> None:
    """The real scheduler: the timer thread is a daemon; while the cycle hangs no second cycle
    begins (the timer is not re-armed before settlement); `stop()` gives up after its stop
    timeout and the thread ends once the cycle is released."""
    scheduler = DaemonScheduler("approved_action")
    rig = Rig(scheduler=scheduler, config=_config(interval=250, stop_timeout=50))
    rig.recovery.faults.append(Fault.BLOCK)
    states: list[ApprovedActionState] = []
    rig.lifecycle.start()
    assert rig.recovery.entered.wait(GUARD_S), "the timer never fired"
    thread = scheduler.thread
    assert thread is not None
    assert thread.daemon
    states.append(rig.lifecycle.state)
    assert rig.lifecycle.cycles == 1
    result = rig.lifecycle.stop()
    assert not result.drained  # the cycle still hangs after the 50 ms stop timeout
    assert state(rig.lifecycle) is ApprovedActionState.STOPPED
    rig.recovery.release.set()
    thread.join(GUARD_S)
    assert not thread.is_alive()
    assert states == [ApprovedActionState.CYCLING]
    assert rig.lifecycle.cycles == 1  # never overlapped, never re-run
    assert len(rig.reports) == 1


# -- AA-13, L-8 ----------------------------------------------------------------------------------
@pytest.mark.spec("AA-13")
def test_aa13_raising_callbacks_neither_fail_the_cycle_nor_rerun_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = Rig()

    def broken_metrics(_report: CycleReport[Any]) -> None:
        raise ValueError(f"metrics sink down {SECRET}")

    def broken_reporter(_incident: LifecycleIncident) -> None:
        raise OSError(f"log sink down {SECRET}")

    lifecycle = ApprovedActionRuntimeLifecycle(
        rig.supervisor,
        rig.config,
        scheduler=rig.stepped,
        on_cycle=broken_metrics,
        report=broken_reporter,
    )
    with caplog.at_level(logging.WARNING, logger="ql3.lifecycle"):
        lifecycle.start()
        assert rig.stepped.advance(0) == 1
        assert rig.pending() == INTERVAL_MS  # the schedule did not move
        assert rig.stepped.advance(INTERVAL_MS - 1) == 0  # no immediate re-run
        assert rig.stepped.advance(1) == 1
    assert "callback_failed (ValueError)" in caplog.text
    assert SECRET not in caplog.text
    assert lifecycle.cycles == 2
    result = lifecycle.run_once()  # the callbacks still raise; the cycle still succeeds
    assert isinstance(result, CycleSucceeded)
    assert result.ordinal == 3


@pytest.mark.spec("AA-06")
def test_l8_a_failed_cycle_is_reported_by_type_and_the_next_comes_at_the_interval() -> None:
    rig = Rig()
    rig.recovery.add_due(*_keys("r", 5))
    rig.lifecycle.start()
    assert rig.stepped.advance(0) == 1  # page_limit: recovery cursor r001
    assert rig.cursors() == ResumeCursors(ActionCursor(1, "r001"), None)
    rig.recovery.faults.append(Fault.RAISE)
    rig.dispatch.faults.append(Fault.RAISE)  # never reached: recovery fails first
    assert rig.stepped.advance(INTERVAL_MS) == 1
    assert rig.last() == CycleFailed(2, "PortFailure")
    assert rig.incidents == [LifecycleIncident("approved_action", "cycle_failed", "PortFailure")]
    assert rig.cursors() == ResumeCursors(ActionCursor(1, "r001"), None)
    assert rig.pending() == 2 * INTERVAL_MS  # no hot retry
    assert len(rig.dispatch.faults) == 1  # the dispatcher was not called in the failed cycle
    rig.dispatch.faults.clear()
    assert rig.stepped.advance(INTERVAL_MS) == 1
    assert isinstance(rig.last(), CycleSucceeded)
    asked = rig.cursors_asked(Phase.RECOVERY)
    assert asked == [None, ActionCursor(1, "r001"), ActionCursor(1, "r001")]  # same boundary
    assert SECRET not in repr(rig.reports) + repr(rig.incidents)


@pytest.mark.spec("AA-01", "AA-06")
def test_d4_a_stalled_recovery_is_a_failed_cycle_for_the_lifecycle() -> None:
    rig = Rig()
    rig.recovery.faults.append(Fault.STALL_MISSING)
    result = rig.lifecycle.run_once()
    assert result == CycleFailed(1, "ApprovedActionCycleFailed")
    assert [c.phase for c in rig.log.calls] == [Phase.RECOVERY]
    assert rig.incidents == [
        LifecycleIncident("approved_action", "cycle_failed", "ApprovedActionCycleFailed")
    ]


# -- AA-05 through the lifecycle -----------------------------------------------------------------
@pytest.mark.spec("AA-05")
def test_aa05_timer_cycles_resume_from_the_page_limit_cursor_then_clear_it() -> None:
    rig = Rig()
    rig.dispatch.add_due(*_keys("d", 3))
    rig.lifecycle.start()
    rig.stepped.advance(0)
    assert rig.cursors().dispatch == ActionCursor(1, "d001")
    rig.stepped.advance(INTERVAL_MS)
    assert rig.cursors().dispatch is None  # d002 was the last: complete
    rig.stepped.advance(INTERVAL_MS)
    assert rig.cursors_asked(Phase.DISPATCH) == [None, ActionCursor(1, "d001"), None]


# -- AA-09 and the §5.5 states -------------------------------------------------------------------
class Untouchable:
    """A port that fails the test if anything at all is asked of it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the port was touched ({name})")


@pytest.mark.spec("AA-09")
@pytest.mark.parametrize("profile", ["cluster", "worker", "nas"])
def test_aa09_for_profile_refuses_cluster_and_worker_before_building_anything(
    profile: str,
) -> None:
    before = threading.active_count()
    with pytest.raises(ProfileNotSupported) as caught:
        ApprovedActionRuntimeLifecycle.for_profile(profile, Untouchable(), Untouchable())
    assert caught.value.code is Code.PROFILE_NOT_SUPPORTED
    assert threading.active_count() == before


@pytest.mark.spec("AA-10")
@pytest.mark.parametrize(("profile", "interval"), [("edge", 30_000), ("standalone", 2_000)])
def test_for_profile_builds_an_inert_lifecycle_with_the_profile_cadence(
    profile: str, interval: int
) -> None:
    stepped = SteppedScheduler()
    log = CallLog()
    lifecycle = ApprovedActionRuntimeLifecycle.for_profile(
        profile, FakeRecovery(log), FakeDispatch(log), scheduler=stepped
    )
    assert state(lifecycle) is ApprovedActionState.INERT
    assert stepped.armed == []
    lifecycle.start()
    assert stepped.advance(0) == 1
    assert stepped.pending_ms == interval


def test_the_lifecycle_refuses_a_configuration_other_than_its_supervisors() -> None:
    rig = Rig()
    with pytest.raises(ValueError, match="another configuration"):
        ApprovedActionRuntimeLifecycle(rig.supervisor, _config(interval=2_000))
    with pytest.raises(TypeError):
        ApprovedActionRuntimeLifecycle(rig.supervisor, "edge")  # type: ignore[arg-type]


def test_run_once_reports_the_cycle_summary_and_states_map_to_section_5_5() -> None:
    rig = Rig()
    seen: list[ApprovedActionState] = []
    rig.recovery.advance = lambda _ms: seen.append(rig.lifecycle.state)
    rig.recovery.faults.append(Fault.SLOW)
    result = rig.lifecycle.run_once()
    assert isinstance(result, CycleSucceeded)
    assert result.value.recovery.pages == 1
    assert seen == [ApprovedActionState.CYCLING]  # a run_once cycle before start() (manual)
    assert state(rig.lifecycle) is ApprovedActionState.INERT
    assert repr(rig.lifecycle) == "ApprovedActionRuntimeLifecycle(state=inert)"
