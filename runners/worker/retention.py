"""Terminal retention and settled receipt cleanup on the real ports (SPEC §3.14, §3.13, D-1;
INBOX-39, INBOX-41, CAD-15).

`TerminalRetention(journal, receipts, retention_ms, page_size=16, delete_budget=8)`: one page per
`run(cursor, observed_at_ms)`; the caller owns and persists the cursor and the cadence (no
watcher, timer, directory recursion or connection of its own).

- Eligible only (the kernel's `retention_eligible`): `completion_acknowledged` aged from
  `completion_acknowledged_at_ms` and `start_failure_acknowledged` aged from `updated_at_ms`,
  strictly older than the retention. Never `running_acknowledged`, any `recovery_required`
  (both `lease_lost_*` reasons included, INBOX-41) or any other non-final state.
- The deletion itself is the kernel's: `journal_step(record, RetentionDelete())` must say
  `JournalApplied(None)` (§3.6: only final states have that row), else the record is kept.
- `completion_acknowledged`: the record is re-read and must still be the listed revision, then
  the receipt is deleted idempotently (missing is success), then the record is removed
  conditioned on its revision. A failed receipt cleanup, a changed revision or a failed unlink
  keeps the record (`kept`, with a code).
- Cursor [decision §3.14]: the `offer_id` of the last record examined; when the delete budget
  runs out mid-page the call stops there (the rest of the page comes back next call); when the
  scan reaches the end of the journal the cursor resets to the start (`None`).
- The delete budget counts deletion attempts (eligible records acted on), failed ones
  included, so one call never does more than `delete_budget` receipt + record removals
  [decision IL-6].
- Bounds: retention 1 min..30 days with no default (`check_retention_ms`), page 1..64, deletes
  1..64, all rejected at construction.

`cleanup_settled_receipt(journal, receipts, offer_id)`: the supervisor's `settled_completion`
action (§3.13). It deletes the receipt of the record's Attempt ONLY when the journal record is
`completion_acknowledged` (the control plane accepted the completion: the Attempt is terminal)
and a present receipt names the record's Run and Attempt with the record's callback sequence
(D-1). Every other case keeps the receipt: CAD-15, cleanup never deletes a receipt of a
non-terminal Attempt.

Results carry ids, states, codes and counts only (S-1).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final, Protocol

from kernel.specs.budgets import HARD_LIMITS, IntRange, budget_for, check_in_range
from kernel.specs.codes import Code
from kernel.specs.journal import JournalState
from kernel.specs.states import Profile
from kernel.worker.journal import JournalApplied, RetentionDelete, journal_step
from kernel.worker.lease_loss import check_retention_ms, retention_eligible
from kernel.worker.record import JournalRecord
from runners.worker.journal.port import JournalError, JournalStore
from runners.worker.posix.receipts import Receipt, ReceiptErrorCode, ReceiptStoreError

__all__ = [
    "DEFAULT_DELETE_BUDGET",
    "DEFAULT_PAGE_SIZE",
    "KeptRecord",
    "ReceiptCleanup",
    "ReceiptCleanupResult",
    "ReceiptPort",
    "RetentionKeep",
    "RetentionResult",
    "TerminalRetention",
    "cleanup_settled_receipt",
]


def _defaults() -> tuple[int, int]:
    row = budget_for(Profile.WORKER).terminal_retention
    if row is None:  # pragma: no cover - §6.3 gives the Worker profile a retention row
        raise RuntimeError("the worker budget has no terminal retention row")
    return row.page_size, row.deletes_per_call


#: §3.14 / §6.3: page 16, deletes 8 per call (read from the budget table, CAD-11).
DEFAULT_PAGE_SIZE, DEFAULT_DELETE_BUDGET = _defaults()
_PAGE_RANGE: Final = IntRange(1, HARD_LIMITS.terminal_retention_page_size_max)
_DELETE_RANGE: Final = IntRange(1, HARD_LIMITS.terminal_retention_deletes_max)


class ReceiptPort(Protocol):
    """The completion receipt store as cleanup uses it (`CompletionReceiptStore` fits)."""

    def read(self, attempt_id: str) -> Receipt | None: ...

    def delete(self, attempt_id: str) -> None: ...


# -- settled receipt cleanup (§3.13 settled_completion, CAD-15) ---------------------------------


class ReceiptCleanup(enum.StrEnum):
    """What `cleanup_settled_receipt` did [decision IL-7: names]."""

    CLEANED = "cleaned"  # the receipt was deleted
    ALREADY_CLEAN = "already_clean"  # no receipt (idempotent success)
    RECORD_MISSING = "record_missing"  # no journal record: no proof the Attempt is terminal
    NOT_SETTLED = "not_settled"  # the record is not completion_acknowledged (CAD-15)
    RECEIPT_MISMATCH = "receipt_mismatch"  # Run, Attempt or callback sequence differ (D-1)
    JOURNAL_READ_FAILED = "journal_read_failed"
    RECEIPT_READ_FAILED = "receipt_read_failed"  # unreadable or corrupt: never deleted
    RECEIPT_DELETE_FAILED = "receipt_delete_failed"  # still there; a later pass retries


_SETTLED: Final = frozenset({ReceiptCleanup.CLEANED, ReceiptCleanup.ALREADY_CLEAN})


@dataclass(frozen=True, slots=True)
class ReceiptCleanupResult:
    """`offer_id`, the outcome, the record's state when one was read, and the store's or the
    journal's code on a failure (S-1: no receipt content, no token)."""

    offer_id: str
    outcome: ReceiptCleanup
    state: JournalState | None = None
    code: Code | ReceiptErrorCode | None = None

    @property
    def settled(self) -> bool:
        """True when no receipt of this settled Attempt is left (for `overall`, §3.13)."""
        return self.outcome in _SETTLED


def _receipt_matches(receipt: Receipt, record: JournalRecord) -> bool:
    lease = record.offer.lease
    return (
        receipt.run_id == lease.run_id
        and receipt.attempt_id == lease.attempt_id
        and receipt.callback_sequence == record.callback_sequence
    )


def cleanup_settled_receipt(
    journal: JournalStore, receipts: ReceiptPort, offer_id: str
) -> ReceiptCleanupResult:
    """Delete the receipt of `offer_id`'s Attempt only when its record is
    `completion_acknowledged` and a present receipt matches it (CAD-15, D-1)."""

    def result(
        outcome: ReceiptCleanup,
        state: JournalState | None = None,
        code: Code | ReceiptErrorCode | None = None,
    ) -> ReceiptCleanupResult:
        return ReceiptCleanupResult(offer_id, outcome, state, code)

    try:
        record = journal.read(offer_id)
    except JournalError as exc:
        return result(ReceiptCleanup.JOURNAL_READ_FAILED, code=exc.code)
    if record is None:
        return result(ReceiptCleanup.RECORD_MISSING)
    state = record.state
    if state is not JournalState.COMPLETION_ACKNOWLEDGED:
        return result(ReceiptCleanup.NOT_SETTLED, state)
    attempt_id = record.offer.lease.attempt_id
    try:
        receipt = receipts.read(attempt_id)
    except ReceiptStoreError as exc:
        return result(ReceiptCleanup.RECEIPT_READ_FAILED, state, exc.code)
    if receipt is None:
        return result(ReceiptCleanup.ALREADY_CLEAN, state)
    if not _receipt_matches(receipt, record):
        return result(ReceiptCleanup.RECEIPT_MISMATCH, state)
    try:
        receipts.delete(attempt_id)
    except ReceiptStoreError as exc:
        return result(ReceiptCleanup.RECEIPT_DELETE_FAILED, state, exc.code)
    return result(ReceiptCleanup.CLEANED, state)


# -- terminal retention (§3.14) -------------------------------------------------------------


class RetentionKeep(enum.StrEnum):
    """Why an eligible record was kept [decision IL-7: names]."""

    RECEIPT_CLEANUP_FAILED = "receipt_cleanup_failed"
    REVISION_CONFLICT = "revision_conflict"  # the record changed or vanished since listed
    REMOVE_FAILED = "remove_failed"  # the conditional remove (unlink / DELETE) failed
    TRANSITION_REFUSED = "transition_refused"  # the kernel refused RetentionDelete


@dataclass(frozen=True, slots=True)
class KeptRecord:
    offer_id: str
    reason: RetentionKeep
    code: Code | ReceiptErrorCode | None = None


@dataclass(frozen=True, slots=True)
class RetentionResult:
    """One call: the next cursor (None = from the start), how many records were examined,
    the offer ids removed, the eligible records kept with their codes, and `code` when the
    page could not be listed (nothing examined; the cursor is unchanged)."""

    cursor: str | None
    examined: int
    deleted_offer_ids: tuple[str, ...] = ()
    kept: tuple[KeptRecord, ...] = ()
    code: Code | None = None

    @property
    def deleted(self) -> int:
        return len(self.deleted_offer_ids)

    @property
    def kept_codes(self) -> tuple[RetentionKeep, ...]:
        return tuple(k.reason for k in self.kept)


class TerminalRetention:
    """§3.14 over one journal and one receipt store; see the module docstring."""

    __slots__ = ("_delete_budget", "_journal", "_page_size", "_receipts", "_retention_ms")

    def __init__(
        self,
        journal: JournalStore,
        receipts: ReceiptPort,
        retention_ms: int,
        page_size: int = DEFAULT_PAGE_SIZE,
        delete_budget: int = DEFAULT_DELETE_BUDGET,
    ) -> None:
        check_retention_ms(retention_ms)
        self._page_size = check_in_range(page_size, _PAGE_RANGE, field="page_size")
        self._delete_budget = check_in_range(delete_budget, _DELETE_RANGE, field="delete_budget")
        self._retention_ms = retention_ms
        self._journal = journal
        self._receipts = receipts

    def __repr__(self) -> str:
        return (
            f"TerminalRetention(retention_ms={self._retention_ms}, page_size={self._page_size}, "
            f"delete_budget={self._delete_budget})"
        )

    def run(self, cursor: str | None, observed_at_ms: int) -> RetentionResult:
        """One page after `cursor` at one observation time."""
        if type(observed_at_ms) is not int or observed_at_ms < 0:
            raise ValueError("observed_at_ms must be a non-negative integer")
        try:
            page = self._journal.list(cursor, self._page_size)
        except JournalError as exc:
            return RetentionResult(cursor, 0, code=exc.code)
        records = page.records
        deleted: list[str] = []
        kept: list[KeptRecord] = []
        attempts = 0
        last = cursor
        for index, record in enumerate(records):
            last = record.offer_id
            if not retention_eligible(record, observed_at_ms, self._retention_ms):
                continue
            attempts += 1
            refusal = self._delete(record, observed_at_ms)
            if refusal is None:
                deleted.append(record.offer_id)
            else:
                kept.append(refusal)
            if attempts >= self._delete_budget and index + 1 < len(records):
                # Budget spent mid-page: stop here; the rest comes back next call.
                return RetentionResult(last, index + 1, tuple(deleted), tuple(kept))
        # The whole page was examined: at the end of the journal, start over.
        next_cursor = last if page.has_more else None
        return RetentionResult(next_cursor, len(records), tuple(deleted), tuple(kept))

    def _delete(self, record: JournalRecord, observed_at_ms: int) -> KeptRecord | None:
        offer_id = record.offer_id
        outcome = journal_step(record, RetentionDelete(), observed_at_ms)
        if not isinstance(outcome, JournalApplied) or outcome.record is not None:
            return KeptRecord(offer_id, RetentionKeep.TRANSITION_REFUSED, outcome.code)
        if record.state is JournalState.COMPLETION_ACKNOWLEDGED:
            kept = self._delete_receipt(record)
            if kept is not None:
                return kept
        try:
            self._journal.remove(offer_id, record.revision)
        except JournalError as exc:
            reason = (
                RetentionKeep.REVISION_CONFLICT
                if exc.code is Code.JOURNAL_REVISION_CONFLICT
                else RetentionKeep.REMOVE_FAILED
            )
            return KeptRecord(offer_id, reason, exc.code)
        return None

    def _delete_receipt(self, record: JournalRecord) -> KeptRecord | None:
        """Receipts first: only for the record still at the listed revision (so a receipt is
        never deleted on the word of a stale listing), idempotently (missing is success)."""
        offer_id = record.offer_id
        try:
            current = self._journal.read(offer_id)
        except JournalError as exc:
            return KeptRecord(offer_id, RetentionKeep.RECEIPT_CLEANUP_FAILED, exc.code)
        if current != record:
            return KeptRecord(
                offer_id, RetentionKeep.REVISION_CONFLICT, Code.JOURNAL_REVISION_CONFLICT
            )
        try:
            self._receipts.delete(record.offer.lease.attempt_id)
        except ReceiptStoreError as exc:
            return KeptRecord(offer_id, RetentionKeep.RECEIPT_CLEANUP_FAILED, exc.code)
        return None
