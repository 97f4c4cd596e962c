"""The Run, Attempt and Run dispatch lease tables (SPEC §1.7-§1.9, §2, Appendix E-1;
ARCHITECTURE rule 2).

Each is a `Table` over a status enum and `CommandName`: for every `(status before, command)` row,
the statuses the entity may hold after an `Applied` outcome of that command. A missing pair is
never applied: the transition returns `Rejected`, `Replayed` or `Raced` and writes nothing
(RUN-05). The transaction builder (`kernel/transitions/transaction.py`) checks every change of
every `Applied` against them.
- Run table: every applied command on an existing Run is a row, even one that keeps its status.
- Attempt table: the latest Attempt before the command (the one every command addresses), with
  its status afterwards, changed or not.
- Lease table: only the lease rows a command changes (most commands leave leases alone).
The `None` source is creation: admission creates the Run and Attempt 1, a lost retry (R5) creates
Attempt N+1, a grant (T1) creates a lease. Read them like h11's `_state.py`: this is the whole
legal surface; the comments name the SPEC transition of a row.
"""

from __future__ import annotations

import enum
from typing import Final

from kernel.specs.states import AttemptStatus, LeaseStatus, RunStatus
from kernel.specs.table import Table

__all__ = ["ATTEMPT_TABLE", "LEASE_TABLE", "RUN_TABLE", "CommandName"]


class CommandName(enum.StrEnum):
    """The triggers of the Run-side tables: the `name` of every command (`kernel.commands`)."""

    ADMIT_RUN = "admit_run"
    CREATE_RUN = "create_run"
    GRANT_LEASE = "grant_lease"
    ACKNOWLEDGE_STARTING = "acknowledge_starting"
    RENEW_LEASE = "renew_lease"
    ACKNOWLEDGE_RUNNING = "acknowledge_running"
    FAIL_START = "fail_start"
    COMPLETE_WITH_LEASE = "complete_with_lease"
    EXPIRE_WITH_LEASE = "expire_with_lease"
    REQUEST_CANCEL = "request_cancel"
    CONVERGE_CANCEL = "converge_cancel"
    LOST_RETRY_STEP = "lost_retry_step"
    ACTIVATE_LOCAL = "activate_local"
    RECORD_LOCAL_HANDLE = "record_local_handle"
    COMPLETE_LOCAL = "complete_local"
    RECORD_LOCAL_STOP = "record_local_stop"
    RECOVER_LOCAL_STARTUP = "recover_local_startup"
    FAIL_ORPHANED_CREATED = "fail_orphaned_created"
    RECOVER_RUNTIME = "recover_runtime"


_RUN_OUTCOMES: Final = frozenset(
    {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT}
)
_RUN_OUTCOMES_OR_LOST: Final = _RUN_OUTCOMES | {RunStatus.LOST}
_RUN_CANCELLED: Final = frozenset({RunStatus.CANCELLED, RunStatus.TIMED_OUT})
#: T7 (back to `queued`), T8 (`lost`), T9 (the lease was renewed meanwhile: unchanged).
_RUN_EXPIRY: Final = frozenset({RunStatus.QUEUED, RunStatus.LOST, RunStatus.DISPATCHING})
_ATTEMPT_OUTCOMES: Final = frozenset(
    {
        AttemptStatus.SUCCEEDED,
        AttemptStatus.FAILED,
        AttemptStatus.CANCELLED,
        AttemptStatus.TIMED_OUT,
    }
)
_ATTEMPT_OUTCOMES_OR_LOST: Final = _ATTEMPT_OUTCOMES | {AttemptStatus.LOST}
_ATTEMPT_CANCELLED: Final = frozenset({AttemptStatus.CANCELLED, AttemptStatus.TIMED_OUT})

# fmt: off
RUN_TABLE: Final = Table.of("Run", RunStatus, CommandName, {
    None: {
        CommandName.ADMIT_RUN:              RunStatus.QUEUED,
        CommandName.CREATE_RUN:             RunStatus.CREATED,                             # B-07
    },
    RunStatus.CREATED: {
        CommandName.REQUEST_CANCEL:         RunStatus.CREATED,                             # §1.9
        CommandName.CONVERGE_CANCEL:        _RUN_CANCELLED,                                # §1.9
        CommandName.FAIL_ORPHANED_CREATED:  RunStatus.FAILED,                              # §2.2
    },
    RunStatus.QUEUED: {
        CommandName.GRANT_LEASE:            RunStatus.DISPATCHING,                         # T1
        CommandName.ACTIVATE_LOCAL:         RunStatus.DISPATCHING,                         # L1
        CommandName.REQUEST_CANCEL:         RunStatus.QUEUED,                              # §1.9
        CommandName.CONVERGE_CANCEL:        _RUN_CANCELLED,                                # §1.9
    },
    RunStatus.DISPATCHING: {
        CommandName.ACKNOWLEDGE_STARTING:   RunStatus.DISPATCHING,                         # T2
        CommandName.RENEW_LEASE:            RunStatus.DISPATCHING,                         # T3
        CommandName.ACKNOWLEDGE_RUNNING:    RunStatus.RUNNING,                             # T4
        CommandName.FAIL_START:             RunStatus.FAILED,                              # T5
        CommandName.COMPLETE_WITH_LEASE:    _RUN_OUTCOMES,                                 # T6
        CommandName.EXPIRE_WITH_LEASE:      _RUN_EXPIRY,                                   # T7-T9
        CommandName.RECORD_LOCAL_HANDLE:    RunStatus.RUNNING,                             # L2
        CommandName.COMPLETE_LOCAL:         _RUN_OUTCOMES,                                 # L3
        CommandName.REQUEST_CANCEL:         RunStatus.DISPATCHING,                         # §1.9
        CommandName.CONVERGE_CANCEL:        _RUN_CANCELLED,                                # §1.9
        CommandName.RECOVER_LOCAL_STARTUP:  _RUN_OUTCOMES_OR_LOST,                         # §2.2
        CommandName.RECOVER_RUNTIME:        _RUN_OUTCOMES_OR_LOST | {RunStatus.QUEUED},    # §2.3
    },
    RunStatus.RUNNING: {
        CommandName.RENEW_LEASE:            RunStatus.RUNNING,                             # T3
        CommandName.COMPLETE_WITH_LEASE:    _RUN_OUTCOMES,                                 # T6
        CommandName.EXPIRE_WITH_LEASE:      {RunStatus.LOST, RunStatus.RUNNING},           # T8 T9
        CommandName.COMPLETE_LOCAL:         _RUN_OUTCOMES,                                 # L3
        CommandName.RECORD_LOCAL_STOP:      _RUN_CANCELLED,                                # L4 L5
        CommandName.REQUEST_CANCEL:         RunStatus.RUNNING,                             # §1.9
        CommandName.CONVERGE_CANCEL:        _RUN_CANCELLED,                                # E-1
        CommandName.RECOVER_LOCAL_STARTUP:  _RUN_OUTCOMES_OR_LOST,                         # §2.2
        CommandName.RECOVER_RUNTIME:        _RUN_OUTCOMES_OR_LOST,                         # §2.3
    },
    RunStatus.LOST: {
        CommandName.LOST_RETRY_STEP:        {RunStatus.RETRY_WAIT, RunStatus.FAILED},      # R1-R4
        CommandName.REQUEST_CANCEL:         RunStatus.LOST,                                # §1.9
        CommandName.CONVERGE_CANCEL:        _RUN_CANCELLED,                                # §1.9
    },
    RunStatus.RETRY_WAIT: {  # R1-R3 fail the waiting Run, R5 queues it again
        CommandName.LOST_RETRY_STEP:        {RunStatus.QUEUED, RunStatus.FAILED},
        CommandName.REQUEST_CANCEL:         RunStatus.RETRY_WAIT,                          # §1.9
        CommandName.CONVERGE_CANCEL:        _RUN_CANCELLED,                                # §1.9
    },
    RunStatus.SUCCEEDED: {},
    RunStatus.FAILED: {},
    RunStatus.CANCELLED: {},
    RunStatus.TIMED_OUT: {},
})

ATTEMPT_TABLE: Final = Table.of("Attempt", AttemptStatus, CommandName, {
    None: {
        CommandName.ADMIT_RUN:              AttemptStatus.CLAIMED,
        CommandName.LOST_RETRY_STEP:        AttemptStatus.CLAIMED,                         # R5
    },
    AttemptStatus.CLAIMED: {
        CommandName.GRANT_LEASE:            AttemptStatus.CLAIMED,                         # T1
        CommandName.ACKNOWLEDGE_STARTING:   AttemptStatus.STARTING,                        # T2
        CommandName.EXPIRE_WITH_LEASE:      AttemptStatus.CLAIMED,                         # T7
        CommandName.ACTIVATE_LOCAL:         AttemptStatus.STARTING,                        # L1
        CommandName.REQUEST_CANCEL:         AttemptStatus.CLAIMED,                         # §1.9
        CommandName.CONVERGE_CANCEL:        _ATTEMPT_CANCELLED,                            # §1.9
        CommandName.RECOVER_RUNTIME:        AttemptStatus.CLAIMED,                         # as T7
    },
    AttemptStatus.STARTING: {
        CommandName.RENEW_LEASE:            AttemptStatus.STARTING,                        # T3
        CommandName.ACKNOWLEDGE_RUNNING:    AttemptStatus.RUNNING,                         # T4
        CommandName.FAIL_START:             AttemptStatus.FAILED,                          # T5
        CommandName.COMPLETE_WITH_LEASE:    _ATTEMPT_OUTCOMES,                             # T6
        CommandName.EXPIRE_WITH_LEASE:      {AttemptStatus.LOST, AttemptStatus.STARTING},  # T8 T9
        CommandName.RECORD_LOCAL_HANDLE:    AttemptStatus.RUNNING,                         # L2
        CommandName.COMPLETE_LOCAL:         _ATTEMPT_OUTCOMES,                             # L3
        CommandName.REQUEST_CANCEL:         AttemptStatus.STARTING,                        # §1.9
        CommandName.CONVERGE_CANCEL:        _ATTEMPT_CANCELLED,                            # E-1
        CommandName.RECOVER_LOCAL_STARTUP:  _ATTEMPT_OUTCOMES_OR_LOST,                     # §2.2
        CommandName.RECOVER_RUNTIME:        _ATTEMPT_OUTCOMES_OR_LOST,                     # §2.3
    },
    AttemptStatus.RUNNING: {
        CommandName.RENEW_LEASE:            AttemptStatus.RUNNING,                         # T3
        CommandName.COMPLETE_WITH_LEASE:    _ATTEMPT_OUTCOMES,                             # T6
        CommandName.EXPIRE_WITH_LEASE:      {AttemptStatus.LOST, AttemptStatus.RUNNING},   # T8 T9
        CommandName.COMPLETE_LOCAL:         _ATTEMPT_OUTCOMES,                             # L3
        CommandName.RECORD_LOCAL_STOP:      _ATTEMPT_CANCELLED,                            # L4 L5
        CommandName.REQUEST_CANCEL:         AttemptStatus.RUNNING,                         # §1.9
        CommandName.CONVERGE_CANCEL:        _ATTEMPT_CANCELLED,                            # E-1
        CommandName.RECOVER_LOCAL_STARTUP:  _ATTEMPT_OUTCOMES_OR_LOST,                     # §2.2
        CommandName.RECOVER_RUNTIME:        _ATTEMPT_OUTCOMES_OR_LOST,                     # §2.3
    },
    AttemptStatus.LOST: {
        CommandName.LOST_RETRY_STEP:        AttemptStatus.LOST,                            # R1-R5
        CommandName.REQUEST_CANCEL:         AttemptStatus.LOST,                            # §1.9
        CommandName.CONVERGE_CANCEL:        AttemptStatus.LOST,                            # §1.9
    },
    AttemptStatus.SUCCEEDED: {},
    AttemptStatus.FAILED: {},
    AttemptStatus.CANCELLED: {},
    AttemptStatus.TIMED_OUT: {},
})

LEASE_TABLE: Final = Table.of("Run dispatch lease", LeaseStatus, CommandName, {
    None: {
        CommandName.GRANT_LEASE:            LeaseStatus.LEASED,                            # T1, V-2
    },
    LeaseStatus.LEASED: {
        CommandName.ACKNOWLEDGE_STARTING:   LeaseStatus.LEASED,                            # T2
        CommandName.RENEW_LEASE:            LeaseStatus.LEASED,                            # T3
        CommandName.ACKNOWLEDGE_RUNNING:    LeaseStatus.LEASED,                            # T4
        CommandName.FAIL_START:             LeaseStatus.RELEASED,                          # T5
        CommandName.COMPLETE_WITH_LEASE:    LeaseStatus.COMPLETED,                         # T6
        CommandName.EXPIRE_WITH_LEASE:      LeaseStatus.RELEASED,                          # T7-T9
        CommandName.CONVERGE_CANCEL:        LeaseStatus.RELEASED,                          # §1.9
        CommandName.RECOVER_RUNTIME:        LeaseStatus.RELEASED,                          # §2.4
    },
    LeaseStatus.COMPLETED: {},
    LeaseStatus.RELEASED: {},
})
# fmt: on
