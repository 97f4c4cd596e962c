"""The Worker execution offer inbox lifecycle as data (SPEC §3.10, ADR-0021 §5; INBOX-28).

Read it like h11's `_state.py`: `INBOX_TABLE` (a `Table`) is the whole legal surface of
`WorkerExecutionOfferInboxLifecycle` (runner side, `runners/worker/inbox_lifecycle.py`); the
runner consults it before every state change and refuses any pair that is not listed, so the
lifecycle can only ever walk these edges.

Order (§3.10): acquire, audit, optional bounded recovery (§3.13), re-audit, hold. Recovery is
reachable only from the first audit (it runs at most once per start), and `holding` only from a
complete audit or re-audit. Every failure edge after `acquiring` ends in `refused`, and the runner
takes it only after ownership was released (release first, then refuse). `stopped` and `refused`
are terminal: the lifecycle is single-use [decision IL-2].

`RECOVERY_CLASSES` says which audit classes make an injected recovery run [decision §3.10]:
exactly those for which the supervisor plans an action (§3.13).
"""

from __future__ import annotations

import enum
from typing import Final

from kernel.specs.journal import AuditClass
from kernel.specs.table import Table

__all__ = [
    "ACCEPTS_DELIVERIES",
    "HOLDS_OWNERSHIP",
    "INBOX_TABLE",
    "RECOVERY_CLASSES",
    "TERMINAL_INBOX_STATES",
    "InboxCode",
    "InboxState",
    "InboxTrigger",
    "next_inbox_state",
]


class InboxState(enum.StrEnum):
    """§3.10 [decision: names]."""

    INERT = "inert"
    ACQUIRING = "acquiring"
    AUDITING = "auditing"
    RECOVERING = "recovering"
    REAUDITING = "reauditing"
    HOLDING = "holding"
    STOPPING = "stopping"
    STOPPED = "stopped"
    REFUSED = "refused"


class InboxTrigger(enum.StrEnum):
    """What moved the lifecycle."""

    START = "start"  # start() on an inert lifecycle
    ACQUIRED = "acquired"  # journal ownership taken (W-2)
    ACQUIRE_FAILED = "acquire_failed"  # nothing was taken, so nothing to release
    RECOVERY_NEEDED = "recovery_needed"  # complete audit, recovery injected, entries need it
    AUDIT_COMPLETE = "audit_complete"  # complete audit (ready / reconciliation_required): hold
    RECOVERED = "recovered"  # the bounded recovery batch ran without refusing
    REFUSED = "refused"  # budget, corruption, audit or recovery failure; ownership released
    STOP = "stop"  # stop()
    RELEASED = "released"  # ownership release attempted during stop (W-7)


class InboxCode(enum.StrEnum):
    """Refusal codes the lifecycle adds to the audit's and the journal's own codes (S-1: a
    fixed word, never an exception text) [decision IL-4]."""

    ACQUIRE_FAILED = "INBOX_ACQUIRE_FAILED"  # acquire() raised something not a JournalError
    AUDIT_FAILED = "INBOX_AUDIT_FAILED"  # the auditor raised (§3.10 "any audit exception")
    RECOVERY_FAILED = "INBOX_RECOVERY_FAILED"  # the injected recovery raised
    RELEASE_FAILED = "INBOX_RELEASE_FAILED"  # release() raised something not a JournalError


# fmt: off
INBOX_TABLE: Final = Table.of("Inbox lifecycle", InboxState, InboxTrigger, {
    InboxState.INERT: {
        InboxTrigger.START:            InboxState.ACQUIRING,
        InboxTrigger.STOP:             InboxState.STOPPED,     # stopped before it ever started
    },
    InboxState.ACQUIRING: {
        InboxTrigger.ACQUIRED:         InboxState.AUDITING,
        InboxTrigger.ACQUIRE_FAILED:   InboxState.REFUSED,     # nothing taken, nothing released
    },
    InboxState.AUDITING: {
        InboxTrigger.RECOVERY_NEEDED:  InboxState.RECOVERING,
        InboxTrigger.AUDIT_COMPLETE:   InboxState.HOLDING,
        InboxTrigger.REFUSED:          InboxState.REFUSED,
    },
    InboxState.RECOVERING: {
        InboxTrigger.RECOVERED:        InboxState.REAUDITING,
        InboxTrigger.REFUSED:          InboxState.REFUSED,
    },
    InboxState.REAUDITING: {
        InboxTrigger.AUDIT_COMPLETE:   InboxState.HOLDING,
        InboxTrigger.REFUSED:          InboxState.REFUSED,
    },
    InboxState.HOLDING: {
        InboxTrigger.STOP:             InboxState.STOPPING,
    },
    InboxState.STOPPING: {
        InboxTrigger.RELEASED:         InboxState.STOPPED,
    },
    InboxState.STOPPED: {},
    InboxState.REFUSED: {},
})
# fmt: on

#: No edge leaves these: the lifecycle is single-use [decision IL-2].
TERMINAL_INBOX_STATES: Final = frozenset({InboxState.STOPPED, InboxState.REFUSED})

#: §3.10: the transport delivers offers only once startup is complete and the lifecycle holds the
#: journal (the Worker runtime refuses a delivery in any other state, `JOURNAL_NOT_OWNED`).
ACCEPTS_DELIVERIES: Final = frozenset({InboxState.HOLDING})

#: The states in which this lifecycle holds the journal ownership (acquired, not yet released).
HOLDS_OWNERSHIP: Final = frozenset(
    {
        InboxState.AUDITING,
        InboxState.RECOVERING,
        InboxState.REAUDITING,
        InboxState.HOLDING,
        InboxState.STOPPING,
    }
)

#: §3.10 [decision]: an injected recovery runs when the audit has any entry of these classes.
RECOVERY_CLASSES: Final = frozenset(
    {
        AuditClass.SETTLED_COMPLETION,
        AuditClass.LAUNCH_RECONCILIATION,
        AuditClass.EXECUTION_RECONCILIATION,
    }
)


def next_inbox_state(state: InboxState, trigger: InboxTrigger) -> InboxState | None:
    """The state after `trigger` in `state`, or None when the pair is missing (total)."""
    return INBOX_TABLE.successor(state, trigger)
