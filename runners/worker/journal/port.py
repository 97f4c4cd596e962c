"""The offer journal port (SPEC §3.1, §3.9): what every journal adapter provides.

Two adapters implement it: the file adapter (`runners/worker/journal/file.py`, edge default,
F-1..F-12 with the ownership lock of `runners/worker/journal/lock.py`) and a SQLite adapter for
cluster Workers (§3.1). Both store the canonical bytes of `kernel.worker.codec` and pass the
same journal contract tests. Every operation needs held, uncompromised ownership (W-1, I-J6)
and fails with a `JournalError` carrying a stable code, never a value (S-1); what the kernel's
`journal_step` returns is what a caller writes, with the revision CAS below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kernel.specs import Code
from kernel.worker import JournalRecord


class JournalError(Exception):
    """A journal operation failed closed. `code` is one of `JOURNAL_*`; `reason` a fixed
    low-sensitivity word (an errno name, a field name), never a record value or token."""

    def __init__(self, code: Code, reason: str = "") -> None:
        super().__init__(f"{code}: {reason}" if reason else str(code))
        self.code = code
        self.reason = reason


@dataclass(frozen=True, slots=True)
class JournalPage:
    """F-8: records in ascending `offer_id` order strictly after the cursor."""

    records: tuple[JournalRecord, ...]
    cursor: str | None
    has_more: bool


class JournalStore(Protocol):
    def create(self, record: JournalRecord) -> None:
        """F-3 first publish of revision 0: `JOURNAL_RECORD_EXISTS` if the offer has a record,
        `JOURNAL_FULL` at capacity (F-7, nothing evicted), `JOURNAL_RECORD_TOO_LARGE` over
        192 KiB (F-2), checked before anything is written."""
        ...

    def replace(self, record: JournalRecord, expected_revision: int) -> None:
        """F-4: the stored revision must be `expected_revision` and `record.revision` must be
        `expected_revision + 1`, else `JOURNAL_REVISION_CONFLICT` and nothing changes."""
        ...

    def remove(self, offer_id: str, expected_revision: int) -> None:
        """F-5: revision-conditional removal (`JOURNAL_REVISION_CONFLICT` otherwise)."""
        ...

    def read(self, offer_id: str) -> JournalRecord | None:
        """The current revision, or `None`; a bad record is `JOURNAL_CORRUPT` (F-9)."""
        ...

    def list(self, after: str | None, limit: int) -> JournalPage:
        """F-8: at most `limit` (1..64) records strictly after `after`."""
        ...


class OwnedJournal(JournalStore, Protocol):
    """A journal adapter with its ownership (W-2, W-7) and capacity (F-7): what a Worker
    runtime is built on. `FileJournal` and `SqliteJournal` both are one."""

    def acquire(self) -> None: ...

    def release(self) -> None: ...

    @property
    def capacity(self) -> int: ...
