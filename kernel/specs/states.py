"""Every enumeration of the Run domain (SPEC §1-§2) as `enum.StrEnum`.

The string values are the wire and storage values: traces, SQL rows and Events use them verbatim.
"""

from __future__ import annotations

import enum


class RunStatus(enum.StrEnum):
    """Run states (SPEC §1.2, decision B-07)."""

    CREATED = "created"
    QUEUED = "queued"
    DISPATCHING = "dispatching"
    RUNNING = "running"
    LOST = "lost"
    RETRY_WAIT = "retry_wait"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_RUN_STATUSES


class AttemptStatus(enum.StrEnum):
    """Attempt states (SPEC §1.3)."""

    CLAIMED = "claimed"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    LOST = "lost"

    @property
    def terminal(self) -> bool:
        """Terminal in the sense of I-5: `lost` never changes again either."""
        return self in FINAL_ATTEMPT_STATUSES


class LeaseStatus(enum.StrEnum):
    """Run dispatch lease states (SPEC §1.4)."""

    LEASED = "leased"
    COMPLETED = "completed"
    RELEASED = "released"


class ReleaseReason(enum.StrEnum):
    """Lease release reasons (SPEC §1.4, B-09)."""

    DECLINED = "declined"
    SHUTDOWN = "shutdown"
    START_FAILED = "start_failed"
    CAPACITY_CHANGED = "capacity_changed"
    LEASE_EXPIRED = "lease_expired"
    CANCELLED = "cancelled"


class Safety(enum.StrEnum):
    """Retry policy safety (SPEC §1.1, ADR-0021 §5.5)."""

    UNKNOWN = "unknown"
    IDEMPOTENT = "idempotent"
    DEDUPLICATED = "deduplicated"


class Actor(enum.StrEnum):
    """Who an Event is attributed to (SPEC §1.1)."""

    USER = "user"
    TRIGGER = "trigger"
    WORKER = "worker"
    EXECUTOR = "executor"
    SCHEDULER = "scheduler"
    RECONCILER = "reconciler"
    SYSTEM = "system"


class Profile(enum.StrEnum):
    """Deployment profiles (SPEC §0.2)."""

    EDGE = "edge"
    STANDALONE = "standalone"
    CLUSTER = "cluster"
    WORKER = "worker"


class RunKind(enum.StrEnum):
    ORDINARY = "ordinary"
    WORKFLOW = "workflow"


class RunOwner(enum.StrEnum):
    RUNTIME = "runtime"
    LEGACY = "legacy"


class CancelReason(enum.StrEnum):
    """Cancellation intent reasons (SPEC §1.1, B-06: a deadline is `timeout`)."""

    USER = "user"
    POLICY = "policy"
    SHUTDOWN = "shutdown"
    RECONCILE = "reconcile"
    TIMEOUT = "timeout"


class WorkerSessionStatus(enum.StrEnum):
    ONLINE = "online"
    DRAINING = "draining"
    OFFLINE = "offline"


class CompletionOutcome(enum.StrEnum):
    """Outcomes a completion may carry (T6, L3)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


class EvidenceKind(enum.StrEnum):
    """Recovery evidence (SPEC §2.1)."""

    COMPLETED = "completed"
    LIVE = "live"
    NOT_RUNNING = "not_running"
    UNKNOWN = "unknown"


class UnknownReason(enum.StrEnum):
    """Reasons of `unknown` evidence (SPEC §2.1, Appendix A)."""

    RECEIPT_CONFLICT = "receipt_conflict"
    RECEIPT_READ_FAILED = "receipt_read_failed"
    HANDLE_MISSING = "handle_missing"
    IDENTITY_MISMATCH = "identity_mismatch"
    UNSUPPORTED = "unsupported"
    PROBE_FAILED = "probe_failed"
    INCONSISTENT_INSPECTIONS = "inconsistent_inspections"


class StopResult(enum.StrEnum):
    """Conclusive controller stop results accepted by L4/L5 (Appendix A)."""

    TERMINATION_REQUESTED = "termination_requested"
    ALREADY_EXITED = "already_exited"


class LostRetryDisposition(enum.StrEnum):
    """Lost-retry dispositions (SPEC §1.8.1, Appendix A)."""

    SCHEDULED = "scheduled"
    REQUEUED = "requeued"
    FAILED_DISABLED = "failed_disabled"
    FAILED_UNSAFE = "failed_unsafe"
    FAILED_EXHAUSTED = "failed_exhausted"


class OutcomeKind(enum.StrEnum):
    """The four kinds of the closed `Outcome` union (SPEC §0.3)."""

    APPLIED = "applied"
    REPLAYED = "replayed"
    REJECTED = "rejected"
    RACED = "raced"


TERMINAL_RUN_STATUSES: frozenset[RunStatus] = frozenset(
    {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT}
)
TERMINAL_ATTEMPT_OUTCOMES: frozenset[AttemptStatus] = frozenset(
    {
        AttemptStatus.SUCCEEDED,
        AttemptStatus.FAILED,
        AttemptStatus.CANCELLED,
        AttemptStatus.TIMED_OUT,
    }
)
# I-5: `lost` is not a completion outcome but it is just as final.
FINAL_ATTEMPT_STATUSES: frozenset[AttemptStatus] = TERMINAL_ATTEMPT_OUTCOMES | {AttemptStatus.LOST}
LIVE_ATTEMPT_STATUSES: frozenset[AttemptStatus] = frozenset(
    {AttemptStatus.CLAIMED, AttemptStatus.STARTING, AttemptStatus.RUNNING}
)
FINAL_LEASE_STATUSES: frozenset[LeaseStatus] = frozenset(
    {LeaseStatus.COMPLETED, LeaseStatus.RELEASED}
)

#: The terminal status a cancellation intent ends a Run with (§1.9, L4/L5, B-06): a deadline is a
#: `timeout` intent and ends `timed_out`; every other reason ends `cancelled`.
INTENT_FINAL_STATUS: dict[CancelReason, RunStatus] = {
    reason: RunStatus.TIMED_OUT if reason is CancelReason.TIMEOUT else RunStatus.CANCELLED
    for reason in CancelReason
}
#: Completion outcomes that stand even under a cancellation intent (decision R-27): finished work
#: is a fact; any other outcome of a local Attempt under an intent takes the intent's status.
OUTCOMES_OVER_INTENT: frozenset[CompletionOutcome] = frozenset({CompletionOutcome.SUCCEEDED})
