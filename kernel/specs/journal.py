"""The Worker execution offer journal as data (SPEC §3.3, §3.4, §3.6, §3.7, §3.10 U-4).

Read it like h11's `_state.py`: `JOURNAL_TABLE` is the whole legal surface of the journal state
machine (§3.6; `TRIGGER_REASONS` the recovery reasons its rows write), `REPLAY` says what a
redelivery or a restart does in each state (§3.7), `AUDIT_CLASSIFICATION` is the startup
auditor's table (U-4), and `FIELD_RULES` are the record's field-presence rules (§3.3), which every
durable revision satisfies (I-J4, INBOX-02).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from kernel.specs.codes import Code
from kernel.specs.table import Table

#: §3.3: the record schema this kernel writes.
JOURNAL_SCHEMA_VERSION: Final = 1


class JournalState(enum.StrEnum):
    """§3.4, in pipeline order."""

    ACCEPTED = "accepted"
    STARTING_ACKNOWLEDGED = "starting_acknowledged"
    LAUNCHING = "launching"
    STARTED = "started"
    RUNNING_ACKNOWLEDGED = "running_acknowledged"
    START_FAILED = "start_failed"
    START_FAILURE_ACKNOWLEDGED = "start_failure_acknowledged"
    COMPLETION_ACKNOWLEDGED = "completion_acknowledged"
    RECOVERY_REQUIRED = "recovery_required"


#: §3.4: final states change only by deletion (retention, §3.14).
FINAL_STATES: Final = frozenset(
    {JournalState.START_FAILURE_ACKNOWLEDGED, JournalState.COMPLETION_ACKNOWLEDGED}
)


class RecoveryReason(enum.StrEnum):
    """§3.3: `recovery_reason`, only and always in `recovery_required`."""

    LAUNCH_OUTCOME_UNKNOWN = "launch_outcome_unknown"
    CONTROL_PLANE_ALREADY_RUNNING = "control_plane_already_running"
    CONTROL_PLANE_TERMINAL = "control_plane_terminal"
    LEASE_LOST_LOCAL_EXECUTION_STOPPED = "lease_lost_local_execution_stopped"
    LEASE_LOST_LOCAL_EXECUTION_UNVERIFIED = "lease_lost_local_execution_unverified"


#: §3.15: the lease-loss reasons; a record carrying one is never overwritten by another.
LEASE_LOST_REASONS: Final = frozenset(
    {
        RecoveryReason.LEASE_LOST_LOCAL_EXECUTION_STOPPED,
        RecoveryReason.LEASE_LOST_LOCAL_EXECUTION_UNVERIFIED,
    }
)


class DeliveryKind(enum.StrEnum):
    """§3.2."""

    NEW_CLAIM = "new_claim"
    LEASE_RECOVERY = "lease_recovery"


class JournalTrigger(enum.StrEnum):
    """§3.6, the triggers of the transition table (one per row)."""

    DELIVERY_ACCEPTED = "delivery_accepted"
    STARTING_ACKNOWLEDGED = "starting_acknowledged"
    CONTROL_PLANE_ALREADY_RUNNING = "control_plane_already_running"
    CONTROL_PLANE_TERMINAL = "control_plane_terminal"
    PREPARE_SUCCEEDED = "prepare_succeeded"
    PREPARE_FAILED = "prepare_failed"
    HANDLE_RETURNED = "handle_returned"
    START_REFUSED = "start_refused"
    LAUNCH_OUTCOME_UNKNOWN = "launch_outcome_unknown"
    RUNNING_ACKNOWLEDGED = "running_acknowledged"
    FAIL_START_ACKNOWLEDGED = "fail_start_acknowledged"
    COMPLETION_ACKNOWLEDGED = "completion_acknowledged"
    LEASE_LOST = "lease_lost"
    LEASE_VERSION_ADVANCED = "lease_version_advanced"
    RETENTION_DELETE = "retention_delete"


#: §3.6, the whole legal surface of the journal record. `None` as a source is "no record" (the
#: first publish); `None` as a target is deletion (retention, §3.14). A lease-version row keeps
#: the state (the lease is replaced, revision+1). From `recovery_required`, `lease_lost` applies
#: only when the reason is not already a lease-loss one (`LEASE_LOST_REASONS`; checked by the
#: transition, which knows the reason). Every pair not listed is
#: `Rejected(JOURNAL_TRANSITION_INVALID)` and writes nothing (INBOX-01).
# fmt: off
JOURNAL_TABLE: Final = Table.of("Journal record", JournalState, JournalTrigger, {
    None: {
        JournalTrigger.DELIVERY_ACCEPTED:              JournalState.ACCEPTED,
    },
    JournalState.ACCEPTED: {
        JournalTrigger.STARTING_ACKNOWLEDGED:          JournalState.STARTING_ACKNOWLEDGED,
        JournalTrigger.CONTROL_PLANE_ALREADY_RUNNING:  JournalState.RECOVERY_REQUIRED,
        JournalTrigger.CONTROL_PLANE_TERMINAL:         JournalState.RECOVERY_REQUIRED,
        JournalTrigger.LEASE_VERSION_ADVANCED:         JournalState.ACCEPTED,
    },
    JournalState.STARTING_ACKNOWLEDGED: {
        JournalTrigger.PREPARE_SUCCEEDED:              JournalState.LAUNCHING,
        JournalTrigger.PREPARE_FAILED:                 JournalState.START_FAILED,
        JournalTrigger.LEASE_VERSION_ADVANCED:         JournalState.STARTING_ACKNOWLEDGED,
    },
    JournalState.LAUNCHING: {
        JournalTrigger.HANDLE_RETURNED:                JournalState.STARTED,
        JournalTrigger.START_REFUSED:                  JournalState.START_FAILED,
        JournalTrigger.LAUNCH_OUTCOME_UNKNOWN:         JournalState.RECOVERY_REQUIRED,
        JournalTrigger.COMPLETION_ACKNOWLEDGED:        JournalState.COMPLETION_ACKNOWLEDGED,
        JournalTrigger.LEASE_LOST:                     JournalState.RECOVERY_REQUIRED,
        JournalTrigger.LEASE_VERSION_ADVANCED:         JournalState.LAUNCHING,
    },
    JournalState.STARTED: {
        JournalTrigger.RUNNING_ACKNOWLEDGED:           JournalState.RUNNING_ACKNOWLEDGED,
        JournalTrigger.CONTROL_PLANE_TERMINAL:         JournalState.RECOVERY_REQUIRED,
        JournalTrigger.COMPLETION_ACKNOWLEDGED:        JournalState.COMPLETION_ACKNOWLEDGED,
        JournalTrigger.LEASE_LOST:                     JournalState.RECOVERY_REQUIRED,
        JournalTrigger.LEASE_VERSION_ADVANCED:         JournalState.STARTED,
    },
    JournalState.RUNNING_ACKNOWLEDGED: {
        JournalTrigger.COMPLETION_ACKNOWLEDGED:        JournalState.COMPLETION_ACKNOWLEDGED,
        JournalTrigger.LEASE_LOST:                     JournalState.RECOVERY_REQUIRED,
        JournalTrigger.LEASE_VERSION_ADVANCED:         JournalState.RUNNING_ACKNOWLEDGED,
    },
    JournalState.START_FAILED: {
        JournalTrigger.FAIL_START_ACKNOWLEDGED:        JournalState.START_FAILURE_ACKNOWLEDGED,
        JournalTrigger.LEASE_VERSION_ADVANCED:         JournalState.START_FAILED,
    },
    JournalState.RECOVERY_REQUIRED: {
        JournalTrigger.COMPLETION_ACKNOWLEDGED:        JournalState.COMPLETION_ACKNOWLEDGED,
        JournalTrigger.LEASE_LOST:                     JournalState.RECOVERY_REQUIRED,
        JournalTrigger.LEASE_VERSION_ADVANCED:         JournalState.RECOVERY_REQUIRED,
    },
    JournalState.START_FAILURE_ACKNOWLEDGED: {
        JournalTrigger.RETENTION_DELETE:               None,
    },
    JournalState.COMPLETION_ACKNOWLEDGED: {
        JournalTrigger.RETENTION_DELETE:               None,
    },
})
# fmt: on

#: §3.6 "To": the `recovery_reason` a row of each trigger writes (the lease-loss coordinator
#: writes one of two, §3.15). The reason depends on the trigger only, never on the source; the
#: other triggers write none of their own.
TRIGGER_REASONS: Final[Mapping[JournalTrigger, frozenset[RecoveryReason]]] = MappingProxyType(
    {
        JournalTrigger.CONTROL_PLANE_ALREADY_RUNNING: frozenset(
            {RecoveryReason.CONTROL_PLANE_ALREADY_RUNNING}
        ),
        JournalTrigger.CONTROL_PLANE_TERMINAL: frozenset({RecoveryReason.CONTROL_PLANE_TERMINAL}),
        JournalTrigger.LAUNCH_OUTCOME_UNKNOWN: frozenset({RecoveryReason.LAUNCH_OUTCOME_UNKNOWN}),
        JournalTrigger.LEASE_LOST: LEASE_LOST_REASONS,
    }
)


class ReplayAction(enum.StrEnum):
    """§3.7: what a redelivery or a restart does with the record it finds."""

    REPLAY_STARTING_ACK = "replay_starting_ack"  # then continue the pipeline
    CONTINUE_FIRST_START = "continue_first_start"  # step 5 on
    JOIN_OR_LAUNCH_UNKNOWN = "join_or_launch_unknown"  # never call the Executor again
    REPLAY_RUNNING_ACK = "replay_running_ack"  # only; never start again
    IDEMPOTENT_SUCCESS = "idempotent_success"
    REPLAY_FAIL_START = "replay_fail_start"  # only
    REPLAYED_START_FAILURE = "replayed_start_failure_acknowledged"
    REPLAYED_RECOVERY_REQUIRED = "replayed_recovery_required"  # no spawn, no ACK
    REPLAYED_COMPLETED = "replayed_completed"


#: §3.7, one action per state.
REPLAY: Final[Mapping[JournalState, ReplayAction]] = MappingProxyType(
    {
        JournalState.ACCEPTED: ReplayAction.REPLAY_STARTING_ACK,
        JournalState.STARTING_ACKNOWLEDGED: ReplayAction.CONTINUE_FIRST_START,
        JournalState.LAUNCHING: ReplayAction.JOIN_OR_LAUNCH_UNKNOWN,
        JournalState.STARTED: ReplayAction.REPLAY_RUNNING_ACK,
        JournalState.RUNNING_ACKNOWLEDGED: ReplayAction.IDEMPOTENT_SUCCESS,
        JournalState.START_FAILED: ReplayAction.REPLAY_FAIL_START,
        JournalState.START_FAILURE_ACKNOWLEDGED: ReplayAction.REPLAYED_START_FAILURE,
        JournalState.RECOVERY_REQUIRED: ReplayAction.REPLAYED_RECOVERY_REQUIRED,
        JournalState.COMPLETION_ACKNOWLEDGED: ReplayAction.REPLAYED_COMPLETED,
    }
)

#: The replay actions that may ever lead to `Executor.start()`: only a first start, from
#: `starting_acknowledged` (and `accepted`, whose pipeline reaches it). Never from `launching`
#: or later (I-J1, INBOX-04..INBOX-06).
MAY_SPAWN: Final = frozenset({ReplayAction.REPLAY_STARTING_ACK, ReplayAction.CONTINUE_FIRST_START})


class AuditClass(enum.StrEnum):
    """§3.10 U-4."""

    NO_LOCAL_EXECUTION = "no_local_execution"
    SETTLED_START_FAILURE = "settled_start_failure"
    SETTLED_COMPLETION = "settled_completion"
    LAUNCH_RECONCILIATION = "launch_reconciliation"
    EXECUTION_RECONCILIATION = "execution_reconciliation"


#: U-4: one classification per state (every recovery reason of `recovery_required` alike).
AUDIT_CLASSIFICATION: Final[Mapping[JournalState, AuditClass]] = MappingProxyType(
    {
        JournalState.ACCEPTED: AuditClass.NO_LOCAL_EXECUTION,
        JournalState.STARTING_ACKNOWLEDGED: AuditClass.NO_LOCAL_EXECUTION,
        JournalState.START_FAILED: AuditClass.NO_LOCAL_EXECUTION,
        JournalState.START_FAILURE_ACKNOWLEDGED: AuditClass.SETTLED_START_FAILURE,
        JournalState.COMPLETION_ACKNOWLEDGED: AuditClass.SETTLED_COMPLETION,
        JournalState.LAUNCHING: AuditClass.LAUNCH_RECONCILIATION,
        JournalState.RECOVERY_REQUIRED: AuditClass.LAUNCH_RECONCILIATION,
        JournalState.STARTED: AuditClass.EXECUTION_RECONCILIATION,
        JournalState.RUNNING_ACKNOWLEDGED: AuditClass.EXECUTION_RECONCILIATION,
    }
)

#: U-5: the audit is `ready` unless an entry has one of these.
NEEDS_RECONCILIATION: Final = frozenset(
    {AuditClass.LAUNCH_RECONCILIATION, AuditClass.EXECUTION_RECONCILIATION}
)

#: §3.14: the only states retention may delete.
RETENTION_ELIGIBLE: Final = FINAL_STATES


@dataclass(frozen=True, slots=True)
class FieldRule:
    """§3.3: a record field is required in `required`, allowed (optional) in `allowed`, and
    absent everywhere else. `required <= allowed`."""

    required: frozenset[JournalState]
    allowed: frozenset[JournalState]


def _rule(required: set[JournalState], also_allowed: set[JournalState] | None = None) -> FieldRule:
    return FieldRule(frozenset(required), frozenset(required | (also_allowed or set())))


_FROM_LAUNCHING: Final = {
    JournalState.LAUNCHING,
    JournalState.STARTED,
    JournalState.RUNNING_ACKNOWLEDGED,
    JournalState.START_FAILED,
    JournalState.START_FAILURE_ACKNOWLEDGED,
    JournalState.COMPLETION_ACKNOWLEDGED,
    JournalState.RECOVERY_REQUIRED,
}

#: §3.3 field-presence rules. `executor_started_at_ms` is set by the `launching` write and
#: carried from then on [decision]; a `start_failed` reached from `starting_acknowledged`
#: (prepare failed) and a `recovery_required` reached from `accepted` never had one. The callback
#: pair is one field here (both or neither, checked by the record); the receiver always writes
#: it with `launching` [decision], but a record of an older schema may lack it.
FIELD_RULES: Final[Mapping[str, FieldRule]] = MappingProxyType(
    {
        "executor_started_at_ms": _rule(
            {JournalState.LAUNCHING, JournalState.STARTED, JournalState.RUNNING_ACKNOWLEDGED},
            _FROM_LAUNCHING,
        ),
        "log_artifact_id": _rule(set(), _FROM_LAUNCHING),
        "executor_handle": _rule(
            {JournalState.STARTED, JournalState.RUNNING_ACKNOWLEDGED},
            {JournalState.RECOVERY_REQUIRED, JournalState.COMPLETION_ACKNOWLEDGED},
        ),
        "callback_pair": _rule({JournalState.COMPLETION_ACKNOWLEDGED}, _FROM_LAUNCHING),
        "completion_acknowledged_at_ms": _rule({JournalState.COMPLETION_ACKNOWLEDGED}),
        "recovery_reason": _rule({JournalState.RECOVERY_REQUIRED}),
        "start_failure_code": _rule(
            set(), {JournalState.START_FAILED, JournalState.START_FAILURE_ACKNOWLEDGED}
        ),
    }
)


class AckKind(enum.StrEnum):
    """The Worker commands whose answers move the journal (§3.5, §3.12; T2, T4, T5, T6)."""

    STARTING = "acknowledge_starting"  # T2
    RUNNING = "acknowledge_running"  # T4 (the receiver's and the Coordinator's running ACK)
    FAIL_START = "fail_start"  # T5
    COMPLETION = "complete"  # T6 (the Coordinator's completion submission)


#: §3.5, §3.6, §3.12: the control plane's answer to each Worker command, as the journal trigger it
#: causes. Applied and replayed answers move the record on; a terminal control plane is
#: `recovery_required(control_plane_terminal)` (T2x, T4r: no spawn, no fake completion); an
#: Attempt already `running` at the starting ACK has no matching local handle (T2x). An answer
#: that is not listed writes nothing: the record stays where it is (ADR-0021 §6).
ACK_ANSWERS: Final[Mapping[AckKind, Mapping[Code, JournalTrigger]]] = MappingProxyType(
    {
        AckKind.STARTING: MappingProxyType(
            {
                Code.APPLIED: JournalTrigger.STARTING_ACKNOWLEDGED,
                Code.ALREADY_APPLIED: JournalTrigger.STARTING_ACKNOWLEDGED,
                Code.ALREADY_RUNNING: JournalTrigger.CONTROL_PLANE_ALREADY_RUNNING,
                Code.ALREADY_TERMINAL: JournalTrigger.CONTROL_PLANE_TERMINAL,
            }
        ),
        AckKind.RUNNING: MappingProxyType(
            {
                Code.APPLIED: JournalTrigger.RUNNING_ACKNOWLEDGED,
                Code.ALREADY_APPLIED: JournalTrigger.RUNNING_ACKNOWLEDGED,
                Code.ALREADY_RUNNING: JournalTrigger.RUNNING_ACKNOWLEDGED,
                Code.ALREADY_TERMINAL: JournalTrigger.CONTROL_PLANE_TERMINAL,
            }
        ),
        AckKind.FAIL_START: MappingProxyType(
            {
                Code.APPLIED: JournalTrigger.FAIL_START_ACKNOWLEDGED,
                Code.ALREADY_APPLIED: JournalTrigger.FAIL_START_ACKNOWLEDGED,
                Code.ALREADY_TERMINAL: JournalTrigger.FAIL_START_ACKNOWLEDGED,
            }
        ),
        AckKind.COMPLETION: MappingProxyType(
            {
                Code.COMPLETED: JournalTrigger.COMPLETION_ACKNOWLEDGED,
                Code.ALREADY_TERMINAL: JournalTrigger.COMPLETION_ACKNOWLEDGED,
            }
        ),
    }
)

#: §3.5: a `LEASE_VERSION_MISMATCH` on these is retried with the lease lifecycle's version, a
#: bounded number of calls in all (B-42, the budget table's `ack_version_mismatch_attempts`).
VERSION_RETRIED: Final = frozenset({AckKind.RUNNING, AckKind.FAIL_START})


class RetentionStep(enum.StrEnum):
    """One step of deleting a final record (§3.14)."""

    CONFIRM_REVISION = "confirm_revision"  # re-read: the record is still the listed revision
    DELETE_RECEIPT = "delete_receipt"  # idempotent: a missing receipt is success
    REMOVE_RECORD = "remove_record"  # the revision-conditional remove (RetentionDelete)


#: §3.14: the retention-eligible states, each with the steps that delete it in their order.
#: A `completion_acknowledged` record's receipt goes first, and only on the word of a record
#: still at the listed revision; the record last, so a failed receipt cleanup keeps it.
RETENTION_ORDER: Final[Mapping[JournalState, tuple[RetentionStep, ...]]] = MappingProxyType(
    {
        JournalState.COMPLETION_ACKNOWLEDGED: (
            RetentionStep.CONFIRM_REVISION,
            RetentionStep.DELETE_RECEIPT,
            RetentionStep.REMOVE_RECORD,
        ),
        JournalState.START_FAILURE_ACKNOWLEDGED: (RetentionStep.REMOVE_RECORD,),
    }
)

#: §3.14 [decision]: the field a final record's age is measured from.
RETENTION_AGE_FROM: Final[Mapping[JournalState, str]] = MappingProxyType(
    {
        JournalState.COMPLETION_ACKNOWLEDGED: "completion_acknowledged_at_ms",
        JournalState.START_FAILURE_ACKNOWLEDGED: "updated_at_ms",
    }
)
