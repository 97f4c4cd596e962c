"""The approval domain behind the Approved Action ports (SPEC §5.1, ADR-0036; issue 19, decision
AA-D1) as data: action statuses, commands, and the one table every action change is checked
against.

ADR-0036 takes the Approved Action domain (ADR-0032/0033) as given; this is the smallest honest
one the two ports need. A person's request to run a task that requires approval is an *action*:

- `request_approval` creates it `pending`, holding the exact Run admission it will make;
- a person approves (`approved`, due for dispatch) or denies it (`denied`, never runs);
- the dispatcher claims it: `approved -> starting` is the durable start barrier, committed before
  anything starts (the `launching` rule: what passed the barrier is never started again blindly);
- the dispatcher's start admits the Run and ends the action `started`, in one transaction;
- the recovery reconciler resolves an action left `starting` from evidence only, the Run's
  facts: the Run is there (`started`), it is not (`failed`, `START_INTERRUPTED`: the admission and
  the end of the barrier commit together, so no Run means it never started), or another Run holds
  its id (`manual_required`). It never starts anything.

Read the table like h11's `_state.py`.
"""

from __future__ import annotations

import enum
from typing import Final

from kernel.specs.table import Table

__all__ = [
    "ACTION_TABLE",
    "FINAL_ACTION_STATUSES",
    "ActionCommandName",
    "ActionEventType",
    "ActionStatus",
]


class ActionStatus(enum.StrEnum):
    """An approval request's status (decision AA-D1)."""

    PENDING = "pending"  # waiting for a person's decision
    APPROVED = "approved"  # due for dispatch
    DENIED = "denied"  # never runs
    STARTING = "starting"  # the start barrier: claimed, Run not yet known to be admitted
    STARTED = "started"  # its Run was admitted (exactly once)
    FAILED = "failed"  # left behind the barrier, never started (START_INTERRUPTED)
    MANUAL_REQUIRED = "manual_required"  # the evidence contradicts the action: a person decides

    @property
    def final(self) -> bool:
        return self in FINAL_ACTION_STATUSES


FINAL_ACTION_STATUSES: Final = frozenset(
    {
        ActionStatus.DENIED,
        ActionStatus.STARTED,
        ActionStatus.FAILED,
        ActionStatus.MANUAL_REQUIRED,
    }
)


class ActionCommandName(enum.StrEnum):
    """The commands of the approval domain (the table's triggers)."""

    REQUEST_APPROVAL = "request_approval"
    APPROVE_ACTION = "approve_action"
    DENY_ACTION = "deny_action"
    CLAIM_ACTION = "claim_action"
    START_ACTION = "start_action"
    RESOLVE_ACTION = "resolve_action"


class ActionEventType(enum.StrEnum):
    """An action's Events: who did what, when (issue 19: who and when are recorded)."""

    REQUESTED = "action.requested"
    APPROVED = "action.approved"
    DENIED = "action.denied"
    CLAIMED = "action.claimed"
    STARTED = "action.started"
    FAILED = "action.failed"
    MANUAL_REQUIRED = "action.manual_required"


_S = ActionStatus
_C = ActionCommandName

# fmt: off
ACTION_TABLE: Final = Table.of("approved_action", ActionStatus, ActionCommandName, {
    None: {
        _C.REQUEST_APPROVAL: _S.PENDING,
    },
    _S.PENDING: {
        _C.APPROVE_ACTION:   _S.APPROVED,
        _C.DENY_ACTION:      _S.DENIED,
    },
    _S.APPROVED: {
        _C.CLAIM_ACTION:     _S.STARTING,                 # the durable start barrier
    },
    _S.STARTING: {
        # the dispatcher: admits the Run (or finds it), or meets another Run under its id
        _C.START_ACTION:     {_S.STARTED, _S.MANUAL_REQUIRED},
        # the reconciler, from the Run's facts only; it never starts
        _C.RESOLVE_ACTION:   {_S.STARTED, _S.FAILED, _S.MANUAL_REQUIRED},
    },
    _S.DENIED:          {},
    _S.STARTED:         {},
    _S.FAILED:          {},
    _S.MANUAL_REQUIRED: {},
})
# fmt: on
