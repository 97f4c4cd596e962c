"""The local application for the `edge` and `standalone` profiles (SPEC §6.2 O-1..O-4,
ADR-0380 §3; CAD-01, CAD-08, FP-1, FP-2).

One `EdgeStore` (one SQLite connection, FP-2) serves startup recovery, both lifecycles and the
task store; one launcher starts and watches the processes. The start and stop sequences are the
kernel's `LOCAL_START` / `LOCAL_STOP` (O-1: startup recovery, then the first execution-control
cycle run by hand, then the execution-control lifecycle, then the scheduler; O-4: scheduler
drain, execution-control drain, storage close); this class maps each named step to its port
call and performs them in the order given. Concurrent and repeated `stop()` calls share the
first call's result.

Approved Actions (SPEC §5, issue 19) are default unreachable (§5.5, AA-15; decision AA-D5):
only `approvals=True` (`qlk serve --approvals`) builds their lifecycle, importing its modules
then and not before; it starts after the scheduler (the application is up) and stops first (it
admits Runs, so nothing new is admitted while the others drain).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernel import local_idle
from kernel.approved_action import ActionSource
from kernel.specs import (
    LOCAL_START,
    LOCAL_STOP,
    LOG_RETENTION_DEFAULT_MS,
    LOG_RETENTION_MS,
    LocalStartStep,
    Paging,
    Profile,
    ProfileBudget,
    budget_for,
    cadence_config,
    check_in_range,
)
from runners.edge.store import EdgeStore
from runners.edge.tasks import EdgeTaskStore
from runners.lifecycle import (
    CadenceLifecycle,
    CycleReport,
    LifecycleIncident,
    Scheduler,
    StopResult,
)
from runners.local.control import ControlReport, LocalExecutionControl
from runners.local.launcher import LocalLauncher, LocalLayout
from runners.local.reads import run_status_counts
from runners.local.scheduler import LocalScheduler, SchedulerReport
from runners.local.startup import StartupReport, local_startup_recovery
from runners.local.workflow import TaskRecoveryReport, task_startup_recovery

if TYPE_CHECKING:  # typing only: importing this module never imports the lifecycle (AA-15)
    from runners.approved_action.lifecycle import ApprovedActionRuntimeLifecycle

__all__ = ["ApplicationStopped", "LocalApplication", "wall_clock_ms"]

#: One due row is enough to know that something is due (`idle`).
_ANY_DUE = Paging(1, 1)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class ApplicationStopped:
    """O-4's result: whether each lifecycle drained within its stop timeout."""

    scheduler: StopResult
    control: StopResult
    approvals: StopResult | None = None  # None: the Approved Action lifecycle was not built

    @property
    def drained(self) -> bool:
        approvals = self.approvals is None or self.approvals.drained
        return self.scheduler.drained and self.control.drained and approvals


class LocalApplication:
    """`qlk serve`: the assembled local runtime on one database file (module docstring).

    `schedulers`, when given, makes each lifecycle's `Scheduler` (tests pass stepped ones);
    `on_cycle` and `report` receive every cycle report and every absorbed incident;
    `log_retention_ms` is how long a finished Attempt's log is kept (decision LR-13);
    `approvals` opts in to the Approved Action lifecycle (module docstring).
    """

    def __init__(
        self,
        db: Path,
        profile: Profile = Profile.STANDALONE,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        schedulers: Callable[[str], Scheduler] | None = None,
        on_cycle: Callable[[CycleReport[ControlReport | SchedulerReport]], None] | None = None,
        report: Callable[[LifecycleIncident], None] | None = None,
        log_retention_ms: int = LOG_RETENTION_DEFAULT_MS,
        approvals: bool = False,
    ) -> None:
        # [decision LR-13] Refused before anything is opened (`BudgetError`: 1 min..365 days).
        check_in_range(log_retention_ms, LOG_RETENTION_MS, field="log_retention_ms")
        self.budget: ProfileBudget = budget_for(profile)
        assert self.budget.execution_control_cadence_ms is not None, "a local profile"
        assert self.budget.scheduler_cadence_ms is not None, "a local profile"
        assert self.budget.startup_recovery is not None, "a local profile"
        self.profile = profile
        self.started_at_ms = clock()
        self._clock = clock
        self.layout = LocalLayout(Path(db))
        self.layout.ensure()
        self.store = EdgeStore(db)
        self.tasks = EdgeTaskStore(self.store)
        self.launcher = LocalLauncher(self.layout)
        stop_timeout = self.budget.lifecycle_stop_timeout_ms
        self.control: CadenceLifecycle[ControlReport] = CadenceLifecycle(
            "execution_control",
            LocalExecutionControl(
                self.store, self.launcher, self.budget, clock, log_retention_ms=log_retention_ms
            ),
            cadence_config(self.budget.execution_control_cadence_ms, stop_timeout_ms=stop_timeout),
            scheduler=None if schedulers is None else schedulers("execution_control"),
            on_cycle=on_cycle,  # type: ignore[arg-type]  # a ControlReport is one of the two
            report=report,
        )
        self.scheduler: CadenceLifecycle[SchedulerReport] = CadenceLifecycle(
            "scheduler",
            LocalScheduler(self.store, self.tasks, self.launcher, self.budget, clock),
            cadence_config(self.budget.scheduler_cadence_ms, stop_timeout_ms=stop_timeout),
            scheduler=None if schedulers is None else schedulers("scheduler"),
            on_cycle=on_cycle,  # type: ignore[arg-type]
            report=report,
        )
        self.approvals: ApprovedActionRuntimeLifecycle | None = None
        if approvals:
            self.approvals = self._approval_lifecycle(schedulers, report)
        self.startup: StartupReport | None = None
        self._stop_lock = threading.Lock()
        self._stopped: ApplicationStopped | None = None
        self.steps: list[LocalStartStep] = []  # the O-1/O-4 steps performed, in order
        self.task_recovery: TaskRecoveryReport | None = None

    def _approval_lifecycle(
        self,
        schedulers: Callable[[str], Scheduler] | None,
        report: Callable[[LifecycleIncident], None] | None,
    ) -> ApprovedActionRuntimeLifecycle:
        """The one place the Approved Action lifecycle is built (AA-15): its modules are imported
        here, on the explicit opt-in, never when this module is."""
        from runners.approved_action.lifecycle import (  # noqa: PLC0415 - opt-in only (AA-15)
            LIFECYCLE_NAME,
            ApprovedActionRuntimeLifecycle,
        )
        from runners.local.approvals import EdgeApprovalPorts  # noqa: PLC0415 - opt-in only

        ports = EdgeApprovalPorts(self.store, self._clock)
        return ApprovedActionRuntimeLifecycle.for_profile(
            self.profile.value,
            ports,
            ports,
            scheduler=None if schedulers is None else schedulers(LIFECYCLE_NAME),
            report=report,
        )

    def __repr__(self) -> str:
        return f"LocalApplication(db={str(self.layout.db)!r}, profile={self.profile.value})"

    # -- O-1 -------------------------------------------------------------------------------------
    def start(self) -> StartupReport:
        """O-1, CAD-01.

        :raises StartupRecoveryExhausted: D-11 (nothing written, nothing started).
        """
        actions: dict[LocalStartStep, Callable[[], object]] = {
            LocalStartStep.STARTUP_RECOVERY: self._recover,
            LocalStartStep.FIRST_CONTROL_CYCLE: self.control.run_once,
            LocalStartStep.START_CONTROL: self.control.start,
            LocalStartStep.START_SCHEDULER: self.scheduler.start,
        }
        for step in LOCAL_START:
            actions[step]()
            self.steps.append(step)
        if self.approvals is not None:
            self.approvals.start()
        assert self.startup is not None
        return self.startup

    def _recover(self) -> None:
        assert self.budget.startup_recovery is not None
        self.startup = local_startup_recovery(
            self.store, self.launcher, self.budget.startup_recovery, self._clock, self.started_at_ms
        )
        # §4.5: the Workflow Task startup recovery, after the ordinary one (which selects no
        # Workflow, REC-07), with the same page size; it never finishes a parent Workflow.
        self.task_recovery = task_startup_recovery(
            self.store, self.launcher, self.budget.startup_recovery.page_size, self._clock
        )

    # -- O-4 -------------------------------------------------------------------------------------
    def stop(self) -> ApplicationStopped:
        """O-4, CAD-08: scheduler drain, execution-control drain, storage close; once."""
        with self._stop_lock:
            if self._stopped is not None:
                return self._stopped
            # The Approved Action lifecycle admits Runs: it stops before the others drain.
            approvals = None if self.approvals is None else self.approvals.stop()
            results: dict[LocalStartStep, StopResult] = {}
            actions: dict[LocalStartStep, Callable[[], StopResult | None]] = {
                LocalStartStep.DRAIN_SCHEDULER: self.scheduler.stop,
                LocalStartStep.DRAIN_CONTROL: self.control.stop,
                LocalStartStep.CLOSE_STORAGE: self._close,
            }
            for step in LOCAL_STOP:
                result = actions[step]()
                if result is not None:
                    results[step] = result
                self.steps.append(step)
            self._stopped = ApplicationStopped(
                results[LocalStartStep.DRAIN_SCHEDULER],
                results[LocalStartStep.DRAIN_CONTROL],
                approvals,
            )
            return self._stopped

    def _close(self) -> None:
        self.store.close()

    # -- until idle ------------------------------------------------------------------------------
    def idle(self) -> bool:
        """The kernel's `local_idle` over the Run counts, the due schedules, the launcher and,
        with approvals on, the approved actions due for dispatch or recovery."""
        due = len(self.tasks.due(self._clock(), _ANY_DUE))
        actions = 0
        if self.approvals is not None:
            for source in ActionSource:
                actions += len(self.store.action_page(source, None, 1).keys)
        return local_idle(run_status_counts(self.store), due, self.launcher.tracked, actions)
