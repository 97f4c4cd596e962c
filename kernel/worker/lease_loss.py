"""The lease-loss coordinator's decisions, pure (SPEC §3.15; INBOX-40, INBOX-41).

Lease loss, per notification (§3.15): `decide_lease_loss(record, snapshot)` says what the
coordinator does before any I/O: nothing (`not_found`, `authority_mismatch`,
`already_completed`, `already_stopped`, `already_unverified`, `no_local_execution`), write
`recovery_required(lease_lost_local_execution_unverified)` at once (no durable handle), or ask
the controller to stop the durable handle. `after_stop(result)` maps the controller's answer
to the journal event to write (`LeaseLost(stopped=...)`) or to nothing when the controller
raised (so the stop can be retried explicitly). The coordinator holds no control-plane client:
nothing here can mark a Run or Attempt `lost`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kernel.specs.journal import LEASE_LOST_REASONS, JournalState, RecoveryReason
from kernel.specs.states import StopResult
from kernel.worker.journal import LeaseLost
from kernel.worker.record import JournalRecord, OfferLease

#: §3.15 step 4: the states that may own a local execution.
MAY_OWN_EXECUTION = frozenset(
    {
        JournalState.LAUNCHING,
        JournalState.STARTED,
        JournalState.RUNNING_ACKNOWLEDGED,
        JournalState.RECOVERY_REQUIRED,
    }
)


class LeaseLossResult(enum.StrEnum):
    """§3.15 results [decision: names]."""

    NOT_FOUND = "not_found"
    AUTHORITY_MISMATCH = "authority_mismatch"
    NO_LOCAL_EXECUTION = "no_local_execution"
    ALREADY_COMPLETED = "already_completed"
    ALREADY_STOPPED = "already_stopped"
    ALREADY_UNVERIFIED = "already_unverified"
    STOP_ACKNOWLEDGED = "stop_acknowledged"
    STOP_UNVERIFIED = "stop_unverified"


@dataclass(frozen=True, slots=True)
class FinishLeaseLoss:
    """Nothing to do: report `result`."""

    result: LeaseLossResult


@dataclass(frozen=True, slots=True)
class WriteUnverified:
    """No durable handle to stop (for example `launching`): write `_unverified` now."""

    @property
    def event(self) -> LeaseLost:
        return LeaseLost(stopped=False)


@dataclass(frozen=True, slots=True)
class StopHandle:
    """Ask `PersistedExecutionController.stop(handle, reason=reconcile)`, then `after_stop`."""

    executor_handle: str


LeaseLossDecision = FinishLeaseLoss | WriteUnverified | StopHandle


def _authority_matches(record: JournalRecord, snapshot: OfferLease) -> bool:
    """Step 2: Run, Attempt, worker id, session, generation, lease generation and token; the
    record's lease version may lag the lifecycle's."""
    return record.offer.lease.same_authority(snapshot)


def decide_lease_loss(record: JournalRecord | None, snapshot: OfferLease) -> LeaseLossDecision:
    """§3.15 steps 1-6 up to the controller call. `record` is the one read for the offer id
    recomputed from the snapshot's authority."""
    if record is None:
        return FinishLeaseLoss(LeaseLossResult.NOT_FOUND)
    if not _authority_matches(record, snapshot):
        return FinishLeaseLoss(LeaseLossResult.AUTHORITY_MISMATCH)
    if record.state is JournalState.COMPLETION_ACKNOWLEDGED:
        return FinishLeaseLoss(LeaseLossResult.ALREADY_COMPLETED)
    if record.recovery_reason is RecoveryReason.LEASE_LOST_LOCAL_EXECUTION_STOPPED:
        return FinishLeaseLoss(LeaseLossResult.ALREADY_STOPPED)
    if record.recovery_reason is RecoveryReason.LEASE_LOST_LOCAL_EXECUTION_UNVERIFIED:
        return FinishLeaseLoss(LeaseLossResult.ALREADY_UNVERIFIED)
    if record.state not in MAY_OWN_EXECUTION:
        return FinishLeaseLoss(LeaseLossResult.NO_LOCAL_EXECUTION)
    if record.executor_handle is None:
        return WriteUnverified()
    return StopHandle(record.executor_handle)


def after_stop(result: StopResult | str | None) -> LeaseLost | None:
    """§3.15 step 6: `termination_requested` / `already_exited` -> `_stopped`; any other
    answer (missing handle, identity or PID mismatch, unsupported, invalid) -> `_unverified`;
    `None` (the controller raised) -> write nothing."""
    if result is None:
        return None
    return LeaseLost(
        stopped=result in (StopResult.TERMINATION_REQUESTED, StopResult.ALREADY_EXITED)
    )


def result_of(event: LeaseLost) -> LeaseLossResult:
    return LeaseLossResult.STOP_ACKNOWLEDGED if event.stopped else LeaseLossResult.STOP_UNVERIFIED


def quiet_after_conflict(record: JournalRecord | None) -> bool:
    """Step 7: after a revision conflict, finish quietly when the record is now completed or
    already lease-lost (someone else settled it); otherwise the conflict is an error."""
    return record is not None and (
        record.state is JournalState.COMPLETION_ACKNOWLEDGED
        or record.recovery_reason in LEASE_LOST_REASONS
    )
