"""The startup auditor on the real journal port (SPEC §3.10 U-1..U-5; INBOX-25..INBOX-27).

U-1: runs after `acquire()` and is strictly read-only. `StartupAuditor` keeps nothing of the
journal but its bound `list` method (the capacity is checked once, at construction): no code
path in it creates, replaces or removes a record, and it takes no ACK, Executor, stop or delete
port at all, so it cannot replay an ACK, spawn, signal or delete.

Each `audit()` pages through `list(cursor, page_size)` from the start and hands every page to
the kernel's `audit_page` (U-3: cursor and size rules, U-2: budgets); the kernel's
`audit_result` turns a complete scan into U-5's result and refuses an incomplete one
(`AUDIT_BUDGET_EXHAUSTED`), so no partial scan is ever reported as complete. No page beyond
`budget.pages` is read: an incomplete scan after the last allowed page is the kernel's
refusal without another read.

A `JournalError` or a decode error while reading is `AUDIT_JOURNAL_CORRUPT` (U-3); the
refusal keeps the journal's own code (`JOURNAL_CORRUPT`, `JOURNAL_COMPROMISED`, ...) for
diagnosis, never the exception text (S-1). Anything else raised by the port is a bug and
propagates: the inbox lifecycle turns it into a refusal (§3.10 "any audit exception").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kernel import Rejected
from kernel.specs import Code, Paging
from kernel.worker import (
    AuditEntry,
    AuditPage,
    AuditProgress,
    AuditResult,
    JournalCorrupt,
    JournalRecord,
    audit_page,
    audit_result,
    check_budget,
    entry,
)
from runners.worker.journal.port import JournalError, JournalPage

__all__ = ["AuditRefused", "AuditedJournal", "StartupAuditor"]


class AuditedJournal(Protocol):
    """What the auditor needs of a journal: listing (F-8) and its capacity (U-2). Both journal
    adapters (`FileJournal`, `SqliteJournal`) have these."""

    def list(self, after: str | None, limit: int) -> JournalPage: ...

    @property
    def capacity(self) -> int: ...


@dataclass(frozen=True, slots=True)
class AuditRefused:
    """The audit did not complete: `code` is `AUDIT_CURSOR_INVALID`, `AUDIT_BUDGET_EXHAUSTED`
    or `AUDIT_JOURNAL_CORRUPT`; `journal_code` is the journal's code when a read failed;
    `pages` how many pages were accepted before. Ids and codes only (S-1)."""

    code: Code
    journal_code: Code | None = None
    pages: int = 0


def _entry(record: JournalRecord) -> AuditEntry:
    """U-5: ids, state, reason and class; nothing of the offer's lease, command or spec."""
    return entry(
        record.offer_id, record.offer.lease.attempt_id, record.state, record.recovery_reason
    )


class StartupAuditor:
    """U-1..U-5 over one journal. Construction checks the budget against the journal's
    capacity (U-2: `page_size x pages` must cover it) and does no I/O."""

    __slots__ = ("_budget", "_list")

    def __init__(self, journal: AuditedJournal, budget: Paging) -> None:
        check_budget(budget, journal.capacity)
        self._budget = budget
        # Only the bound `list`: the auditor has no way to reach create/replace/remove (U-1).
        self._list: Callable[[str | None, int], JournalPage] = journal.list

    @property
    def budget(self) -> Paging:
        return self._budget

    def __repr__(self) -> str:
        return f"StartupAuditor(budget={self._budget!r})"

    def audit(self) -> AuditResult | AuditRefused:
        """One complete scan from the start of the journal, or the refusal with its code."""
        progress = AuditProgress(self._budget)
        while not progress.complete and progress.pages < self._budget.pages:
            try:
                page = self._list(progress.cursor, self._budget.page_size)
                entries = tuple(_entry(record) for record in page.records)
            except JournalError as exc:
                return AuditRefused(Code.AUDIT_JOURNAL_CORRUPT, exc.code, progress.pages)
            except JournalCorrupt:
                return AuditRefused(
                    Code.AUDIT_JOURNAL_CORRUPT, Code.JOURNAL_CORRUPT, progress.pages
                )
            step = audit_page(progress, AuditPage(entries, page.cursor, page.has_more))
            if isinstance(step, Rejected):
                return AuditRefused(step.code, None, progress.pages)
            progress = step
        # An incomplete scan here (more data after the last allowed page) is the kernel's
        # AUDIT_BUDGET_EXHAUSTED: nothing partial is reported as complete.
        result = audit_result(progress)
        if isinstance(result, Rejected):
            return AuditRefused(result.code, None, progress.pages)
        return result
