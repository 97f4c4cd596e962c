"""The local scheduler cycle (SPEC §6.2 O-3, ADR-0229 §1; RETRY-21, CAD-12).

The phases and their order are the kernel's (`LOCAL_SCHEDULER_CYCLE`). The Workflow phases
(cancellation convergence of Workflow Runs, frontier, task admission) are ordered, empty slots
until the Workflow issue fills them; the trigger-schedule phase admits due fires within its
budget row (`kernel/task/schedule.py`); the dispatch phase calls the local claimed dispatcher
`scheduler_dispatch_activations` times (each call activates at most one Attempt, RETRY-21).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kernel.specs import LOCAL_SCHEDULER_CYCLE, LocalSchedulerPhase, ProfileBudget
from runners.edge.store import EdgeStore
from runners.edge.tasks import EdgeTaskStore
from runners.lifecycle import CycleContext
from runners.local.dispatcher import DispatchReport, dispatch_once
from runners.local.launcher import LocalLauncher
from runners.local.schedule import SchedulePhaseReport, schedule_phase

__all__ = ["LocalScheduler", "SchedulerReport"]


@dataclass(slots=True)
class SchedulerReport:
    ordinal: int
    phases: list[LocalSchedulerPhase] = field(default_factory=list)
    schedule: SchedulePhaseReport | None = None
    dispatches: list[DispatchReport] = field(default_factory=list)


class LocalScheduler:
    """The cycle of `LocalSchedulerLifecycle` (O-3)."""

    def __init__(
        self,
        store: EdgeStore,
        tasks: EdgeTaskStore,
        launcher: LocalLauncher,
        budget: ProfileBudget,
        clock: Callable[[], int],
    ) -> None:
        assert budget.scheduler_trigger_schedule is not None, "a local profile"
        assert budget.scheduler_dispatch_activations is not None, "a local profile"
        assert budget.claimed_dispatcher is not None, "a local profile"
        self._store = store
        self._tasks = tasks
        self._launcher = launcher
        self._trigger = budget.scheduler_trigger_schedule
        self._activations = budget.scheduler_dispatch_activations
        self._scan = budget.claimed_dispatcher.scan
        self._clock = clock

    def __repr__(self) -> str:
        return f"LocalScheduler(activations={self._activations})"

    def __call__(self, context: CycleContext) -> SchedulerReport:
        report = SchedulerReport(context.ordinal)
        steps: dict[LocalSchedulerPhase, Callable[[SchedulerReport], None]] = {
            LocalSchedulerPhase.CANCELLATION_CONVERGENCE: _workflow_slot,
            LocalSchedulerPhase.TRIGGER_SCHEDULE: self._trigger_schedule,
            LocalSchedulerPhase.WORKFLOW_FRONTIER: _workflow_slot,
            LocalSchedulerPhase.TASK_ADMISSION: _workflow_slot,
            LocalSchedulerPhase.DISPATCH: self._dispatch,
        }
        for phase in LOCAL_SCHEDULER_CYCLE:
            steps[phase](report)
            report.phases.append(phase)
        return report

    def _trigger_schedule(self, report: SchedulerReport) -> None:
        report.schedule = schedule_phase(self._store, self._tasks, self._clock(), self._trigger)

    def _dispatch(self, report: SchedulerReport) -> None:
        for _ in range(self._activations):
            report.dispatches.append(
                dispatch_once(self._store, self._tasks, self._launcher, self._scan, self._clock)
            )


def _workflow_slot(_report: SchedulerReport) -> None:
    """An O-3 phase of Workflow Runs: no Workflow Runs exist before the Workflow issue."""
