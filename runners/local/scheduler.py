"""The local scheduler cycle (SPEC §6.2 O-3, ADR-0229 §1; RETRY-21, CAD-12).

The phases and their order are the kernel's (`LOCAL_SCHEDULER_CYCLE`, WF-01): whole-Workflow
cancellation convergence, the trigger schedule (due fires within its budget row,
`kernel/task/schedule.py`), the Workflow frontier, Task Attempt admission (the Workflow phases of
`runners.local.workflow`, each within its profile's paging row, WF-02), then dispatch:
`scheduler_dispatch_activations` activations shared by ordinary Runs and Task Attempts (D-15),
each at most one Attempt (RETRY-21). A failing phase raises: the lifecycle records the failed
cycle and the next cadence runs the whole cycle again (B-61, WF-03); no phase has a timer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kernel import DispatchHalf, activated_nothing, shared_activation_order
from kernel.specs import LOCAL_SCHEDULER_CYCLE, LocalSchedulerPhase, ProfileBudget
from runners.edge.store import EdgeStore
from runners.edge.tasks import EdgeTaskStore
from runners.lifecycle import CycleContext
from runners.local.dispatcher import DispatchReport, dispatch_once
from runners.local.launcher import LocalLauncher
from runners.local.schedule import SchedulePhaseReport, schedule_phase
from runners.local.workflow import (
    WorkflowPhaseReport,
    frontier_phase,
    task_admission_phase,
    task_dispatch_once,
    workflow_cancellation_phase,
)

__all__ = ["LocalScheduler", "SchedulerReport"]


@dataclass(slots=True)
class SchedulerReport:
    ordinal: int
    phases: list[LocalSchedulerPhase] = field(default_factory=list)
    schedule: SchedulePhaseReport | None = None
    cancellation: WorkflowPhaseReport | None = None
    frontier: WorkflowPhaseReport | None = None
    admission: WorkflowPhaseReport | None = None
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
        assert budget.scheduler_cancellation is not None, "a local profile"
        assert budget.scheduler_frontier is not None, "a local profile"
        assert budget.scheduler_task_admission is not None, "a local profile"
        self._cancellation = budget.scheduler_cancellation
        self._frontier = budget.scheduler_frontier
        self._admission = budget.scheduler_task_admission
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
            LocalSchedulerPhase.CANCELLATION_CONVERGENCE: self._workflow_cancellation,
            LocalSchedulerPhase.TRIGGER_SCHEDULE: self._trigger_schedule,
            LocalSchedulerPhase.WORKFLOW_FRONTIER: self._workflow_frontier,
            LocalSchedulerPhase.TASK_ADMISSION: self._task_admission,
            LocalSchedulerPhase.DISPATCH: self._dispatch,
        }
        for phase in LOCAL_SCHEDULER_CYCLE:
            steps[phase](report)
            report.phases.append(phase)
        return report

    def _trigger_schedule(self, report: SchedulerReport) -> None:
        report.schedule = schedule_phase(self._store, self._tasks, self._clock(), self._trigger)

    def _workflow_cancellation(self, report: SchedulerReport) -> None:
        report.cancellation = workflow_cancellation_phase(
            self._store, self._launcher, self._cancellation, self._clock
        )

    def _workflow_frontier(self, report: SchedulerReport) -> None:
        report.frontier = frontier_phase(self._store, self._frontier, self._clock)

    def _task_admission(self, report: SchedulerReport) -> None:
        report.admission = task_admission_phase(self._store, self._admission, self._clock)

    def _dispatch(self, report: SchedulerReport) -> None:
        """D-15: one activation budget for both halves, in the kernel's order."""
        halves = {DispatchHalf.ORDINARY: self._ordinary_once, DispatchHalf.TASK: self._task_once}
        for index in range(self._activations):
            first, second = shared_activation_order(report.ordinal, index)
            dispatched = halves[first]()
            if activated_nothing(dispatched.end):
                dispatched = halves[second]()
            report.dispatches.append(dispatched)

    def _ordinary_once(self) -> DispatchReport:
        return dispatch_once(self._store, self._tasks, self._launcher, self._scan, self._clock)

    def _task_once(self) -> DispatchReport:
        return task_dispatch_once(self._store, self._tasks, self._launcher, self._scan, self._clock)
