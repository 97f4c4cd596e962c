"""Every journal adapter passes the same port contract
(`tests/runners/worker/journal/journal_contract.py`).

One row of `ADAPTERS` per adapter (file, SQLite): a factory of stores (owned or not) and raw
access to the stored bytes. A further adapter is one more row. Ownership uses a no-op refresh
timer (the contract is not about the timer); every store a test acquired is released after it.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runners.worker.journal.file import FileJournal, record_name
from runners.worker.journal.lock import JournalOwnership
from runners.worker.journal.port import JournalError, JournalStore
from runners.worker.journal.sqlite import DATABASE_NAME as SQLITE_DATABASE_NAME
from runners.worker.journal.sqlite import SqliteJournal
from tests.runners.worker.journal.journal_contract import (
    CONTRACT,
    CONTRACT_SPEC_IDS,
    ContractAdapter,
    StoreFactory,
)


class _NoTimer:
    def __init__(self, interval_s: float, tick: Callable[[], bool]) -> None:
        del interval_s, tick

    def start(self) -> None:
        pass

    def cancel(self) -> None:
        pass

    def join(self, timeout_s: float) -> None:
        pass


_OWNED: list[FileJournal | SqliteJournal] = []


@pytest.fixture(autouse=True)
def _release_owned() -> Iterator[None]:
    yield
    while _OWNED:
        store = _OWNED.pop()
        with contextlib.suppress(JournalError):
            store.release()


# -- the file adapter (runners/worker/journal/file.py): `path` is the root ----------------------
def _file_store(path: Path, *, capacity: int = 64, owned: bool = True) -> JournalStore:
    journal = FileJournal(path, JournalOwnership(path, timer_factory=_NoTimer), capacity=capacity)
    if owned:
        journal.acquire()
        _OWNED.append(journal)
    return journal


class _FileRaw:
    """The file adapter's bytes: `<root>/<offer_id>.json`, rewritten in place (inode, mode and
    owner kept) so that only the content is damaged."""

    def read(self, path: Path, offer_id: str) -> bytes | None:
        file = path / record_name(offer_id)
        return file.read_bytes() if file.exists() else None

    def write(self, path: Path, offer_id: str, data: bytes) -> None:
        (path / record_name(offer_id)).write_bytes(data)


# -- the SQLite adapter (runners/worker/journal/sqlite.py): `path` is the root ------------------
def _sqlite_store(path: Path, *, capacity: int = 64, owned: bool = True) -> JournalStore:
    journal = SqliteJournal(path, JournalOwnership(path, timer_factory=_NoTimer), capacity=capacity)
    if owned:
        journal.acquire()
        _OWNED.append(journal)
    return journal


class _SqliteRaw:
    """The SQLite adapter's bytes: the `record` column of `journal_records`, changed behind the
    adapter's back (the revision column is left as it is)."""

    def read(self, path: Path, offer_id: str) -> bytes | None:
        with contextlib.closing(sqlite3.connect(path / SQLITE_DATABASE_NAME)) as conn:
            row = conn.execute(
                "SELECT record FROM journal_records WHERE offer_id = ?", (offer_id,)
            ).fetchone()
        return None if row is None else bytes(row[0])

    def write(self, path: Path, offer_id: str, data: bytes) -> None:
        with contextlib.closing(sqlite3.connect(path / SQLITE_DATABASE_NAME)) as conn, conn:
            conn.execute(
                "UPDATE journal_records SET record = ? WHERE offer_id = ?", (data, offer_id)
            )


_FILE_FACTORY: StoreFactory = _file_store  # mypy checks each factory's shape here
_SQLITE_FACTORY: StoreFactory = _sqlite_store
ADAPTERS: list[ContractAdapter] = [
    ContractAdapter("file", _FILE_FACTORY, _FileRaw()),
    ContractAdapter("sqlite", _SQLITE_FACTORY, _SqliteRaw()),
]


@pytest.mark.parametrize(
    "check",
    [
        pytest.param(check, marks=pytest.mark.spec(*CONTRACT_SPEC_IDS[check.__name__]))
        if check.__name__ in CONTRACT_SPEC_IDS
        else check
        for check in CONTRACT
    ],
    ids=lambda check: check.__name__.removeprefix("check_"),
)
@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda adapter: adapter.name)
def test_journal_contract(
    adapter: ContractAdapter, check: Callable[[ContractAdapter, Path], None], tmp_path: Path
) -> None:
    check(adapter, tmp_path / "journal")
