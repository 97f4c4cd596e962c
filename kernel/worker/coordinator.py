"""The recovery Coordinator's irreversible order, pure (SPEC §3.12; INBOX-34..INBOX-36).

Completion recovery for one record, under the journal ownership:
1. `plan_completion(seen, now, evidence, submission)`: the record must still be the revision
   the Reconciler saw (else `raced`); only `completion_observed` with a `ready` submission is
   submitted (`ready` is never "already submitted"). The submission carries the journal's own
   Worker session, lease generation, token and version, and the receipt's sequence, outcome
   and exit code: a replay after a crash is exact (version + 1 on the control plane, T6r).
2. `after_submission(code)`: `completed` or `already_terminal` -> write
   `completion_acknowledged` (the event); anything else -> `submission_rejected(code)`.
3. `after_journal_write(ok)`: only a durable final revision allows deleting the receipt; a
   failed write keeps the receipt, so the next pass resubmits the identical command and gets
   `already_terminal`.
4. `after_receipt_delete(ok)`: `completed`, or `completed_cleanup_pending` (the state never
   goes back; later passes retry only the deletion).

Running-ACK recovery: `running_ack_eligible(...)` only for `started` + `current` authority +
a clearly `running` identity + no receipt, with the persisted lease version;
`after_running_ack(code)` -> `running_acknowledged`, `recovery_required(control_plane_terminal)`
on a terminal control plane, and nothing on a version mismatch (no guessing, no retry loop).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kernel.identity import Secret
from kernel.specs.codes import Code
from kernel.specs.journal import JournalState
from kernel.specs.states import CompletionOutcome
from kernel.worker.journal import (
    CompletionAcknowledged,
    ControlPlaneTerminal,
    RunningAcknowledged,
)
from kernel.worker.reconciler import (
    CompletionObserved,
    InboxEvidence,
    Inspection,
    ReceiptCheck,
    Submission,
)
from kernel.worker.record import JournalRecord


class CoordinatorResult(enum.StrEnum):
    """§3.12 results [decision: names], all redacted (S-1)."""

    COMPLETED = "completed"
    COMPLETED_CLEANUP_PENDING = "completed_cleanup_pending"
    SUBMISSION_REJECTED = "submission_rejected"
    JOURNAL_WRITE_FAILED = "journal_write_failed"
    BLOCKED = "blocked"
    RACED = "raced"


@dataclass(frozen=True, slots=True)
class Finish:
    result: CoordinatorResult
    code: Code | None = None


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
class WriteJournal:
    """Write this event with the record's revision CAS (`journal_step` builds the revision)."""

    event: CompletionAcknowledged | RunningAcknowledged | ControlPlaneTerminal


@dataclass(frozen=True, slots=True)
class DeleteReceipt:
    attempt_id: str


#: Control-plane answers to a completion that mean "the completion is the fact".
ACCEPTED_COMPLETION = frozenset({Code.COMPLETED, Code.ALREADY_TERMINAL})


def plan_completion(
    seen: JournalRecord,
    now: JournalRecord | None,
    evidence: InboxEvidence,
    submission: Submission | None,
) -> CompletionSubmission | Finish:
    """Step 1 (and the submission it makes)."""
    if now is None or now.revision != seen.revision or now.offer_id != seen.offer_id:
        return Finish(CoordinatorResult.RACED)
    if not isinstance(evidence, CompletionObserved) or submission is None or not submission.ready:
        reason = None if submission is None else submission.reason
        return Finish(CoordinatorResult.BLOCKED, reason)
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


def after_submission(code: Code, sent: CompletionSubmission) -> WriteJournal | Finish:
    """Step 3 precondition: `completed` or `already_terminal` with identical semantics."""
    if code not in ACCEPTED_COMPLETION:
        return Finish(CoordinatorResult.SUBMISSION_REJECTED, code)
    return WriteJournal(CompletionAcknowledged(sent.callback_sequence))


def after_journal_write(ok: bool, attempt_id: str) -> DeleteReceipt | Finish:
    """Step 4 only after the final revision is durable; else keep the receipt."""
    if not ok:
        return Finish(CoordinatorResult.JOURNAL_WRITE_FAILED)
    return DeleteReceipt(attempt_id)


def after_receipt_delete(ok: bool) -> Finish:
    if ok:
        return Finish(CoordinatorResult.COMPLETED)
    return Finish(CoordinatorResult.COMPLETED_CLEANUP_PENDING)


def running_ack_eligible(
    record: JournalRecord, receipt: ReceiptCheck, inspection: Inspection, authority_value: Code
) -> bool:
    """§3.12 running-ACK recovery: `started`, no receipt, clearly `running`, `current`."""
    return (
        record.state is JournalState.STARTED
        and receipt is ReceiptCheck.ABSENT
        and inspection is Inspection.RUNNING
        and authority_value is Code.CURRENT
    )


def after_running_ack(code: Code) -> WriteJournal | None:
    """Applied or replayed -> `running_acknowledged`; terminal -> `control_plane_terminal`;
    a version mismatch (or any other refusal) -> nothing: wait for new authority."""
    if code in (Code.APPLIED, Code.ALREADY_RUNNING, Code.ALREADY_APPLIED):
        return WriteJournal(RunningAcknowledged())
    if code is Code.ALREADY_TERMINAL:
        return WriteJournal(ControlPlaneTerminal())
    return None
