"""The Approved Action runtime supervisor: phase order, fail-closed recovery, no overlap, paging
and resume cursors over two fake ports (SPEC §5.2, §5.3, Appendix D-4; AA-01, AA-02, AA-04,
AA-05, AA-06, AA-07).

The ports are the model's fakes (`model_tests/approved_action_supervisor_machine.py`): an
in-memory due index answered one keyset page at a time, with queued faults or explicit pages.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest

from kernel.approved_action.pages import (
    ActionCursor,
    DispatchCounters,
    DispatchPage,
    Phase,
    RecoveryCounters,
    RecoveryPage,
)
from kernel.approved_action.paging import (
    CycleFailureCode,
    CycleSummary,
    FailedCycle,
    PhaseBudget,
    PhaseSummary,
    ResumeCursors,
    StopReason,
)
from kernel.approved_action.policy import ApprovedActionConfig, approved_action_config
from model_tests.approved_action_supervisor_machine import (
    GUARD_S,
    SECRET,
    CallLog,
    FakeDispatch,
    FakeRecovery,
    Fault,
    PortFailure,
)
from runners.approved_action import ApprovedActionCycleFailed, ApprovedActionRuntimeSupervisor


def _config(recovery: tuple[int, int] = (2, 2), dispatch: tuple[int, int] = (2, 2)) -> Any:
    return approved_action_config(1_000, 5_000, 0, PhaseBudget(*recovery), PhaseBudget(*dispatch))


def _keys(prefix: str, n: int) -> list[ActionCursor]:
    return [ActionCursor(i, f"{prefix}{i:03d}") for i in range(n)]


class Rig:
    """A supervisor over two fake ports sharing one call log."""

    def __init__(self, config: ApprovedActionConfig | None = None) -> None:
        self.log = CallLog()
        self.recovery = FakeRecovery(self.log)
        self.dispatch = FakeDispatch(self.log)
        self.supervisor = ApprovedActionRuntimeSupervisor(
            self.recovery, self.dispatch, config or _config()
        )

    def calls(self, phase: Phase) -> list[tuple[ActionCursor | None, int]]:
        return [(c.cursor, c.page_size) for c in self.log.calls if c.phase is phase]

    def phases(self) -> list[Phase]:
        return [c.phase for c in self.log.calls]


# -- AA-01 ---------------------------------------------------------------------------------------
@pytest.mark.spec("AA-01")
def test_aa01_recovery_pages_all_run_before_any_dispatch_page() -> None:
    rig = Rig()
    rig.recovery.add_due(*_keys("r", 5))
    rig.dispatch.add_due(*_keys("d", 5))
    summary = rig.supervisor.run_cycle()
    assert rig.phases() == [Phase.RECOVERY] * 2 + [Phase.DISPATCH] * 2
    assert summary.recovery.stop_reason is StopReason.PAGE_LIMIT
    assert summary.dispatch.stop_reason is StopReason.PAGE_LIMIT


@pytest.mark.spec("AA-01", "AA-06")
@pytest.mark.parametrize("failing_page", [1, 2])
def test_aa01_a_raising_recovery_port_means_zero_dispatch_calls(failing_page: int) -> None:
    rig = Rig()
    rig.recovery.add_due(*_keys("r", 9))
    rig.dispatch.add_due(*_keys("d", 9))
    rig.supervisor.run_cycle()  # both phases stop at page_limit: cursors set
    before = rig.supervisor.cursors
    assert before.recovery is not None
    assert before.dispatch is not None
    rig.log.calls.clear()
    if failing_page == 2:
        rig.recovery.faults.append(rig.recovery._make(0, True, ActionCursor(50, "r")))
    rig.recovery.faults.append(Fault.RAISE)
    with pytest.raises(PortFailure):
        rig.supervisor.run_cycle()
    assert rig.calls(Phase.DISPATCH) == []
    assert len(rig.calls(Phase.RECOVERY)) == failing_page
    assert rig.supervisor.cursors is before  # AA-06: both kept exactly
    assert rig.supervisor.last_failure == FailedCycle(Phase.RECOVERY, CycleFailureCode.PORT_FAILED)
    assert SECRET not in repr(rig.supervisor.last_failure) + repr(rig.supervisor)


@pytest.mark.spec("AA-01", "AA-04", "AA-06")
@pytest.mark.parametrize("fault", [Fault.STALL_MISSING, Fault.STALL_SAME, Fault.STALL_BACK])
def test_d4_a_stalled_recovery_cursor_fails_the_cycle_before_dispatch(fault: Fault) -> None:
    rig = Rig(_config(recovery=(2, 1)))
    rig.recovery.add_due(*_keys("r", 3))
    rig.dispatch.add_due(*_keys("d", 1))
    rig.supervisor.run_cycle()
    before = rig.supervisor.cursors
    assert before == ResumeCursors(ActionCursor(1, "r001"), None)
    rig.log.calls.clear()
    rig.recovery.faults.append(fault)
    with pytest.raises(ApprovedActionCycleFailed) as caught:
        rig.supervisor.run_cycle()
    failure = caught.value.failure
    assert (failure.phase, failure.code) == (Phase.RECOVERY, CycleFailureCode.CURSOR_STALLED)
    assert failure.recovery is not None
    assert failure.recovery.stop_reason is StopReason.CURSOR_STALLED
    assert failure.recovery.remaining is True
    assert rig.calls(Phase.DISPATCH) == []  # D-4: dispatcher called 0 times
    assert rig.supervisor.cursors is before  # D-4: both resume cursors kept
    assert rig.supervisor.last_failure == failure
    # The next cycle retries the same boundary.
    rig.log.calls.clear()
    rig.supervisor.run_cycle()
    assert rig.calls(Phase.RECOVERY)[0] == (ActionCursor(1, "r001"), 2)


@pytest.mark.spec("AA-04", "AA-05")
def test_d4_a_stalled_dispatch_cursor_ends_only_the_dispatch_phase() -> None:
    rig = Rig(_config(dispatch=(1, 3)))
    rig.dispatch.add_due(*_keys("d", 5))
    rig.dispatch.faults.extend(
        [rig.dispatch._make(1, True, ActionCursor(1, "d")), Fault.STALL_SAME]
    )
    summary = rig.supervisor.run_cycle()
    assert summary.dispatch.stop_reason is StopReason.CURSOR_STALLED
    assert summary.dispatch.remaining is True
    assert summary.dispatch.pages == 2
    assert rig.supervisor.cursors == ResumeCursors(None, None)  # stalled clears (restart at start)
    assert rig.supervisor.last_failure is None


@pytest.mark.spec("AA-01", "AA-06")
def test_a_raising_dispatch_port_fails_the_cycle_and_keeps_both_cursors() -> None:
    rig = Rig()
    rig.recovery.add_due(*_keys("r", 9))
    rig.dispatch.add_due(*_keys("d", 9))
    rig.supervisor.run_cycle()
    before = rig.supervisor.cursors
    rig.log.calls.clear()
    rig.dispatch.faults.extend([rig.dispatch._make(2, True, ActionCursor(90, "d")), Fault.RAISE])
    with pytest.raises(PortFailure):
        rig.supervisor.run_cycle()
    assert rig.supervisor.cursors is before  # recovery's page_limit cursor not stored either
    assert rig.supervisor.last_failure == FailedCycle(Phase.DISPATCH, CycleFailureCode.PORT_FAILED)
    rig.log.calls.clear()
    rig.supervisor.run_cycle()  # the next cycle starts from the same boundary
    assert rig.calls(Phase.RECOVERY)[0][0] == before.recovery
    assert rig.calls(Phase.DISPATCH)[0][0] == before.dispatch


@pytest.mark.spec("AA-01")
def test_a_port_answering_the_wrong_type_fails_the_cycle_closed() -> None:
    rig = Rig()
    rig.recovery.faults.append(DispatchPage(DispatchCounters.zero(), False))
    with pytest.raises(TypeError):
        rig.supervisor.run_cycle()
    assert rig.calls(Phase.DISPATCH) == []


# -- AA-02 ---------------------------------------------------------------------------------------
@pytest.mark.spec("AA-02")
def test_aa02_the_phases_never_overlap_even_with_two_callers() -> None:
    """A recovery port that blocks; a second caller's cycle waits for the first to finish; the
    call log shows no call that began while the other phase had one in flight."""
    rig = Rig()
    rig.recovery.add_due(*_keys("r", 3))
    rig.dispatch.add_due(*_keys("d", 3))
    rig.recovery.faults.append(Fault.BLOCK)
    results: list[object] = []

    def cycle() -> None:
        results.append(rig.supervisor.run_cycle())

    first = threading.Thread(target=cycle, daemon=True)
    first.start()
    assert rig.recovery.entered.wait(GUARD_S), "the first cycle never reached recovery"
    assert rig.supervisor.phase is Phase.RECOVERY
    second = threading.Thread(target=cycle, daemon=True)
    second.start()
    second.join(0.05)  # a failure guard only: the second cycle must still be waiting
    assert rig.calls(Phase.DISPATCH) == []  # nothing dispatched while recovery is in flight
    rig.recovery.release.set()
    first.join(GUARD_S)
    second.join(GUARD_S)
    assert len(results) == 2
    assert all(type(r) is CycleSummary for r in results)
    assert [c.overlapped for c in rig.log.calls] == [False] * len(rig.log.calls)
    phases = rig.phases()
    # Two whole cycles one after the other: R..R D..D R..R D..D.
    boundaries = sum(1 for a, b in itertools.pairwise(phases) if a is not b)
    assert boundaries == 3
    assert rig.supervisor.phase is None


# -- AA-04, AA-05 --------------------------------------------------------------------------------
@pytest.mark.spec("AA-04", "AA-05")
def test_aa05_page_limit_resumes_next_cycle_and_a_complete_cycle_clears() -> None:
    rig = Rig(_config(recovery=(2, 2), dispatch=(3, 1)))
    rig.recovery.add_due(*_keys("r", 7))
    rig.dispatch.add_due(*_keys("d", 4))
    first = rig.supervisor.run_cycle()
    assert rig.calls(Phase.RECOVERY) == [(None, 2), (ActionCursor(1, "r001"), 2)]
    assert rig.calls(Phase.DISPATCH) == [(None, 3)]
    assert first.recovery.pages == 2
    assert first.recovery.counters.scanned == 4
    assert rig.supervisor.cursors == ResumeCursors(ActionCursor(3, "r003"), ActionCursor(2, "d002"))
    rig.log.calls.clear()
    second = rig.supervisor.run_cycle()
    assert rig.calls(Phase.RECOVERY) == [(ActionCursor(3, "r003"), 2), (ActionCursor(5, "r005"), 2)]
    assert rig.calls(Phase.DISPATCH) == [(ActionCursor(2, "d002"), 3)]
    assert second.recovery.stop_reason is StopReason.COMPLETE  # r006 was the last
    assert second.dispatch.stop_reason is StopReason.COMPLETE
    assert rig.supervisor.cursors == ResumeCursors(None, None)
    rig.log.calls.clear()
    rig.supervisor.run_cycle()
    assert rig.calls(Phase.RECOVERY)[0] == (None, 2)  # back at the due index start


@pytest.mark.spec("AA-04")
def test_aa04_an_empty_due_index_is_one_bounded_query_per_phase() -> None:
    rig = Rig()
    summary = rig.supervisor.run_cycle()
    assert rig.calls(Phase.RECOVERY) == [(None, 2)]
    assert rig.calls(Phase.DISPATCH) == [(None, 2)]
    zero = PhaseSummary(1, RecoveryCounters.zero(), StopReason.COMPLETE, False)
    assert summary.recovery == zero


# -- AA-07 ---------------------------------------------------------------------------------------
@pytest.mark.spec("AA-07")
def test_aa07_a_cycle_summary_is_two_numeric_phase_summaries() -> None:
    rig = Rig()
    rig.recovery.add_due(*_keys("r", 3))
    summary = rig.supervisor.run_cycle()
    assert set(summary.__dataclass_fields__) == {"recovery", "dispatch"}
    for phase in (summary.recovery, summary.dispatch):
        flat = phase.as_dict()
        assert all(type(v) in (int, str, bool) for v in flat.values())
    assert summary.recovery.as_dict()["scanned"] == 3
    assert "ActionCursor" not in repr(summary)


def test_the_supervisor_takes_only_a_checked_configuration() -> None:
    log = CallLog()
    with pytest.raises(TypeError):
        ApprovedActionRuntimeSupervisor(FakeRecovery(log), FakeDispatch(log), (8, 1))  # type: ignore[arg-type]


def test_a_page_answered_to_the_recovery_port_is_a_recovery_page() -> None:
    log = CallLog()
    page = FakeRecovery(log).reconcile_batch(None, 4)
    assert page == RecoveryPage(RecoveryCounters.zero(), False, None)
