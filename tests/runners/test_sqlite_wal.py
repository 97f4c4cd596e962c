"""Opening one fresh SQLite file from many connections at once (runners.sqlite_wal).

CI found the Worker journal answering `JOURNAL_LOCKED` to a create though its busy timeout was a
minute: two adapters opened the new file together and SQLite refused one `journal_mode = WAL`
switch at once, without its busy handler. Every SQLite runner now retries that switch within its
own busy timeout.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from runners.edge.connection import connect
from runners.sqlite_wal import enter_wal

WAL = "PRAGMA journal_mode = WAL"


def test_a_busy_wal_switch_waits_for_the_lock_instead_of_failing(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")  # rollback mode: nobody else may even read
    opener = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError) as bare:
            opener.execute(WAL).fetchone()
        assert bare.value.sqlite_errorname == "SQLITE_BUSY"  # a bare pragma under the lock
        timer = threading.Timer(0.2, lambda: holder.execute("COMMIT"))
        timer.start()
        assert enter_wal(opener, WAL, timeout_s=60) == "wal"
        timer.join()
    finally:
        opener.close()
        holder.close()


def test_a_wal_switch_gives_up_after_its_timeout(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    opener = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError) as info:
            enter_wal(opener, WAL, timeout_s=0.05)
        assert info.value.sqlite_errorname == "SQLITE_BUSY"
    finally:
        opener.close()
        holder.execute("ROLLBACK")
        holder.close()


def test_edge_connections_opening_one_new_file_together_all_succeed(tmp_path: Path) -> None:
    """Eight connections race to create, switch and migrate each of 40 new files."""
    errors: list[str] = []
    for round_ in range(40):
        path = tmp_path / f"edge-{round_}.sqlite3"
        barrier = threading.Barrier(8)

        def open_one(path: Path = path, barrier: threading.Barrier = barrier) -> None:
            barrier.wait(60)
            try:
                connect(path, "FULL", 60_000).close()
            except sqlite3.Error as exc:
                errors.append(f"{exc.sqlite_errorname}: {exc}")

        threads = [threading.Thread(target=open_one) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
