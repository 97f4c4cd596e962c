"""The startup auditor's rules as a pure accumulator (SPEC §3.10 U-2..U-5; INBOX-25, INBOX-26).

The auditor itself (runner side) reads the journal page by page; after each page it calls
`audit_page(progress, page)`, which checks the page against U-3 and the budgets of U-2 and
either returns the new progress or `Rejected(code)`: `AUDIT_CURSOR_INVALID` for a repeated,
regressing, skipping or oversized page, `AUDIT_BUDGET_EXHAUSTED` for more data after the last
allowed page or beyond 1024 records. A read or parse error is the auditor's own
`AUDIT_JOURNAL_CORRUPT`. Only a progress whose last page had no more data is complete;
`audit_result` refuses any other, so no partial scan is ever reported as complete.

Entries carry ids, states, reasons and classes only: no lease token, command or ExecutionSpec
(S-1, U-5).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import icontract

from kernel.outcomes import Rejected
from kernel.specs.budgets import HARD_LIMITS, Paging
from kernel.specs.codes import Code
from kernel.specs.inbox_lifecycle import RECOVERY_CLASSES
from kernel.specs.journal import (
    AUDIT_CLASSIFICATION,
    NEEDS_RECONCILIATION,
    AuditClass,
    JournalState,
    RecoveryReason,
)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """U-5: one record as the audit reports it."""

    offer_id: str
    attempt_id: str
    state: JournalState
    recovery_reason: RecoveryReason | None
    classification: AuditClass


def entry(
    offer_id: str, attempt_id: str, state: JournalState, reason: RecoveryReason | None = None
) -> AuditEntry:
    """The entry of one record, classified by U-4."""
    return AuditEntry(offer_id, attempt_id, state, reason, AUDIT_CLASSIFICATION[state])


@dataclass(frozen=True, slots=True)
class AuditPage:
    """What one `list(after_cursor, limit)` returned (F-8)."""

    entries: tuple[AuditEntry, ...]
    cursor: str | None
    has_more: bool


@dataclass(frozen=True, slots=True)
class AuditProgress:
    """The scan so far: the budget, the pages read, the entries in order, the cursor."""

    budget: Paging
    pages: int = 0
    entries: tuple[AuditEntry, ...] = ()
    cursor: str | None = None
    complete: bool = False


@dataclass(frozen=True, slots=True)
class AuditResult:
    """U-5: the entries in `offer_id` order, the count per class, and the status."""

    entries: tuple[AuditEntry, ...]
    counts: Mapping[AuditClass, int]
    status: Code  # READY or RECONCILIATION_REQUIRED


def check_budget(budget: Paging, capacity: int) -> None:
    """U-2: within the hard limits (64 per page, 16 pages), and `page_size x pages` covers the
    journal capacity [decision]. Raises `ValueError` (configuration, not a transition)."""
    limit = HARD_LIMITS.startup_auditor
    if not 1 <= budget.page_size <= limit.page_size_max:
        raise ValueError(f"audit page size must be 1..{limit.page_size_max}")
    if limit.pages_max is not None and not 1 <= budget.pages <= limit.pages_max:
        raise ValueError(f"audit pages must be 1..{limit.pages_max}")
    if budget.max_items < capacity:
        raise ValueError("audit page size x pages must cover the journal capacity")


@icontract.ensure(
    lambda progress, result: (
        isinstance(result, Rejected)
        or (result.pages == progress.pages + 1 and len(result.entries) >= len(progress.entries))
    )
)
def audit_page(progress: AuditProgress, page: AuditPage) -> AuditProgress | Rejected:
    """U-3: apply one page to the scan, or refuse it with its code."""
    if progress.complete:
        return Rejected(Code.AUDIT_CURSOR_INVALID)  # a page after the end
    if progress.pages >= progress.budget.pages:
        return Rejected(Code.AUDIT_BUDGET_EXHAUSTED)  # more data after the last allowed page
    ids = [e.offer_id for e in page.entries]
    if len(ids) > progress.budget.page_size:
        return Rejected(Code.AUDIT_CURSOR_INVALID)  # oversized
    previous = progress.cursor
    ascending = all(a < b for a, b in itertools.pairwise(ids))
    after = previous is None or not ids or ids[0] > previous
    if not ascending or not after:
        return Rejected(Code.AUDIT_CURSOR_INVALID)  # repeated or regressing
    expected_cursor = ids[-1] if ids else previous
    if page.cursor != expected_cursor or (page.has_more and not ids):
        return Rejected(Code.AUDIT_CURSOR_INVALID)  # skipping, or a stalled cursor
    entries = progress.entries + page.entries
    if len(entries) > HARD_LIMITS.startup_auditor_records_max:
        return Rejected(Code.AUDIT_BUDGET_EXHAUSTED)
    return AuditProgress(
        budget=progress.budget,
        pages=progress.pages + 1,
        entries=entries,
        cursor=page.cursor,
        complete=not page.has_more,
    )


def audit_result(progress: AuditProgress) -> AuditResult | Rejected:
    """U-5 for a complete scan; an incomplete one is `AUDIT_BUDGET_EXHAUSTED` (never a partial
    result reported as complete)."""
    if not progress.complete:
        return Rejected(Code.AUDIT_BUDGET_EXHAUSTED)
    counts = dict.fromkeys(AuditClass, 0)
    for e in progress.entries:
        counts[e.classification] += 1
    needs = any(e.classification in NEEDS_RECONCILIATION for e in progress.entries)
    status = Code.RECONCILIATION_REQUIRED if needs else Code.READY
    return AuditResult(progress.entries, MappingProxyType(counts), status)


def needs_recovery(result: AuditResult) -> bool:
    """§3.10 [decision]: an injected startup recovery runs when the audit has an entry of one of
    `RECOVERY_CLASSES` (exactly those the supervisor plans an action for, §3.13)."""
    return any(e.classification in RECOVERY_CLASSES for e in result.entries)
