"""Terminal retention and settled receipt cleanup, pure (SPEC §3.14, §3.13, D-1; INBOX-39,
INBOX-41, CAD-15).

Retention (§3.14): `plan_page(records, has_more, cursor, observed_at_ms, retention_ms,
delete_budget)` decides one call from one listed page: which records are deleted, in order, and
the cursor and count to report. Only `RETENTION_ORDER`'s states are eligible, aged from the
field `RETENTION_AGE_FROM` names and strictly older than an explicit retention of 1 minute to 30
days (`check_retention_ms`); nothing else ever is: not `running_acknowledged` (INBOX-07), not any
`recovery_required` (both `lease_lost_*` reasons included, INBOX-41), no non-final state. Each
deleted record is deleted by the steps `RETENTION_ORDER` lists for its state, in that order
(`steps_for`); a failed step keeps the record, with the reason `kept_reason` names.
Cursor [decision §3.14]: the `offer_id` of the last record examined; when the delete budget
runs out mid-page the call stops there (the rest of the page comes back next call); when the
scan reaches the end of the journal the cursor resets to the start (`None`). The budget counts
deletion attempts (eligible records acted on), failed ones included [decision IL-6].

Settled receipt cleanup (§3.13 `settled_completion`, CAD-15): `cleanup_of(record)` and
`after_receipt_read(record, receipt)` say whether the receipt of the record's Attempt may be
deleted: only when the journal record is `completion_acknowledged` (the control plane accepted
the completion: the Attempt is terminal) and a present receipt names the record's Run and
Attempt with the record's callback sequence (D-1). Every other case keeps the receipt.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from kernel.specs.budgets import HARD_LIMITS
from kernel.specs.codes import Code
from kernel.specs.journal import (
    RETENTION_AGE_FROM,
    RETENTION_ORDER,
    JournalState,
    RetentionStep,
)
from kernel.worker.record import JournalRecord

__all__ = [
    "CleanupDecision",
    "DeleteSettledReceipt",
    "ReadSettledReceipt",
    "ReceiptCleanup",
    "RetentionKeep",
    "RetentionPlan",
    "after_receipt_read",
    "check_retention_ms",
    "cleanup_of",
    "kept_reason",
    "plan_page",
    "retention_eligible",
    "steps_for",
]


def check_retention_ms(retention_ms: int) -> None:
    """§3.14: no default; 1 minute to 30 days. Raises `ValueError` otherwise."""
    window = HARD_LIMITS.terminal_retention_ms
    if retention_ms not in window:
        raise ValueError(f"retention must be set explicitly, {window.minimum}..{window.maximum} ms")


def retention_eligible(record: JournalRecord, observed_at_ms: int, retention_ms: int) -> bool:
    """§3.14: a final record older than the retention; never an active, lease-lost or
    `running_acknowledged` one (INBOX-07, INBOX-39, INBOX-41)."""
    field = RETENTION_AGE_FROM.get(record.state)
    if field is None or record.state not in RETENTION_ORDER:
        return False
    since = getattr(record, field)
    return isinstance(since, int) and observed_at_ms - since > retention_ms


def steps_for(record: JournalRecord) -> tuple[RetentionStep, ...]:
    """The steps that delete an eligible record, in their order (§3.14: receipts first)."""
    return RETENTION_ORDER[record.state]


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    """One call's decision: `delete` the records, in order; then report `cursor` and
    `examined`."""

    delete: tuple[JournalRecord, ...]
    cursor: str | None
    examined: int


def plan_page(
    records: Sequence[JournalRecord],
    *,
    has_more: bool,
    cursor: str | None,
    observed_at_ms: int,
    retention_ms: int,
    delete_budget: int,
) -> RetentionPlan:
    """One page of §3.14 (module docstring)."""
    delete: list[JournalRecord] = []
    last = cursor
    for index, record in enumerate(records):
        last = record.offer_id
        if not retention_eligible(record, observed_at_ms, retention_ms):
            continue
        delete.append(record)
        if len(delete) >= delete_budget and index + 1 < len(records):
            # Budget spent mid-page: stop here; the rest comes back next call.
            return RetentionPlan(tuple(delete), last, index + 1)
    # The whole page was examined: at the end of the journal, start over.
    return RetentionPlan(tuple(delete), last if has_more else None, len(records))


class RetentionKeep(enum.StrEnum):
    """Why an eligible record was kept [decision IL-7: names]."""

    RECEIPT_CLEANUP_FAILED = "receipt_cleanup_failed"
    REVISION_CONFLICT = "revision_conflict"  # the record changed or vanished since listed
    REMOVE_FAILED = "remove_failed"  # the conditional remove (unlink / DELETE) failed
    TRANSITION_REFUSED = "transition_refused"  # the kernel refused RetentionDelete


def kept_reason(step: RetentionStep, code: Code | str | None, *, refused: bool) -> RetentionKeep:
    """The reason a failed `step` keeps its record (`refused`: the kernel refused the step)."""
    if refused:
        return RetentionKeep.TRANSITION_REFUSED
    if code is Code.JOURNAL_REVISION_CONFLICT:
        return RetentionKeep.REVISION_CONFLICT
    if step is RetentionStep.REMOVE_RECORD:
        return RetentionKeep.REMOVE_FAILED
    return RetentionKeep.RECEIPT_CLEANUP_FAILED


# -- settled receipt cleanup (§3.13 settled_completion, CAD-15) ---------------------------------
class ReceiptCleanup(enum.StrEnum):
    """What the settled receipt cleanup did [decision IL-7: names]."""

    CLEANED = "cleaned"  # the receipt was deleted
    ALREADY_CLEAN = "already_clean"  # no receipt (idempotent success)
    RECORD_MISSING = "record_missing"  # no journal record: no proof the Attempt is terminal
    NOT_SETTLED = "not_settled"  # the record is not completion_acknowledged (CAD-15)
    RECEIPT_MISMATCH = "receipt_mismatch"  # Run, Attempt or callback sequence differ (D-1)
    JOURNAL_READ_FAILED = "journal_read_failed"
    RECEIPT_READ_FAILED = "receipt_read_failed"  # unreadable or corrupt: never deleted
    RECEIPT_DELETE_FAILED = "receipt_delete_failed"  # still there; a later pass retries


#: The cleanup outcomes after which no receipt of the settled Attempt is left.
CLEANUP_SETTLED: Final = frozenset({ReceiptCleanup.CLEANED, ReceiptCleanup.ALREADY_CLEAN})


@dataclass(frozen=True, slots=True)
class ReadSettledReceipt:
    """Read the receipt of this Attempt, then `after_receipt_read`."""

    attempt_id: str


@dataclass(frozen=True, slots=True)
class DeleteSettledReceipt:
    """Delete the receipt of this Attempt (`cleaned`, or `receipt_delete_failed`)."""

    attempt_id: str


CleanupDecision = ReadSettledReceipt | DeleteSettledReceipt | ReceiptCleanup


def cleanup_of(record: JournalRecord | None) -> ReadSettledReceipt | ReceiptCleanup:
    """Only a `completion_acknowledged` record's Attempt is known terminal (CAD-15)."""
    if record is None:
        return ReceiptCleanup.RECORD_MISSING
    if record.state is not JournalState.COMPLETION_ACKNOWLEDGED:
        return ReceiptCleanup.NOT_SETTLED
    return ReadSettledReceipt(record.offer.lease.attempt_id)


def after_receipt_read(
    record: JournalRecord, receipt: tuple[str, str, int] | None
) -> DeleteSettledReceipt | ReceiptCleanup:
    """`receipt` is the present receipt's `(run_id, attempt_id, callback_sequence)`, or `None`
    when there is none (idempotent success). Only a receipt that names the record's Run and
    Attempt with its callback sequence is deleted (D-1)."""
    if receipt is None:
        return ReceiptCleanup.ALREADY_CLEAN
    lease = record.offer.lease
    if receipt != (lease.run_id, lease.attempt_id, record.callback_sequence):
        return ReceiptCleanup.RECEIPT_MISMATCH
    return DeleteSettledReceipt(lease.attempt_id)
