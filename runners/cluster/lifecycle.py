"""The cluster scheduler lifecycle (SPEC §6.1 `ClusterSchedulerLifecycle`, §6.2 O-5; issue 17
item 1; CAD-06, CAD-07, L-1..L-9).

Two parts, each with one job:
- `ClusterScheduler` gives the O-5 coordinator (`runners.cluster.cycle.cluster_cycle`) its
  scheduling steps: the trigger schedule (`runners.task_schedule.schedule_phase` over the cluster
  task store, at the database's time, ADR-0232 §1, within the cluster budget's
  `cluster_trigger_schedule`), the Workflow frontier and Task Attempt admission (ordered, empty
  slots: no Workflow Runs exist before the Workflow issue, as on local), and the dispatch step
  it is handed (T1 grants; the bootstrap's caller supplies it).
- `ClusterSchedulerLifecycle` is a `CadenceLifecycle` that calls `ClusterCycle.run_once()` at
  the cluster budget's `cluster_scheduler_cadence_ms` (1 s, B-71), first at start (initial
  delay 0), and stops within `lifecycle_stop_timeout_ms` (L-6).

Several replicas may run this on one database at once: every write the steps make is guarded by
row locks, the Attempt advisory lock or a compare-and-set, and a fire's Run id is deterministic
(TK-6), so no replica needs to lead (ADR-0232 §2).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from kernel import UnknownEvidence
from kernel.specs import Paging, Profile, ProfileBudget, UnknownReason, budget_for, cadence_config
from runners.cluster.cycle import ClusterCycle, CycleResult, Step, cluster_cycle
from runners.cluster.runtime import ClusterRuntime
from runners.cluster.tasks import ClusterTaskStore
from runners.lifecycle import CadenceLifecycle, CycleReport, LifecycleIncident, Scheduler
from runners.passes import EvidencePort
from runners.task_schedule import SchedulePhaseReport, schedule_phase
from runners.workflow_phases import WorkflowPhaseReport, frontier_phase, task_admission_phase

__all__ = [
    "LIFECYCLE_NAME",
    "ClusterScheduler",
    "ClusterSchedulerLifecycle",
    "new_attempt_id",
    "no_dispatch",
    "unknown_evidence",
]

#: The lifecycle's name in reports and incidents.
LIFECYCLE_NAME = "cluster_scheduler"


def new_attempt_id(_run_id: str) -> str:
    """A fresh portable Attempt id for a lost-retry requeue (ids are inputs to the kernel)."""
    return f"att-{secrets.token_hex(16)}"


def unknown_evidence(_candidate: object) -> UnknownEvidence:
    """The evidence port of a bootstrap given none: `unknown` for every candidate, so runtime
    recovery writes nothing for a started Attempt (§2.3: a lease timeout alone never produces
    `lost`, ADR-0232 §1). The Worker registry's evidence replaces it."""
    return UnknownEvidence(UnknownReason.UNSUPPORTED)


def no_dispatch() -> None:
    """The dispatch step of a bootstrap given none: grants nothing (the dispatcher replaces it)."""


class ClusterScheduler:
    """The scheduling steps of one replica's O-5 cycle, and the cycle built from them."""

    def __init__(
        self,
        runtime: ClusterRuntime,
        tasks: ClusterTaskStore,
        budget: ProfileBudget | None = None,
        *,
        evidence: EvidencePort = unknown_evidence,
        dispatch: Step = no_dispatch,
        attempt_ids: Callable[[str], str] = new_attempt_id,
    ) -> None:
        budget = budget_for(Profile.CLUSTER) if budget is None else budget
        assert budget.cluster_trigger_schedule is not None, "the cluster profile"
        assert budget.cluster_runtime_recovery_page_size is not None, "the cluster profile"
        self._runtime = runtime
        self._tasks = tasks
        self._trigger: Paging = budget.cluster_trigger_schedule
        assert budget.cluster_workflow_frontier is not None, "the cluster profile"
        assert budget.cluster_task_admission is not None, "the cluster profile"
        self._frontier: Paging = budget.cluster_workflow_frontier
        self._admission: Paging = budget.cluster_task_admission
        self.cycle: ClusterCycle = cluster_cycle(
            runtime,
            evidence=evidence,
            new_attempt_id=attempt_ids,
            trigger_schedule=self.trigger_schedule,
            workflow_frontier=self.workflow_frontier,
            task_admission=self.task_admission,
            dispatch=dispatch,
            page_limit=budget.cluster_runtime_recovery_page_size,
            convergence_limit=budget.cluster_cancellation_convergence_page_size,
        )

    def __repr__(self) -> str:
        return f"ClusterScheduler(trigger={self._trigger})"

    def workflow_frontier(self) -> WorkflowPhaseReport:
        """O-5 phase 4 (§4.4, WF-8 budget): the frontier of each due Workflow."""
        return frontier_phase(self._runtime.store, self._frontier, self._runtime.now_ms)

    def task_admission(self) -> WorkflowPhaseReport:
        """O-5 phase 5's Task admission (§4.3, WF-8 budget), before the dispatch step."""
        return task_admission_phase(self._runtime.store, self._admission, self._runtime.now_ms)

    def trigger_schedule(self) -> SchedulePhaseReport:
        """O-5 phase 3's trigger schedule: one budgeted pass at one database time (P-5)."""
        return schedule_phase(
            self._runtime.store, self._tasks, self._runtime.now_ms(), self._trigger
        )


class ClusterSchedulerLifecycle(CadenceLifecycle[CycleResult]):
    """`ClusterCycle.run_once()` on the cluster scheduler's cadence (module docstring). A cycle
    whose step failed is a `CycleSucceeded` whose value names the failed step and its code (the
    coordinator ends the cycle closed and the next cadence tries again); a cycle that raises
    is a `CycleFailed` (L-8)."""

    def __init__(
        self,
        cycle: ClusterCycle,
        budget: ProfileBudget | None = None,
        *,
        scheduler: Scheduler | None = None,
        on_cycle: Callable[[CycleReport[CycleResult]], None] | None = None,
        report: Callable[[LifecycleIncident], None] | None = None,
    ) -> None:
        budget = budget_for(Profile.CLUSTER) if budget is None else budget
        assert budget.cluster_scheduler_cadence_ms is not None, "the cluster profile"
        self.coordinator = cycle
        super().__init__(
            LIFECYCLE_NAME,
            lambda _context: cycle.run_once(),
            cadence_config(
                budget.cluster_scheduler_cadence_ms,
                stop_timeout_ms=budget.lifecycle_stop_timeout_ms,
            ),
            scheduler=scheduler,
            on_cycle=on_cycle,
            report=report,
        )
