"""The SQLite operation authority of an edge/standalone process (FP-2, D-2).

One `SqliteAuthority` owns the process's single connection to the database file and runs every
transaction, and every source query, under one process-wide lock, so statements of two
transactions never interleave even when lifecycles run on daemon threads (L-3).

Connection set-up:
- `journal_mode = WAL`: readers (the conformance backdoor reader, a CLI inspecting the file)
  never block the writer, and a commit appends to the log instead of rewriting pages.
- `busy_timeout` (default 5 s): a second process opening the same file waits for the write
  lock instead of failing at once.
- `foreign_keys = ON`: Attempts, policies, leases and Events must belong to a stored Run.
- `isolation_level=None`: the sqlite3 module never opens transactions implicitly; every write is
  one explicit `BEGIN IMMEDIATE` ... `COMMIT` (or `ROLLBACK`), so the write lock is taken before
  the aggregate is read and the transition is decided on the state it is committed over.
- `synchronous`, the durability trade-off:
  - `FULL` (default): in WAL mode the log is fsynced at every commit, so a transition that was
    acknowledged (a lease granted and its offer sent, a completion answered) survives power
    loss and an operating-system crash. Each commit costs one fsync.
  - `EXTRA`: accepted for completeness; in WAL mode it behaves as `FULL` (its extra directory
    sync concerns rollback journals).
  - `NORMAL`: fsync only at checkpoints. The database never corrupts, and a crash of the process
    alone loses nothing, but power loss can roll back the last commits that were already
    acknowledged: a Worker may hold a lease the control plane forgot, or a completion it was
    told was recorded. Cheaper commits; choose it only where that loss is acceptable.
  `OFF` is not offered: it can corrupt the database on power loss.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from runners.edge.migrate import migrate
from runners.edge.named_sql import STATEMENTS
from runners.sqlite_wal import enter_wal

SYNCHRONOUS_MODES = ("EXTRA", "FULL", "NORMAL")
_SYNCHRONOUS_PRAGMA = {
    "EXTRA": "pragma_synchronous_extra",
    "FULL": "pragma_synchronous_full",
    "NORMAL": "pragma_synchronous_normal",
}
#: `PRAGMA synchronous` reads back as a number.
SYNCHRONOUS_LEVELS = {"NORMAL": 1, "FULL": 2, "EXTRA": 3}
DEFAULT_BUSY_TIMEOUT_MS = 5_000
#: STRICT tables and JSON functions in the core (SQLite 3.38).
MIN_SQLITE_VERSION = (3, 38, 0)


class EdgeConfigError(ValueError):
    """An invalid connection setting, refused when the store is constructed."""


def check_settings(synchronous: str, busy_timeout_ms: int) -> str:
    mode = synchronous.upper() if isinstance(synchronous, str) else ""
    if mode not in SYNCHRONOUS_MODES:
        raise EdgeConfigError(f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}")
    if isinstance(busy_timeout_ms, bool) or not isinstance(busy_timeout_ms, int):
        raise EdgeConfigError("busy_timeout_ms must be an integer")
    if not 0 <= busy_timeout_ms <= 600_000:
        raise EdgeConfigError("busy_timeout_ms must be 0..600000")
    if sqlite3.sqlite_version_info < MIN_SQLITE_VERSION:
        raise EdgeConfigError(
            f"SQLite {sqlite3.sqlite_version} is too old: the edge runner needs "
            f"{'.'.join(map(str, MIN_SQLITE_VERSION))} or newer"
        )
    return mode


def connect(path: Path, synchronous: str, busy_timeout_ms: int) -> sqlite3.Connection:
    """Open the file, set the pragmas, migrate the schema."""
    conn = sqlite3.connect(
        path,
        timeout=busy_timeout_ms / 1000,
        isolation_level=None,
        check_same_thread=False,  # used from lifecycle threads, always under the lock
    )
    try:
        mode = enter_wal(conn, STATEMENTS["pragma_journal_mode_wal"], busy_timeout_ms / 1000)
        if mode.lower() != "wal":
            raise sqlite3.OperationalError(f"could not enable WAL (journal_mode is {mode})")
        conn.execute(STATEMENTS["pragma_foreign_keys_on"])
        conn.execute(STATEMENTS[_SYNCHRONOUS_PRAGMA[synchronous]])
        conn.execute(STATEMENTS["pragma_cache_size"])
        migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


class SqliteAuthority:
    """Owns the single connection; `transaction()` is one `BEGIN IMMEDIATE` transaction."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "FULL",
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    ) -> None:
        self.synchronous = check_settings(synchronous, busy_timeout_ms)
        self.busy_timeout_ms = busy_timeout_ms
        self.path = Path(path)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = connect(
            self.path, self.synchronous, self.busy_timeout_ms
        )

    @property
    def closed(self) -> bool:
        return self._conn is None

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock, for one read-only statement (a source page)."""
        with self._lock:
            yield self._open()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """`BEGIN IMMEDIATE`; `COMMIT` when the block ends normally, `ROLLBACK` when it raises
        (the exception, an injected crash included, propagates)."""
        with self._lock:
            conn = self._open()
            conn.execute(STATEMENTS["begin_immediate"])
            try:
                yield conn
                conn.execute(STATEMENTS["commit"])
            except BaseException:
                if conn.in_transaction:
                    conn.execute(STATEMENTS["rollback"])
                raise

    def settings(self) -> dict[str, object]:
        """The connection's pragmas as SQLite reports them."""
        with self.reading() as conn:
            return {
                "journal_mode": conn.execute(STATEMENTS["read_journal_mode"]).fetchone()[0],
                "foreign_keys": conn.execute(STATEMENTS["read_foreign_keys"]).fetchone()[0],
                "busy_timeout": conn.execute(STATEMENTS["read_busy_timeout"]).fetchone()[0],
                "synchronous": conn.execute(STATEMENTS["read_synchronous"]).fetchone()[0],
                "cache_size": conn.execute(STATEMENTS["read_cache_size"]).fetchone()[0],
            }

    def reopen(self) -> None:
        """Close the connection and open the same file again, as a process restart does."""
        with self._lock:
            self.close()
            self._conn = connect(self.path, self.synchronous, self.busy_timeout_ms)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                conn, self._conn = self._conn, None
                conn.close()

    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            raise sqlite3.ProgrammingError("the edge store is closed")
        return self._conn
