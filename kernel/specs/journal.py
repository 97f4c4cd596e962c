"""The Worker execution offer journal as data (SPEC §3.3, §3.4, §3.6, §3.7, §3.10 U-4).

Read it like h11's `_state.py`: `TRANSITIONS` is the whole legal surface of the journal state
machine (§3.6), `REPLAY` says what a redelivery or a restart does in each state (§3.7),
`AUDIT_CLASSIFICATION` is the startup auditor's table (U-4), and `FIELD_RULES` are the record's
field-presence rules (§3.3), which every durable revision satisfies (I-J4, INBOX-02).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

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


S = JournalState

#: §3.4: final states change only by deletion (retention, §3.14).
FINAL_STATES: Final = frozenset({S.START_FAILURE_ACKNOWLEDGED, S.COMPLETION_ACKNOWLEDGED})


class RecoveryReason(enum.StrEnum):
    """§3.3: `recovery_reason`, only and always in `recovery_required`."""

    LAUNCH_OUTCOME_UNKNOWN = "launch_outcome_unknown"
    CONTROL_PLANE_ALREADY_RUNNING = "control_plane_already_running"
    CONTROL_PLANE_TERMINAL = "control_plane_terminal"
    LEASE_LOST_LOCAL_EXECUTION_STOPPED = "lease_lost_local_execution_stopped"
    LEASE_LOST_LOCAL_EXECUTION_UNVERIFIED = "lease_lost_local_execution_unverified"


R = RecoveryReason

#: §3.15: the lease-loss reasons; a record carrying one is never overwritten by another.
LEASE_LOST_REASONS: Final = frozenset(
    {R.LEASE_LOST_LOCAL_EXECUTION_STOPPED, R.LEASE_LOST_LOCAL_EXECUTION_UNVERIFIED}
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


T = JournalTrigger


@dataclass(frozen=True, slots=True)
class Target:
    """Where a row of §3.6 goes: a state (with the recovery reasons it may carry), or, for
    retention, deletion (`state is None`). `keep` means "the same state" (lease replaced)."""

    state: JournalState | None
    reasons: frozenset[RecoveryReason] = frozenset()
    keep: bool = False


def _to(state: JournalState, *reasons: RecoveryReason) -> Target:
    return Target(state, frozenset(reasons))


_LOCAL_EXECUTION: Final = (S.LAUNCHING, S.STARTED, S.RUNNING_ACKNOWLEDGED, S.RECOVERY_REQUIRED)
_NON_FINAL: Final = tuple(s for s in S if s not in FINAL_STATES)
_KEEP: Final = Target(None, keep=True)
_DELETED: Final = Target(None)

_rows: dict[tuple[JournalState | None, JournalTrigger], Target] = {
    (None, T.DELIVERY_ACCEPTED): _to(S.ACCEPTED),
    (S.ACCEPTED, T.STARTING_ACKNOWLEDGED): _to(S.STARTING_ACKNOWLEDGED),
    (S.ACCEPTED, T.CONTROL_PLANE_ALREADY_RUNNING): _to(
        S.RECOVERY_REQUIRED, R.CONTROL_PLANE_ALREADY_RUNNING
    ),
    (S.ACCEPTED, T.CONTROL_PLANE_TERMINAL): _to(S.RECOVERY_REQUIRED, R.CONTROL_PLANE_TERMINAL),
    (S.STARTED, T.CONTROL_PLANE_TERMINAL): _to(S.RECOVERY_REQUIRED, R.CONTROL_PLANE_TERMINAL),
    (S.STARTING_ACKNOWLEDGED, T.PREPARE_SUCCEEDED): _to(S.LAUNCHING),
    (S.STARTING_ACKNOWLEDGED, T.PREPARE_FAILED): _to(S.START_FAILED),
    (S.LAUNCHING, T.HANDLE_RETURNED): _to(S.STARTED),
    (S.LAUNCHING, T.START_REFUSED): _to(S.START_FAILED),
    (S.LAUNCHING, T.LAUNCH_OUTCOME_UNKNOWN): _to(S.RECOVERY_REQUIRED, R.LAUNCH_OUTCOME_UNKNOWN),
    (S.STARTED, T.RUNNING_ACKNOWLEDGED): _to(S.RUNNING_ACKNOWLEDGED),
    (S.START_FAILED, T.FAIL_START_ACKNOWLEDGED): _to(S.START_FAILURE_ACKNOWLEDGED),
}
for _state in _LOCAL_EXECUTION:
    _rows[(_state, T.COMPLETION_ACKNOWLEDGED)] = _to(S.COMPLETION_ACKNOWLEDGED)
    # From `recovery_required` only when its reason is not already a lease-loss one
    # (`LEASE_LOST_REASONS`; checked by the transition, which knows the reason).
    _rows[(_state, T.LEASE_LOST)] = _to(S.RECOVERY_REQUIRED, *LEASE_LOST_REASONS)
for _state in _NON_FINAL:
    _rows[(_state, T.LEASE_VERSION_ADVANCED)] = _KEEP
for _state in FINAL_STATES:
    _rows[(_state, T.RETENTION_DELETE)] = _DELETED

#: §3.6. Every (state, trigger) pair not listed is `Rejected(JOURNAL_TRANSITION_INVALID)` and
#: writes nothing. `None` as the source is "no record".
TRANSITIONS: Final[Mapping[tuple[JournalState | None, JournalTrigger], Target]] = MappingProxyType(
    _rows
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
        S.ACCEPTED: ReplayAction.REPLAY_STARTING_ACK,
        S.STARTING_ACKNOWLEDGED: ReplayAction.CONTINUE_FIRST_START,
        S.LAUNCHING: ReplayAction.JOIN_OR_LAUNCH_UNKNOWN,
        S.STARTED: ReplayAction.REPLAY_RUNNING_ACK,
        S.RUNNING_ACKNOWLEDGED: ReplayAction.IDEMPOTENT_SUCCESS,
        S.START_FAILED: ReplayAction.REPLAY_FAIL_START,
        S.START_FAILURE_ACKNOWLEDGED: ReplayAction.REPLAYED_START_FAILURE,
        S.RECOVERY_REQUIRED: ReplayAction.REPLAYED_RECOVERY_REQUIRED,
        S.COMPLETION_ACKNOWLEDGED: ReplayAction.REPLAYED_COMPLETED,
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
        S.ACCEPTED: AuditClass.NO_LOCAL_EXECUTION,
        S.STARTING_ACKNOWLEDGED: AuditClass.NO_LOCAL_EXECUTION,
        S.START_FAILED: AuditClass.NO_LOCAL_EXECUTION,
        S.START_FAILURE_ACKNOWLEDGED: AuditClass.SETTLED_START_FAILURE,
        S.COMPLETION_ACKNOWLEDGED: AuditClass.SETTLED_COMPLETION,
        S.LAUNCHING: AuditClass.LAUNCH_RECONCILIATION,
        S.RECOVERY_REQUIRED: AuditClass.LAUNCH_RECONCILIATION,
        S.STARTED: AuditClass.EXECUTION_RECONCILIATION,
        S.RUNNING_ACKNOWLEDGED: AuditClass.EXECUTION_RECONCILIATION,
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
    S.LAUNCHING,
    S.STARTED,
    S.RUNNING_ACKNOWLEDGED,
    S.START_FAILED,
    S.START_FAILURE_ACKNOWLEDGED,
    S.COMPLETION_ACKNOWLEDGED,
    S.RECOVERY_REQUIRED,
}

#: §3.3 field-presence rules. `executor_started_at_ms` is set by the `launching` write and
#: carried from then on [decision]; a `start_failed` reached from `starting_acknowledged`
#: (prepare failed) and a `recovery_required` reached from `accepted` never had one. The callback
#: pair is one field here (both or neither, checked by the record); the receiver always writes
#: it with `launching` [decision], but a record of an older schema may lack it.
FIELD_RULES: Final[Mapping[str, FieldRule]] = MappingProxyType(
    {
        "executor_started_at_ms": _rule(
            {S.LAUNCHING, S.STARTED, S.RUNNING_ACKNOWLEDGED}, _FROM_LAUNCHING
        ),
        "log_artifact_id": _rule(set(), _FROM_LAUNCHING),
        "executor_handle": _rule(
            {S.STARTED, S.RUNNING_ACKNOWLEDGED},
            {S.RECOVERY_REQUIRED, S.COMPLETION_ACKNOWLEDGED},
        ),
        "callback_pair": _rule({S.COMPLETION_ACKNOWLEDGED}, _FROM_LAUNCHING),
        "completion_acknowledged_at_ms": _rule({S.COMPLETION_ACKNOWLEDGED}),
        "recovery_reason": _rule({S.RECOVERY_REQUIRED}),
        "start_failure_code": _rule(set(), {S.START_FAILED, S.START_FAILURE_ACKNOWLEDGED}),
    }
)
