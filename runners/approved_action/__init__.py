"""The Approved Action runtime supervisor and its lifecycle (SPEC §5, ADR-0036).

Default unreachable (§5.5, Appendix D-5, AA-15): no application, runner entry point or CLI
imports this package; a caller opts in explicitly.
"""

from __future__ import annotations

from runners.approved_action.lifecycle import LIFECYCLE_NAME, ApprovedActionRuntimeLifecycle
from runners.approved_action.supervisor import (
    ApprovedActionCycleFailed,
    ApprovedActionRuntimeSupervisor,
    DispatchPort,
    RecoveryPort,
)

__all__ = [
    "LIFECYCLE_NAME",
    "ApprovedActionCycleFailed",
    "ApprovedActionRuntimeLifecycle",
    "ApprovedActionRuntimeSupervisor",
    "DispatchPort",
    "RecoveryPort",
]
