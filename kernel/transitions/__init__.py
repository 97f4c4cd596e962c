"""Total transition functions `(aggregate, command, observed_at_ms) -> Outcome` (SPEC §0.3).

`TRANSITIONS` maps each command type to its one function; `apply` dispatches on the command's
type. Runners, the reference store and the models all go through these same objects (RUN-07).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from kernel.commands import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    ActivateLocal,
    AdmitRun,
    Command,
    CompleteLocal,
    CompleteWithLease,
    ConvergeCancel,
    CreateRun,
    ExpireWithLease,
    FailOrphanedCreated,
    FailStart,
    GrantLease,
    LostRetryStep,
    RecordLocalHandle,
    RecordLocalStop,
    RecoverLocalStartup,
    RecoverRuntime,
    RenewLease,
    RequestCancel,
)
from kernel.entities import RunAggregate
from kernel.outcomes import Outcome
from kernel.transitions.run_admission import admit_run, create_run
from kernel.transitions.run_cancellation import converge_cancel, request_cancel
from kernel.transitions.run_lease import (
    acknowledge_running,
    acknowledge_starting,
    complete_with_lease,
    expire_with_lease,
    fail_start,
    grant_lease,
    renew_lease,
)
from kernel.transitions.run_local import (
    activate_local,
    complete_local,
    record_local_handle,
    record_local_stop,
)
from kernel.transitions.run_lost_retry import lost_retry_step
from kernel.transitions.run_recovery import (
    fail_orphaned_created,
    recover_local_startup,
    recover_runtime,
)

Transition = Callable[[RunAggregate | None, Any, int], Outcome]

TRANSITIONS: Mapping[type, Transition] = MappingProxyType(
    {
        AdmitRun: admit_run,
        CreateRun: create_run,
        GrantLease: grant_lease,
        AcknowledgeStarting: acknowledge_starting,
        RenewLease: renew_lease,
        AcknowledgeRunning: acknowledge_running,
        FailStart: fail_start,
        CompleteWithLease: complete_with_lease,
        ExpireWithLease: expire_with_lease,
        RequestCancel: request_cancel,
        ConvergeCancel: converge_cancel,
        LostRetryStep: lost_retry_step,
        ActivateLocal: activate_local,
        RecordLocalHandle: record_local_handle,
        CompleteLocal: complete_local,
        RecordLocalStop: record_local_stop,
        RecoverLocalStartup: recover_local_startup,
        FailOrphanedCreated: fail_orphaned_created,
        RecoverRuntime: recover_runtime,
    }
)


def apply(aggregate: RunAggregate | None, command: Command, observed_at_ms: int) -> Outcome:
    """Run the one transition for `command`'s type."""
    return TRANSITIONS[type(command)](aggregate, command, observed_at_ms)


__all__ = [
    "TRANSITIONS",
    "Transition",
    "acknowledge_running",
    "acknowledge_starting",
    "activate_local",
    "admit_run",
    "apply",
    "complete_local",
    "complete_with_lease",
    "converge_cancel",
    "create_run",
    "expire_with_lease",
    "fail_orphaned_created",
    "fail_start",
    "grant_lease",
    "lost_retry_step",
    "record_local_handle",
    "record_local_stop",
    "recover_local_startup",
    "recover_runtime",
    "renew_lease",
    "request_cancel",
]
