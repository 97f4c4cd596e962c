"""Switching a SQLite file to WAL when other connections may be doing the same.

A fresh database starts in rollback mode. Two connections that both read it (SHARED) and both ask
for `journal_mode = WAL` (which needs EXCLUSIVE) would wait on each other, so SQLite answers
`SQLITE_BUSY` at once to one of them without calling its busy handler: the connection's busy
timeout does not cover this one statement. Every SQLite runner (edge, local, the Worker journal)
opens its file lazily and may race another process or adapter doing so, so the switch is retried
here until the same timeout has passed. Once the file is in WAL the pragma takes no lock.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Final

__all__ = ["enter_wal", "is_busy"]

_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6
_FIRST_PAUSE_S: Final = 0.002
_LONGEST_PAUSE_S: Final = 0.05


def is_busy(exc: sqlite3.Error) -> bool:
    """SQLite answered BUSY or LOCKED (the primary code, the low byte of an extended one)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)


def enter_wal(conn: sqlite3.Connection, statement: str, timeout_s: float) -> str:
    """Run `statement` (the `journal_mode = WAL` pragma) and return the mode it reports,
    retrying a busy answer until `timeout_s` has passed; then the last error is raised."""
    deadline = time.monotonic() + timeout_s
    pause = _FIRST_PAUSE_S
    while True:
        try:
            (mode,) = conn.execute(statement).fetchone()
            return str(mode)
        except sqlite3.Error as exc:
            if not is_busy(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, _LONGEST_PAUSE_S)
