"""Terminal retention and settled receipt cleanup on the real ports (SPEC §3.14, §3.13, D-1;
INBOX-39, INBOX-41, CAD-15).

`TerminalRetention(journal, receipts, retention_ms, page_size=16, delete_budget=8)`: one page per
`run(cursor, observed_at_ms)`; the caller owns and persists the cursor and the cadence (no
watcher, timer, directory recursion or connection of its own). What is deleted, in which order,
and which cursor is reported is the kernel's (`kernel.worker.retention.plan_page`; the order of
each record's steps is `RETENTION_ORDER`: for `completion_acknowledged` the record is re-read and
must still be the listed revision, then the receipt is deleted idempotently, then the record is
removed conditioned on its revision through the journal engine, which asks the kernel's
`RetentionDelete` first). This class performs the steps and reports what each did; a failed
step keeps the record (`kept`, with the reason `kept_reason` names and the port's code).
Bounds: retention 1 min..30 days with no default, page 1..64, deletes 1..64, all rejected at
construction.

`cleanup_settled_receipt(journal, receipts, offer_id)`: the supervisor's `settled_completion`
action (§3.13): the kernel's `cleanup_of` / `after_receipt_read` decide whether the receipt of
the record's Attempt may be deleted (only a `completion_acknowledged` record's, and only a
receipt that matches it, CAD-15, D-1).

Results carry ids, states, codes and counts only (S-1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from kernel.specs import (
    HARD_LIMITS,
    Code,
    IntRange,
    JournalState,
    Profile,
    RetentionStep,
    budget_for,
    check_in_range,
)
from kernel.worker import (
    CLEANUP_SETTLED,
    DeleteSettledReceipt,
    JournalRecord,
    ReceiptCleanup,
    Removed,
    RetentionKeep,
    after_receipt_read,
    check_retention_ms,
    cleanup_of,
    kept_reason,
    plan_page,
    steps_for,
)
from runners.worker.journal.engine import JournalEngine
from runners.worker.journal.port import JournalError, JournalStore
from runners.worker.posix.receipts import Receipt, ReceiptErrorCode, ReceiptStoreError

__all__ = [
    "DEFAULT_DELETE_BUDGET",
    "DEFAULT_PAGE_SIZE",
    "KeptRecord",
    "ReceiptCleanup",
    "ReceiptCleanupResult",
    "ReceiptStorePort",
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


class ReceiptStorePort(Protocol):
    """The completion receipt store as cleanup uses it (`CompletionReceiptStore` fits)."""

    def read(self, attempt_id: str) -> Receipt | None: ...

    def delete(self, attempt_id: str) -> None: ...


# -- settled receipt cleanup (§3.13 settled_completion, CAD-15) ---------------------------------


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
        return self.outcome in CLEANUP_SETTLED


def _receipt_ids(receipt: Receipt | None) -> tuple[str, str, int] | None:
    return (
        None if receipt is None else (receipt.run_id, receipt.attempt_id, receipt.callback_sequence)
    )


def cleanup_settled_receipt(
    journal: JournalStore, receipts: ReceiptStorePort, offer_id: str
) -> ReceiptCleanupResult:
    """Delete the receipt of `offer_id`'s Attempt only when the kernel says so (CAD-15, D-1)."""
    try:
        record = journal.read(offer_id)
    except JournalError as exc:
        return ReceiptCleanupResult(offer_id, ReceiptCleanup.JOURNAL_READ_FAILED, code=exc.code)
    state = None if record is None else record.state
    read = cleanup_of(record)
    if isinstance(read, ReceiptCleanup):
        return ReceiptCleanupResult(offer_id, read, state)
    assert record is not None
    try:
        receipt = receipts.read(read.attempt_id)
    except ReceiptStoreError as exc:
        return ReceiptCleanupResult(offer_id, ReceiptCleanup.RECEIPT_READ_FAILED, state, exc.code)
    delete = after_receipt_read(record, _receipt_ids(receipt))
    if not isinstance(delete, DeleteSettledReceipt):
        return ReceiptCleanupResult(offer_id, delete, state)
    try:
        receipts.delete(delete.attempt_id)
    except ReceiptStoreError as exc:
        return ReceiptCleanupResult(offer_id, ReceiptCleanup.RECEIPT_DELETE_FAILED, state, exc.code)
    return ReceiptCleanupResult(offer_id, ReceiptCleanup.CLEANED, state)


# -- terminal retention (§3.14) -------------------------------------------------------------


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

    __slots__ = (
        "_delete_budget",
        "_engine",
        "_journal",
        "_page_size",
        "_receipts",
        "_retention_ms",
    )

    def __init__(
        self,
        journal: JournalStore,
        receipts: ReceiptStorePort,
        retention_ms: int,
        page_size: int = DEFAULT_PAGE_SIZE,
        delete_budget: int = DEFAULT_DELETE_BUDGET,
    ) -> None:
        check_retention_ms(retention_ms)
        self._page_size = check_in_range(page_size, _PAGE_RANGE, field="page_size")
        self._delete_budget = check_in_range(delete_budget, _DELETE_RANGE, field="delete_budget")
        self._retention_ms = retention_ms
        self._journal = journal
        self._engine = JournalEngine(journal, lambda: 0)
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
        plan = plan_page(
            page.records,
            has_more=page.has_more,
            cursor=cursor,
            observed_at_ms=observed_at_ms,
            retention_ms=self._retention_ms,
            delete_budget=self._delete_budget,
        )
        deleted: list[str] = []
        kept: list[KeptRecord] = []
        for record in plan.delete:
            refusal = self._delete(record, observed_at_ms)
            if refusal is None:
                deleted.append(record.offer_id)
            else:
                kept.append(refusal)
        return RetentionResult(plan.cursor, plan.examined, tuple(deleted), tuple(kept))

    def _delete(self, record: JournalRecord, observed_at_ms: int) -> KeptRecord | None:
        """The kernel's steps for this record, in their order; the first failure keeps it."""
        for step in steps_for(record):
            failure = self._perform(step, record, observed_at_ms)
            if failure is not None:
                code, refused = failure
                return KeptRecord(record.offer_id, kept_reason(step, code, refused=refused), code)
        return None

    def _perform(
        self, step: RetentionStep, record: JournalRecord, observed_at_ms: int
    ) -> tuple[Code | ReceiptErrorCode | None, bool] | None:
        """One step; `None` when it succeeded, else `(code, refused by the kernel)`."""
        if step is RetentionStep.CONFIRM_REVISION:
            try:
                current = self._journal.read(record.offer_id)
            except JournalError as exc:
                return exc.code, False
            return None if current == record else (Code.JOURNAL_REVISION_CONFLICT, False)
        if step is RetentionStep.DELETE_RECEIPT:
            try:
                self._receipts.delete(record.offer.lease.attempt_id)
            except ReceiptStoreError as exc:
                return exc.code, False
            return None
        removed = self._engine.remove(record, clock_ms=observed_at_ms)
        if isinstance(removed, Removed):
            return None
        return removed.code, removed.refused
