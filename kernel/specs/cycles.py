"""Fixed phase orders of the lifecycles, as data (SPEC §6.2).

O-5, the cluster scheduler cycle (ADR-0232 §4): runtime recovery, lost retry, the ordinary
trigger schedule, the Workflow frontier, Workflow Task Attempt admission, in this order, on one
cadence. A failure in a *gating* phase (recovery or lost retry) ends the cycle before anything
is scheduled: no new work is dispatched while execution authority is uncertain, and the next
cadence tries again (CAD-06, REC-13).
"""

from __future__ import annotations

import enum
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
