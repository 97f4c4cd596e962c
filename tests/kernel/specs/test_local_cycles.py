"""The local application's phase orders as data (SPEC §6.2 O-1..O-4; ADR-0380 §3, ADR-0229 §6;
CAD-01, CAD-02, CAD-05, CAD-08).

`kernel.specs.cycles` names the start and stop sequences and the steps of one execution-control
cycle; `local_control_phases` picks a cycle's steps. The orders below are transcribed again from
the SPEC text, so a change to either shows up here.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.specs import BUDGETS, Profile
from kernel.specs.cycles import (
    LOCAL_CONTROL_CYCLE,
    LOCAL_CONTROL_SKIPPED_WHILE_DRAINING,
    LOCAL_CONTROL_SLOW_ONLY,
    LOCAL_SCHEDULER_CYCLE,
    LOCAL_START,
    LOCAL_STOP,
    LocalControlPhase,
    LocalSchedulerPhase,
    LocalStartStep,
    local_control_phases,
)

#: O-2 (CAD-02): completions, cancellation/deadline, one lost-retry page, slow-cycle cleanup.
O2 = ("completions", "cancellation", "lost_retry", "cleanup")


def _is_subsequence(
    part: tuple[LocalControlPhase, ...], whole: tuple[LocalControlPhase, ...]
) -> bool:
    rest = iter(whole)
    return all(any(p is q for q in rest) for p in part)


# -- O-2: the execution-control cycle -----------------------------------------------------------
@pytest.mark.spec("CAD-02")
def test_the_control_cycle_order_is_o2() -> None:
    assert tuple(p.value for p in LOCAL_CONTROL_CYCLE) == O2
    assert set(LOCAL_CONTROL_CYCLE) == set(LocalControlPhase)
    assert {LocalControlPhase.LOST_RETRY} == LOCAL_CONTROL_SKIPPED_WHILE_DRAINING
    assert {LocalControlPhase.CLEANUP} == LOCAL_CONTROL_SLOW_ONLY


@pytest.mark.spec("CAD-02", "CAD-05")
@given(
    ordinal=st.integers(1, 10_000),
    draining=st.booleans(),
    every_nth_cycle=st.integers(1, 100) | st.sampled_from([12, 60]),
)
def test_a_cycles_steps_follow_o2(ordinal: int, draining: bool, every_nth_cycle: int) -> None:
    """The steps are a subsequence of O-2 in O-2 order, without repeats; completions and
    cancellation run on every cycle (CAD-02); the lost-retry page runs iff no stop drains
    (CAD-05); cleanup runs iff the cycle is a slow one (every `every_nth_cycle`-th, D-1)."""
    phases = local_control_phases(ordinal, draining=draining, every_nth_cycle=every_nth_cycle)
    assert _is_subsequence(phases, LOCAL_CONTROL_CYCLE)
    assert len(set(phases)) == len(phases)
    assert LocalControlPhase.COMPLETIONS in phases
    assert LocalControlPhase.CANCELLATION in phases
    assert (LocalControlPhase.LOST_RETRY not in phases) is draining
    assert (LocalControlPhase.CLEANUP in phases) is (ordinal % every_nth_cycle == 0)
    expected = tuple(
        p
        for p in LOCAL_CONTROL_CYCLE
        if not (draining and p is LocalControlPhase.LOST_RETRY)
        and not (p is LocalControlPhase.CLEANUP and ordinal % every_nth_cycle != 0)
    )
    assert phases == expected


@pytest.mark.spec("CAD-05")
@given(ordinal=st.integers(1, 10_000), every_nth_cycle=st.integers(1, 100))
def test_a_stop_drain_never_calls_lost_retry(ordinal: int, every_nth_cycle: int) -> None:
    """O-2, CAD-05: a draining cycle is the same cycle without its lost-retry page."""
    normal = local_control_phases(ordinal, draining=False, every_nth_cycle=every_nth_cycle)
    drain = local_control_phases(ordinal, draining=True, every_nth_cycle=every_nth_cycle)
    assert LocalControlPhase.LOST_RETRY in normal
    assert LocalControlPhase.LOST_RETRY not in drain
    assert drain == tuple(p for p in normal if p is not LocalControlPhase.LOST_RETRY)


@pytest.mark.spec("CAD-02", "CAD-05")
@pytest.mark.parametrize("profile", [Profile.EDGE, Profile.STANDALONE])
def test_cleanup_runs_on_exactly_the_profiles_slow_cycles(profile: Profile) -> None:
    """D-1, B-70: with the profile's `every_nth_cycle` (edge 12, standalone 60), cleanup runs on
    cycles n, 2n, ... and on no other of the first 3n; the first cycle is a fast one."""
    budget = BUDGETS[profile].execution_control_slow_cleanup
    assert budget is not None
    nth = budget.every_nth_cycle
    assert nth == {Profile.EDGE: 12, Profile.STANDALONE: 60}[profile]
    slow = [
        n
        for n in range(1, 3 * nth + 1)
        if LocalControlPhase.CLEANUP in local_control_phases(n, draining=False, every_nth_cycle=nth)
    ]
    assert slow == [nth, 2 * nth, 3 * nth]
    assert local_control_phases(1, draining=False, every_nth_cycle=nth) == (
        LocalControlPhase.COMPLETIONS,
        LocalControlPhase.CANCELLATION,
        LocalControlPhase.LOST_RETRY,
    )
    assert local_control_phases(nth, draining=True, every_nth_cycle=nth) == (
        LocalControlPhase.COMPLETIONS,
        LocalControlPhase.CANCELLATION,
        LocalControlPhase.CLEANUP,
    )


# -- O-1 and O-4: start and stop ------------------------------------------------------------------
@pytest.mark.spec("CAD-01")
def test_local_start_order() -> None:
    """O-1: startup recovery completes, then the first execution-control cycle runs, then
    execution control starts, then the scheduler (so its first cycle follows that first
    control cycle)."""
    assert LOCAL_START == (
        LocalStartStep.STARTUP_RECOVERY,
        LocalStartStep.FIRST_CONTROL_CYCLE,
        LocalStartStep.START_CONTROL,
        LocalStartStep.START_SCHEDULER,
    )
    assert [s.value for s in LOCAL_START] == [
        "startup_recovery",
        "first_control_cycle",
        "start_control",
        "start_scheduler",
    ]
    order = LOCAL_START.index
    assert order(LocalStartStep.STARTUP_RECOVERY) < order(LocalStartStep.FIRST_CONTROL_CYCLE)
    assert order(LocalStartStep.FIRST_CONTROL_CYCLE) < order(LocalStartStep.START_SCHEDULER)


@pytest.mark.spec("CAD-08")
def test_local_stop_order() -> None:
    """O-4: scheduler drain, then execution-control drain, then storage close."""
    assert LOCAL_STOP == (
        LocalStartStep.DRAIN_SCHEDULER,
        LocalStartStep.DRAIN_CONTROL,
        LocalStartStep.CLOSE_STORAGE,
    )
    assert [s.value for s in LOCAL_STOP] == ["drain_scheduler", "drain_control", "close_storage"]


def test_start_and_stop_steps_are_disjoint_and_cover_the_enum() -> None:
    assert not set(LOCAL_START) & set(LOCAL_STOP)
    assert set(LOCAL_START) | set(LOCAL_STOP) == set(LocalStartStep)
    assert len(set(LOCAL_START)) == len(LOCAL_START)
    assert len(set(LOCAL_STOP)) == len(LOCAL_STOP)


def test_the_scheduler_cycle_dispatches_last() -> None:
    """O-3: cancellation convergence, trigger schedule, frontier, Task admission, dispatch."""
    assert [p.value for p in LOCAL_SCHEDULER_CYCLE] == [
        "cancellation_convergence",
        "trigger_schedule",
        "workflow_frontier",
        "task_admission",
        "dispatch",
    ]
    assert set(LOCAL_SCHEDULER_CYCLE) == set(LocalSchedulerPhase)
