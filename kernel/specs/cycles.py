"""Fixed phase orders of the lifecycles, as data (SPEC §6.2).

O-5, the cluster scheduler cycle (ADR-0232 §4): runtime recovery, lost retry, the ordinary
trigger schedule, the Workflow frontier, Workflow Task Attempt admission, in this order, on one
cadence; phase 5 ends with the dispatch step that grants leases (T1, issue 17). A failure in a
*gating* phase (recovery or lost retry) ends the cycle before anything is scheduled or
dispatched: no new work is dispatched while execution authority is uncertain, and the next
cadence tries again (CAD-06, REC-13).

O-1..O-4, the local application (ADR-0380 §3, ADR-0229 §1, §6): the start and stop sequences and
the steps of the execution-control and scheduler cycles, with the rule that picks a cycle's
steps (`local_control_phases`: no lost retry while draining, cleanup on slow cycles only).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final


class ClusterPhase(enum.StrEnum):
    RUNTIME_RECOVERY = "runtime_recovery"
    LOST_RETRY = "lost_retry"
    TRIGGER_SCHEDULE = "trigger_schedule"
    WORKFLOW_FRONTIER = "workflow_frontier"
    TASK_ADMISSION = "task_admission"


#: O-5: the order every cluster cycle calls its phases in.
CLUSTER_CYCLE: Final[tuple[ClusterPhase, ...]] = (
    ClusterPhase.RUNTIME_RECOVERY,
    ClusterPhase.LOST_RETRY,
    ClusterPhase.TRIGGER_SCHEDULE,
    ClusterPhase.WORKFLOW_FRONTIER,
    ClusterPhase.TASK_ADMISSION,
)

#: O-5: phases whose failure ends the cycle before the scheduling phases.
CLUSTER_GATING: Final[frozenset[ClusterPhase]] = frozenset(
    {ClusterPhase.RUNTIME_RECOVERY, ClusterPhase.LOST_RETRY}
)


class ClusterStep(enum.StrEnum):
    """The steps the O-5 phases are made of: one per phase, but phase 3 runs cancellation
    convergence (D-6) before its trigger schedule, and phase 5 ends with dispatch (T1)."""

    RUNTIME_RECOVERY = "runtime_recovery"
    LOST_RETRY = "lost_retry"
    CANCELLATION_CONVERGENCE = "cancellation_convergence"  # D-6, §1.9, E-1 on cluster
    TRIGGER_SCHEDULE = "trigger_schedule"
    WORKFLOW_FRONTIER = "workflow_frontier"
    TASK_ADMISSION = "task_admission"
    DISPATCH = "dispatch"  # T1 lease grants to online Workers, bounded per cycle (issue 17)


#: O-5 with D-6: the steps of each phase, in order. Cancellation convergence comes after lost
#: retry (a `lost` Run with an intent is never retried, RETRY-12, so the page that follows ends
#: it) and before the trigger schedule, inside phase 3 (§1.9), so it is not gating: a failure
#: there ends the cycle like any phase-3 failure, after recovery and lost retry have run.
#: [decision] Dispatch (T1 grants, issue 17) is the last step of phase 5, not a sixth phase: O-5
#: names five phases and dispatch finishes admission (what phases 3-5 admitted, and what lost
#: retry requeued, is granted to Workers). Like every scheduling step it never runs after a
#: gating failure, nor after a failure of any earlier step of the same cycle.
CLUSTER_PHASE_STEPS: Final[Mapping[ClusterPhase, tuple[ClusterStep, ...]]] = MappingProxyType(
    {
        ClusterPhase.RUNTIME_RECOVERY: (ClusterStep.RUNTIME_RECOVERY,),
        ClusterPhase.LOST_RETRY: (ClusterStep.LOST_RETRY,),
        ClusterPhase.TRIGGER_SCHEDULE: (
            ClusterStep.CANCELLATION_CONVERGENCE,
            ClusterStep.TRIGGER_SCHEDULE,
        ),
        ClusterPhase.WORKFLOW_FRONTIER: (ClusterStep.WORKFLOW_FRONTIER,),
        ClusterPhase.TASK_ADMISSION: (ClusterStep.TASK_ADMISSION, ClusterStep.DISPATCH),
    }
)


def cluster_cycle_steps() -> tuple[tuple[ClusterPhase, ClusterStep], ...]:
    """Every step of one O-5 cycle with the phase it belongs to, in call order (read from
    `CLUSTER_CYCLE` and `CLUSTER_PHASE_STEPS` at each call, so the tables alone decide)."""
    return tuple((phase, step) for phase in CLUSTER_CYCLE for step in CLUSTER_PHASE_STEPS[phase])


class LocalControlPhase(enum.StrEnum):
    """The steps of a local execution-control cycle (O-2, ADR-0380 §3)."""

    COMPLETIONS = "completions"  # (1) consume in-memory completion notifications (L3)
    CANCELLATION = "cancellation"  # (2) cancellation and deadline control (L4/L5, §1.9, E-1)
    LOST_RETRY = "lost_retry"  # (3) one lost-retry page
    CLEANUP = "cleanup"  # (4) on slow cycles only: receipt and log cleanup (D-1, CAD-15)


#: O-2: the order every local execution-control cycle calls its steps in (CAD-02).
LOCAL_CONTROL_CYCLE: Final[tuple[LocalControlPhase, ...]] = (
    LocalControlPhase.COMPLETIONS,
    LocalControlPhase.CANCELLATION,
    LocalControlPhase.LOST_RETRY,
    LocalControlPhase.CLEANUP,
)

#: O-2, CAD-05: a stop drain never creates retry work.
LOCAL_CONTROL_SKIPPED_WHILE_DRAINING: Final = frozenset({LocalControlPhase.LOST_RETRY})

#: O-2 step 4: only every `SlowCleanupBudget.every_nth_cycle`-th cycle.
LOCAL_CONTROL_SLOW_ONLY: Final = frozenset({LocalControlPhase.CLEANUP})


def local_control_phases(
    ordinal: int, *, draining: bool, every_nth_cycle: int
) -> tuple[LocalControlPhase, ...]:
    """The steps cycle `ordinal` (1, 2, ...) runs, in O-2 order: the lost-retry page is skipped
    while a stop drains (CAD-05) and cleanup runs only on slow cycles (every `every_nth_cycle`-th,
    D-1)."""
    slow = ordinal % every_nth_cycle == 0
    return tuple(
        phase
        for phase in LOCAL_CONTROL_CYCLE
        if not (draining and phase in LOCAL_CONTROL_SKIPPED_WHILE_DRAINING)
        and (slow or phase not in LOCAL_CONTROL_SLOW_ONLY)
    )


class LocalSchedulerPhase(enum.StrEnum):
    """The phases of a local scheduler cycle (O-3, ADR-0229 §1)."""

    CANCELLATION_CONVERGENCE = "cancellation_convergence"  # Workflow Runs (ADR-0229): empty slot
    TRIGGER_SCHEDULE = "trigger_schedule"
    WORKFLOW_FRONTIER = "workflow_frontier"  # the Workflow issue fills it
    TASK_ADMISSION = "task_admission"  # the Workflow issue fills it
    DISPATCH = "dispatch"


#: O-3: the order every local scheduler cycle calls its phases in.
LOCAL_SCHEDULER_CYCLE: Final[tuple[LocalSchedulerPhase, ...]] = (
    LocalSchedulerPhase.CANCELLATION_CONVERGENCE,
    LocalSchedulerPhase.TRIGGER_SCHEDULE,
    LocalSchedulerPhase.WORKFLOW_FRONTIER,
    LocalSchedulerPhase.TASK_ADMISSION,
    LocalSchedulerPhase.DISPATCH,
)


class LocalStartStep(enum.StrEnum):
    """O-1 (CAD-01) and O-4 (CAD-08): the local application's start and stop sequences."""

    STARTUP_RECOVERY = "startup_recovery"
    FIRST_CONTROL_CYCLE = "first_control_cycle"
    START_CONTROL = "start_control"
    START_SCHEDULER = "start_scheduler"
    DRAIN_SCHEDULER = "drain_scheduler"
    DRAIN_CONTROL = "drain_control"
    CLOSE_STORAGE = "close_storage"


#: O-1: startup recovery completes, then the first execution-control cycle runs, then the
#: lifecycles start (the scheduler last, so its first cycle comes after that first cycle).
LOCAL_START: Final[tuple[LocalStartStep, ...]] = (
    LocalStartStep.STARTUP_RECOVERY,
    LocalStartStep.FIRST_CONTROL_CYCLE,
    LocalStartStep.START_CONTROL,
    LocalStartStep.START_SCHEDULER,
)

#: O-4: scheduler drain, then execution-control drain, then storage close.
LOCAL_STOP: Final[tuple[LocalStartStep, ...]] = (
    LocalStartStep.DRAIN_SCHEDULER,
    LocalStartStep.DRAIN_CONTROL,
    LocalStartStep.CLOSE_STORAGE,
)
