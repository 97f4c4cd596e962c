"""The SQLite journal's row for the journal contract
(`tests/runners/worker/journal/test_journal_contract.py`).

`sqlite_store_factory(owners, timer_factory)` makes stores the way the contract's `StoreFactory`
asks (`path` is the journal root; acquired ownerships go to `owners`, which the contract module
releases after each test). `SqliteRaw` reads and writes a row's bytes behind the adapter's back
(`PRAGMA ignore_check_constraints`, so that even bytes the table's CHECKs forbid, such as an empty
record, can be planted: what a damaged disk could hold).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

from runners.worker.journal.lock import DaemonRefreshTimer, JournalOwnership, TimerFactory
from runners.worker.journal.port import JournalStore
from runners.worker.journal.sqlite import DATABASE_NAME, SqliteJournal


def sqlite_store_factory(
    owners: list[JournalOwnership], timer_factory: TimerFactory = DaemonRefreshTimer
) -> Callable[..., JournalStore]:
    def make(path: Path, *, capacity: int = 64, owned: bool = True) -> JournalStore:
        owner = JournalOwnership(path, timer_factory=timer_factory)
        journal = SqliteJournal(path, owner, capacity=capacity)
        if owned:
            journal.acquire()
            owners.append(owner)
        return journal

    return make


class SqliteRaw:
    """The stored bytes of one offer in `<path>/journal.sqlite3`."""

    def read(self, path: Path, offer_id: str) -> bytes | None:
        with contextlib.closing(sqlite3.connect(path / DATABASE_NAME)) as conn:
            row = conn.execute(
                "SELECT record FROM journal_records WHERE offer_id = ?", (offer_id,)
            ).fetchone()
        return None if row is None else bytes(row[0])

    def write(self, path: Path, offer_id: str, data: bytes) -> None:
        with contextlib.closing(sqlite3.connect(path / DATABASE_NAME, isolation_level=None)) as c:
            c.execute("PRAGMA ignore_check_constraints = ON")
            c.execute("UPDATE journal_records SET record = ? WHERE offer_id = ?", (data, offer_id))
