"""The recovery Coordinator's irreversible order, pure (SPEC §3.12; INBOX-34..INBOX-36).

For one record the Reconciler has reconciled (`Reconciliation`), under the journal ownership:

0. `plan_coordination(seen, now, reconciliation)`: what the evidence allows. `completion_observed`
   goes to `plan_completion`; `running_observed` on a `started` record with `current` authority,
   a clearly `running` identity and no receipt is running-ACK recovery (`AckRunning`); a record
   that changed since the Reconciler saw it is `raced`; a running process whose record is past
   `started` is `still_running` (nothing to do yet); anything else is `blocked`.
1. `plan_completion(seen, now, evidence, submission)`: the record must still be the revision
   the Reconciler saw (else `raced`); only `completion_observed` with a `ready` submission is
   submitted (`ready` is never "already submitted"). The submission carries the journal's own
   Worker session, lease generation, token and version, and the receipt's sequence, outcome
   and exit code: a replay after a crash is exact (version + 1 on the control plane, T6r).
2. `after_submission(code, sent)`: an answer `ACK_ANSWERS[completion]` maps (`completed`,
   `already_terminal`) -> write `completion_acknowledged`; anything else ->
   `submission_rejected(code)`.
3. `after_journal_write(ok)`: only a durable final revision allows deleting the receipt; a
   failed write keeps the receipt, so the next pass resubmits the identical command and gets
   `already_terminal`.
4. `after_receipt_delete(ok)`: `completed`, or `completed_cleanup_pending` (the state never
   goes back; later passes retry only the deletion).

Running-ACK recovery: `after_running_ack(code)` maps the answer through
`ACK_ANSWERS[running]`, the receiver's own table: `running_acknowledged`, or
`recovery_required(control_plane_terminal)` on a terminal control plane; a version mismatch or
any other refusal writes nothing and waits for new authority (no guessing, no retry loop).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from kernel.identity import Secret
from kernel.specs.codes import Code
from kernel.specs.journal import ACK_ANSWERS, AckKind, JournalState, JournalTrigger
from kernel.specs.states import CompletionOutcome
from kernel.worker.journal import (
    CompletionAcknowledged,
    ControlPlaneTerminal,
    RunningAcknowledged,
)
from kernel.worker.reconciler import (
    CompletionObserved,
    HandleInspection,
    InboxEvidence,
    ReceiptCheck,
    Reconciliation,
    RunningObserved,
    Submission,
    UnknownObserved,
)
from kernel.worker.record import JournalRecord, OfferLease

__all__ = [
    "RELEASES_LEASE",
    "SETTLED",
    "AckRunning",
    "CompletionSubmission",
    "CoordinatorOutcome",
    "DeleteReceipt",
    "FinishRecovery",
    "WriteJournal",
    "after_journal_write",
    "after_receipt_delete",
    "after_running_ack",
    "after_submission",
    "plan_completion",
    "plan_coordination",
    "running_ack_eligible",
]


class CoordinatorOutcome(enum.StrEnum):
    """§3.12 results plus the running-ACK recovery's [decision: names], all redacted (S-1)."""

    COMPLETED = "completed"
    COMPLETED_CLEANUP_PENDING = "completed_cleanup_pending"
    SUBMISSION_REJECTED = "submission_rejected"
    JOURNAL_WRITE_FAILED = "journal_write_failed"
    BLOCKED = "blocked"
    RACED = "raced"
    RUNNING_ACKNOWLEDGED = "running_acknowledged"
    CONTROL_PLANE_TERMINAL = "control_plane_terminal"
    WAITING_FOR_AUTHORITY = "waiting_for_authority"
    STILL_RUNNING = "still_running"  # running evidence, already acknowledged: nothing to do yet
    NOTHING_TO_DO = "nothing_to_do"


#: The outcomes after which the record needs no further recovery action (it is final, or
#: there was nothing to do for it).
SETTLED: Final = frozenset({CoordinatorOutcome.COMPLETED, CoordinatorOutcome.NOTHING_TO_DO})

#: The outcomes after which the Worker holds the Run lease for nothing: the control plane has
#: the completion or is terminal, so the lease lifecycle stops renewing it.
RELEASES_LEASE: Final = frozenset(
    {
        CoordinatorOutcome.COMPLETED,
        CoordinatorOutcome.COMPLETED_CLEANUP_PENDING,
        CoordinatorOutcome.CONTROL_PLANE_TERMINAL,
    }
)


@dataclass(frozen=True, slots=True)
class FinishRecovery:
    """Recovery of this record ends here with `outcome` (and a code, a state, the evidence's
    unknown reason when it has one)."""

    outcome: CoordinatorOutcome
    code: Code | None = None
    state: JournalState | None = None
    unknown: str | None = None


@dataclass(frozen=True, slots=True)
class CompletionSubmission:
    """`complete_with_lease` as the Worker sends it: the journal's fences, the receipt's facts.
    `lease_token` is a `Secret` (redacted in every repr)."""

    run_id: str
    attempt_id: str
    worker_id: str
    worker_session_id: str
    worker_generation: int
    lease_generation: int
    lease_token: Secret
    expected_version: int
    callback_sequence: int
    outcome: CompletionOutcome
    exit_code: int | None


@dataclass(frozen=True, slots=True)
class AckRunning:
    """Running-ACK recovery: `acknowledge_running` with the persisted lease, handle and start
    time, then `after_running_ack`."""

    lease: OfferLease
    executor_handle: str
    executor_started_at_ms: int


@dataclass(frozen=True, slots=True)
class WriteJournal:
    """Write this event with the record's revision CAS (`journal_step` builds the revision);
    `outcome` is the result once it is durable (the completion path goes on to the receipt)."""

    event: CompletionAcknowledged | RunningAcknowledged | ControlPlaneTerminal
    outcome: CoordinatorOutcome | None = None


@dataclass(frozen=True, slots=True)
class DeleteReceipt:
    attempt_id: str


def running_ack_eligible(
    record: JournalRecord, receipt: ReceiptCheck, inspection: HandleInspection, authority: Code
) -> bool:
    """§3.12 running-ACK recovery: `started`, no receipt, clearly `running`, `current`."""
    return (
        record.state is JournalState.STARTED
        and receipt is ReceiptCheck.ABSENT
        and inspection is HandleInspection.RUNNING
        and authority is Code.CURRENT
    )


def plan_coordination(
    seen: JournalRecord, now: JournalRecord | None, reconciliation: Reconciliation
) -> CompletionSubmission | AckRunning | FinishRecovery:
    """Step 0 (module docstring): `now` is the record as read again before any side effect."""
    evidence = reconciliation.evidence
    if isinstance(evidence, CompletionObserved):
        return plan_completion(seen, now, evidence, reconciliation.submission)
    if now is None or now.revision != seen.revision or now.offer_id != seen.offer_id:
        return FinishRecovery(CoordinatorOutcome.RACED)
    if isinstance(evidence, RunningObserved):
        inspection = reconciliation.inspection or HandleInspection.PROBE_FAILED
        if running_ack_eligible(now, reconciliation.receipt, inspection, reconciliation.authority):
            handle, started = now.executor_handle, now.executor_started_at_ms
            assert handle is not None  # §3.3: required in `started`
            assert started is not None
            return AckRunning(now.offer.lease, handle, started)
        if now.state is not JournalState.STARTED:
            return FinishRecovery(CoordinatorOutcome.STILL_RUNNING, state=now.state)
    unknown = evidence.reason.value if isinstance(evidence, UnknownObserved) else None
    return FinishRecovery(CoordinatorOutcome.BLOCKED, state=now.state, unknown=unknown)


def plan_completion(
    seen: JournalRecord,
    now: JournalRecord | None,
    evidence: InboxEvidence,
    submission: Submission | None,
) -> CompletionSubmission | FinishRecovery:
    """Step 1 (and the submission it makes)."""
    if now is None or now.revision != seen.revision or now.offer_id != seen.offer_id:
        return FinishRecovery(CoordinatorOutcome.RACED)
    if not isinstance(evidence, CompletionObserved) or submission is None or not submission.ready:
        reason = None if submission is None else submission.reason
        return FinishRecovery(CoordinatorOutcome.BLOCKED, reason)
    lease = now.offer.lease
    facts = evidence.facts
    return CompletionSubmission(
        run_id=lease.run_id,
        attempt_id=lease.attempt_id,
        worker_id=lease.worker_id,
        worker_session_id=lease.worker_session_id,
        worker_generation=lease.worker_generation,
        lease_generation=lease.lease_generation,
        lease_token=lease.lease_token,
        expected_version=lease.version,
        callback_sequence=facts.callback_sequence,
        outcome=facts.outcome,
        exit_code=facts.exit_code,
    )


def after_submission(code: Code, sent: CompletionSubmission) -> WriteJournal | FinishRecovery:
    """Step 3 precondition: `completed` or `already_terminal` with identical semantics."""
    if ACK_ANSWERS[AckKind.COMPLETION].get(code) is not JournalTrigger.COMPLETION_ACKNOWLEDGED:
        return FinishRecovery(CoordinatorOutcome.SUBMISSION_REJECTED, code)
    return WriteJournal(CompletionAcknowledged(sent.callback_sequence))


def after_journal_write(ok: bool, attempt_id: str) -> DeleteReceipt | FinishRecovery:
    """Step 4 only after the final revision is durable; else keep the receipt."""
    if not ok:
        return FinishRecovery(CoordinatorOutcome.JOURNAL_WRITE_FAILED)
    return DeleteReceipt(attempt_id)


def after_receipt_delete(ok: bool) -> FinishRecovery:
    if ok:
        return FinishRecovery(CoordinatorOutcome.COMPLETED)
    return FinishRecovery(CoordinatorOutcome.COMPLETED_CLEANUP_PENDING)


def after_running_ack(code: Code) -> WriteJournal | FinishRecovery:
    """The running ACK's answer through `ACK_ANSWERS[running]`; an answer it does not list
    (a version mismatch, a refusal) writes nothing: wait for new authority."""
    trigger = ACK_ANSWERS[AckKind.RUNNING].get(code)
    if trigger is JournalTrigger.RUNNING_ACKNOWLEDGED:
        return WriteJournal(RunningAcknowledged(), CoordinatorOutcome.RUNNING_ACKNOWLEDGED)
    if trigger is JournalTrigger.CONTROL_PLANE_TERMINAL:
        return WriteJournal(ControlPlaneTerminal(), CoordinatorOutcome.CONTROL_PLANE_TERMINAL)
    return FinishRecovery(CoordinatorOutcome.WAITING_FOR_AUTHORITY, code)
