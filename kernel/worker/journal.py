"""The offer journal state machine (SPEC §3.6): one total function over journal records.

`journal_step(record, event, observed_at_ms)` returns `JournalApplied(record)` (the next
revision; `record is None` means "delete", retention only), `Replayed(code)` (nothing to write)
or `Rejected(code)` (nothing to write), never an exception. Which (state, trigger) pairs apply is
`kernel.specs.journal.JOURNAL_TABLE`; this module only fills in the fields a row writes. The
effectful parts (journal file, control-plane calls, `Executor.start()`) are the ports' and the
receiver's; they call this function before every write, so the journal can only ever hold what
the table allows (INBOX-01) with the §3.3 field rules (INBOX-02).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import icontract

from kernel.identity import is_sha256_hex
from kernel.outcomes import Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.journal import (
    FINAL_STATES,
    JOURNAL_TABLE,
    LEASE_LOST_REASONS,
    TRIGGER_REASONS,
    DeliveryKind,
    JournalState,
    JournalTrigger,
    RecoveryReason,
)
from kernel.specs.states import OutcomeKind
from kernel.worker.record import JournalRecord, Offer, OfferLease, record_violations


# -- events: one per trigger of §3.6 ------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DeliveryAccepted:
    """A valid delivery of a new offer (validated by §3.8 first): the first publish."""

    trigger: ClassVar[JournalTrigger] = JournalTrigger.DELIVERY_ACCEPTED
    offer: Offer


@dataclass(frozen=True, slots=True)
class StartingAcknowledged:
    """`acknowledge_starting` applied or replayed; `lease` is the lease the store returned."""

    trigger: ClassVar[JournalTrigger] = JournalTrigger.STARTING_ACKNOWLEDGED
    lease: OfferLease


@dataclass(frozen=True, slots=True)
class ControlPlaneAlreadyRunning:
    """T2x: the control plane reports the Attempt already `running` (no local handle)."""

    trigger: ClassVar[JournalTrigger] = JournalTrigger.CONTROL_PLANE_ALREADY_RUNNING


@dataclass(frozen=True, slots=True)
class ControlPlaneTerminal:
    """T2x / T4r: the control plane reports the Attempt terminal (no fake completion)."""

    trigger: ClassVar[JournalTrigger] = JournalTrigger.CONTROL_PLANE_TERMINAL


@dataclass(frozen=True, slots=True)
class PrepareSucceeded:
    """§3.5 step 7: the callback pair and the start time, written before `Executor.start()`.
    Only the token's digest: the raw token lives in the in-memory execution context."""

    trigger: ClassVar[JournalTrigger] = JournalTrigger.PREPARE_SUCCEEDED
    callback_sequence: int
    callback_token_sha256: str
    executor_started_at_ms: int
    log_artifact_id: str | None = None


@dataclass(frozen=True, slots=True)
class PrepareFailed:
    trigger: ClassVar[JournalTrigger] = JournalTrigger.PREPARE_FAILED
    start_failure_code: str | None = None


@dataclass(frozen=True, slots=True)
class HandleReturned:
    """§3.5 step 8: `Executor.start()` returned a stable durable handle."""

    trigger: ClassVar[JournalTrigger] = JournalTrigger.HANDLE_RETURNED
    executor_handle: str
    log_artifact_id: str | None = None


@dataclass(frozen=True, slots=True)
class StartRefused:
    """An explicit refusal by `Executor.start()` (the process never existed)."""

    trigger: ClassVar[JournalTrigger] = JournalTrigger.START_REFUSED
    start_failure_code: str | None = None


@dataclass(frozen=True, slots=True)
class LaunchOutcomeUnknown:
    """An ambiguous start error, or `launching` found with no in-process operation."""

    trigger: ClassVar[JournalTrigger] = JournalTrigger.LAUNCH_OUTCOME_UNKNOWN


@dataclass(frozen=True, slots=True)
class RunningAcknowledged:
    trigger: ClassVar[JournalTrigger] = JournalTrigger.RUNNING_ACKNOWLEDGED


@dataclass(frozen=True, slots=True)
class FailStartAcknowledged:
    trigger: ClassVar[JournalTrigger] = JournalTrigger.FAIL_START_ACKNOWLEDGED


@dataclass(frozen=True, slots=True)
class CompletionAcknowledged:
    """§3.12: the control plane returned `completed` or `already_terminal`. A record without
    the callback pair gets the receipt's (a completion is always authenticated by one)."""

    trigger: ClassVar[JournalTrigger] = JournalTrigger.COMPLETION_ACKNOWLEDGED
    callback_sequence: int | None = None
    callback_token_sha256: str | None = None


@dataclass(frozen=True, slots=True)
class LeaseLost:
    """§3.15: the lease-loss coordinator's write, `stopped` or not verifiable."""

    trigger: ClassVar[JournalTrigger] = JournalTrigger.LEASE_LOST
    stopped: bool


@dataclass(frozen=True, slots=True)
class LeaseVersionAdvanced:
    """C-1: a delivery of the same offer carrying the same authority and a lease version."""

    trigger: ClassVar[JournalTrigger] = JournalTrigger.LEASE_VERSION_ADVANCED
    lease: OfferLease
    delivery_kind: DeliveryKind


@dataclass(frozen=True, slots=True)
class RetentionDelete:
    trigger: ClassVar[JournalTrigger] = JournalTrigger.RETENTION_DELETE


JournalEvent = (
    DeliveryAccepted
    | StartingAcknowledged
    | ControlPlaneAlreadyRunning
    | ControlPlaneTerminal
    | PrepareSucceeded
    | PrepareFailed
    | HandleReturned
    | StartRefused
    | LaunchOutcomeUnknown
    | RunningAcknowledged
    | FailStartAcknowledged
    | CompletionAcknowledged
    | LeaseLost
    | LeaseVersionAdvanced
    | RetentionDelete
)


@dataclass(frozen=True, slots=True)
class JournalApplied:
    """The next durable revision to write (`record`), or `None`: remove the record."""

    kind: ClassVar[OutcomeKind] = OutcomeKind.APPLIED
    record: JournalRecord | None
    code: Code = Code.APPLIED


JournalOutcome = JournalApplied | Replayed | Rejected


# -- what the journal engine answers (runners/worker/journal/engine.py) ------------------------
@dataclass(frozen=True, slots=True)
class Found:
    """The record the journal holds for the offer now, or `None`."""

    record: JournalRecord | None


@dataclass(frozen=True, slots=True)
class ReadFailed:
    """The journal could not be read (its `JOURNAL_*` code, never its text)."""

    code: Code


@dataclass(frozen=True, slots=True)
class Written:
    """The step is durable: `record` is the revision now in the journal (the same record when
    the kernel answered `Replayed`: nothing needed writing)."""

    record: JournalRecord


@dataclass(frozen=True, slots=True)
class Removed:
    """A final record was removed (retention's `RetentionDelete`, §3.14)."""

    offer_id: str


@dataclass(frozen=True, slots=True)
class WriteFailed:
    """Nothing was written: the kernel refused the step (`refused`, its code) or the journal
    failed closed (its `JOURNAL_*` code, e.g. a revision conflict). The journal holds whatever
    was durable before: re-read before assuming anything."""

    code: Code
    refused: bool = False


JournalWrite = Written | WriteFailed


def observation_ms(record: JournalRecord | None, clock_ms: int) -> int:
    """The observation time of a step on `record`: the runner's clock, never behind the
    record's last revision (the kernel refuses time running backwards, so a wall clock stepping
    back must not wedge a record)."""
    return clock_ms if record is None else max(clock_ms, record.updated_at_ms)


# -- contracts ------------------------------------------------------------------------------
def _step_ok(
    record: JournalRecord | None, event: JournalEvent, observed_at_ms: int, result: JournalOutcome
) -> bool:
    """INBOX-01/02, I-J3: an Applied step is a row of the table, moves the revision by exactly
    one (0 on create), keeps the offer id, never leaves a final state except by deletion, never
    changes `executor_started_at_ms` once set, and yields a well-formed record."""
    if not isinstance(result, JournalApplied):
        return True
    source = None if record is None else record.state
    new = result.record
    if not JOURNAL_TABLE.allows(source, event.trigger, None if new is None else new.state):
        return False
    if new is None:
        return record is not None and record.state in FINAL_STATES
    if record is None:
        return (
            new.revision == 0 and new.state is JournalState.ACCEPTED and not record_violations(new)
        )
    reasons = TRIGGER_REASONS.get(event.trigger)
    return (
        (not reasons or new.recovery_reason in reasons)
        and new.revision == record.revision + 1
        and new.offer_id == record.offer_id
        and record.state not in FINAL_STATES
        and new.updated_at_ms >= record.updated_at_ms
        and (
            record.executor_started_at_ms is None
            or new.executor_started_at_ms == record.executor_started_at_ms
        )
        and not record_violations(new)
    )


# -- the transition -------------------------------------------------------------------------
def _next(record: JournalRecord, now: int, **changes: object) -> JournalApplied:
    fields: dict[str, object] = {"revision": record.revision + 1, "updated_at_ms": now}
    fields.update(changes)
    return JournalApplied(dataclasses.replace(record, **fields))  # type: ignore[arg-type]


def _recovery(record: JournalRecord, now: int, reason: RecoveryReason) -> JournalApplied:
    return _next(record, now, state=JournalState.RECOVERY_REQUIRED, recovery_reason=reason)


@icontract.require(
    lambda observed_at_ms: isinstance(observed_at_ms, int) and observed_at_ms >= 0,
    "observed_at_ms is a non-negative integer (ms since the epoch)",
)
@icontract.require(
    lambda record: record is None or not record_violations(record),
    "the stored record satisfies §3.3 (a corrupt record never reaches the kernel, F-9)",
)
@icontract.ensure(_step_ok, "an Applied step is a row of §3.6 with the §3.3 field rules")
def journal_step(
    record: JournalRecord | None, event: JournalEvent, observed_at_ms: int
) -> JournalOutcome:
    """Apply one §3.6 trigger to the record found (or `None`). Total: a pair outside the table
    is `Rejected(JOURNAL_TRANSITION_INVALID)`; time never runs backwards across revisions."""
    source = None if record is None else record.state
    if JOURNAL_TABLE.lookup(source, event.trigger) is None:
        return Rejected(Code.JOURNAL_TRANSITION_INVALID)
    if isinstance(event, DeliveryAccepted):
        if event.offer.offer_id != event.offer.derived_offer_id():
            return Rejected(Code.OFFER_ID_MISMATCH)
        return JournalApplied(
            JournalRecord(
                revision=0,
                state=JournalState.ACCEPTED,
                offer=event.offer,
                accepted_at_ms=observed_at_ms,
                updated_at_ms=observed_at_ms,
            )
        )
    assert record is not None  # only DeliveryAccepted has a row from "no record"
    if observed_at_ms < record.updated_at_ms:
        return Rejected(Code.CLOCK_REGRESSION)
    now = observed_at_ms
    match event:
        case StartingAcknowledged(lease=lease) | LeaseVersionAdvanced(lease=lease):
            if not lease.same_authority(record.offer.lease):
                return Rejected(Code.OFFER_CONFLICT)
            if isinstance(event, LeaseVersionAdvanced):
                if lease.version <= record.offer.lease.version:
                    return Replayed(Code.ALREADY_APPLIED)  # C-1: equal or lower writes nothing
                offer = dataclasses.replace(
                    record.offer, lease=lease, delivery_kind=event.delivery_kind
                )
                return _next(record, now, offer=offer)
            offer = dataclasses.replace(record.offer, lease=lease)
            return _next(record, now, state=JournalState.STARTING_ACKNOWLEDGED, offer=offer)
        case ControlPlaneAlreadyRunning():
            return _recovery(record, now, RecoveryReason.CONTROL_PLANE_ALREADY_RUNNING)
        case ControlPlaneTerminal():
            return _recovery(record, now, RecoveryReason.CONTROL_PLANE_TERMINAL)
        case PrepareSucceeded():
            if event.callback_sequence < 1 or not is_sha256_hex(event.callback_token_sha256):
                return Rejected(Code.JOURNAL_TRANSITION_INVALID)
            if event.executor_started_at_ms < 0:
                return Rejected(Code.JOURNAL_TRANSITION_INVALID)
            return _next(
                record,
                now,
                state=JournalState.LAUNCHING,
                callback_sequence=event.callback_sequence,
                callback_token_sha256=event.callback_token_sha256,
                executor_started_at_ms=event.executor_started_at_ms,
                log_artifact_id=event.log_artifact_id,
            )
        case PrepareFailed(start_failure_code=code) | StartRefused(start_failure_code=code):
            return _next(record, now, state=JournalState.START_FAILED, start_failure_code=code)
        case HandleReturned():
            if not event.executor_handle:
                return Rejected(Code.JOURNAL_TRANSITION_INVALID)
            log = event.log_artifact_id or record.log_artifact_id
            return _next(
                record,
                now,
                state=JournalState.STARTED,
                executor_handle=event.executor_handle,
                log_artifact_id=log,
            )
        case LaunchOutcomeUnknown():
            return _recovery(record, now, RecoveryReason.LAUNCH_OUTCOME_UNKNOWN)
        case RunningAcknowledged():
            return _next(record, now, state=JournalState.RUNNING_ACKNOWLEDGED)
        case FailStartAcknowledged():
            return _next(record, now, state=JournalState.START_FAILURE_ACKNOWLEDGED)
        case CompletionAcknowledged():
            return _completion(record, event, now)
        case LeaseLost(stopped=stopped):
            if record.recovery_reason in LEASE_LOST_REASONS:
                return Replayed(Code.ALREADY_APPLIED)  # never overwritten by another reason
            reason = (
                RecoveryReason.LEASE_LOST_LOCAL_EXECUTION_STOPPED
                if stopped
                else RecoveryReason.LEASE_LOST_LOCAL_EXECUTION_UNVERIFIED
            )
            return _recovery(record, now, reason)
        case RetentionDelete():
            return JournalApplied(None)


def _completion(record: JournalRecord, event: CompletionAcknowledged, now: int) -> JournalOutcome:
    sequence, digest = record.callback_sequence, record.callback_token_sha256
    if sequence is None or digest is None:
        sequence, digest = event.callback_sequence, event.callback_token_sha256
        if sequence is None or digest is None or sequence < 1 or not is_sha256_hex(digest):
            return Rejected(Code.JOURNAL_TRANSITION_INVALID)
    elif event.callback_sequence not in (None, sequence):
        return Rejected(Code.CALLBACK_SEQUENCE_STALE)
    return _next(
        record,
        now,
        state=JournalState.COMPLETION_ACKNOWLEDGED,
        callback_sequence=sequence,
        callback_token_sha256=digest,
        completion_acknowledged_at_ms=now,
        recovery_reason=None,
        start_failure_code=None,
    )
