"""The SQLite offer journal (SPEC §3.1, §3.3, §3.9; issue 6 item 4): the journal port on one file.

A cluster Worker MAY keep its journal in local SQLite instead of files (§3.1); it sits behind the
same port (`runners.worker.journal.port.JournalStore`) and passes the same contract tests as the
file
adapter. It stores exactly the canonical bytes of `kernel.worker.codec.encode_record`, so both
adapters hold byte-identical records.

Layout and ownership
    The journal is a root directory owned like the file journal's: `<root>/.owner.lock` is the
    W-1..W-7 lock of `runners.worker.journal.lock.JournalOwnership` (F-1 root checks on acquire) and
    `<root>/journal.sqlite3` (with its `-wal` and `-shm`) is the database. Every operation first
    calls `ownership.require_owned()` (W-1); a process without the lock never opens the database,
    so it can neither read nor write. The database file is created `0600` with `O_EXCL` before
    SQLite opens it (SQLite gives `-wal`/`-shm` the database file's mode); the three files are
    checked (regular, ours, `0600`) whenever the adapter opens its connections, and refused with
    `JOURNAL_PERMISSIONS` otherwise.

Connections
    Two, opened lazily on the first operation after ownership was verified and closed by
    `close()`/`release()`: the writer (WAL, `synchronous = FULL`, `BEGIN IMMEDIATE`) used only under
    the adapter's mutation lock (F-10: create, replace and remove are serialized, so capacity checks
    of different offers cannot race), and a `query_only` reader under its own lock, so reads never
    wait for a write in progress and see the last committed revision (WAL snapshot).

Operations (each mutation is one transaction on the writer; ownership is verified again right
before its `COMMIT`, as the file adapter verifies again before it publishes)
    create   encode, size check (F-2, before anything is written), then `BEGIN IMMEDIATE`: an
             existing row is `JOURNAL_RECORD_EXISTS`, `count(*) >= capacity` is `JOURNAL_FULL`
             (F-7, nothing is evicted), `INSERT` (a unique violation is `JOURNAL_RECORD_EXISTS`).
    replace  `record.revision == expected + 1` (else `JOURNAL_REVISION_CONFLICT` before anything),
             size check, then in the transaction the stored row is decoded (a bad row is
             `JOURNAL_CORRUPT` and is not overwritten) and `UPDATE ... WHERE revision = :expected`
             (zero rows: `JOURNAL_REVISION_CONFLICT`).
    remove   the stored row is decoded (never delete corruption silently), then
             `DELETE ... WHERE revision = :expected`.
    read     the row decoded with `decode_record(bytes, offer_id)`; the revision column must equal
             the record's (F-9: anything else is `JOURNAL_CORRUPT`, never skipped or deleted).
    list     `limit` 1..64, ascending `offer_id` strictly after the cursor, `limit + 1` rows
             fetched so `has_more` is exact; the cursor is the last listed id (or `after` on an
             empty page).

Failures
    A failed transaction is rolled back (if the rollback itself fails the connection is dropped,
    which rolls back too) and the previous revision stays intact (INBOX-43). `sqlite3` errors map
    to `JournalError` codes with a fixed reason, the SQLite error name (`SQLITE_FULL`), never the
    message, a value or a token (INBOX-44); ownership refusals keep their code
    (`JOURNAL_NOT_OWNED`, `JOURNAL_COMPROMISED`). See `_storage_error` and docs/decisions.md SJ-*.

Test seam
    `fault_hook(step, connection)` is called at the named steps of a mutation (`STEPS`): inside
    the transaction after `BEGIN IMMEDIATE`, after the stored row was checked, after the write
    statement, and after `COMMIT` (before the call returns). A hook that raises makes the
    transaction fail there; a hook that blocks lets a test kill the process mid-transaction.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from kernel.specs import HARD_LIMITS, Code, IntRange, check_in_range
from kernel.worker import JournalCorrupt, JournalRecord, decode_record
from runners.named_sql import load
from runners.sqlite_wal import enter_wal, is_busy
from runners.worker.journal.common import (
    CAPACITY_RANGE,
    DEFAULT_CAPACITY,
    PAGE_RANGE,
    check_offer_id,
    encode_for_write,
    ownership_error,
    require_owned,
)
from runners.worker.journal.lock import JournalOwnership, JournalOwnershipError
from runners.worker.journal.port import JournalError, JournalPage

__all__ = [
    "DATABASE_NAME",
    "DEFAULT_BUSY_TIMEOUT_MS",
    "DEFAULT_CAPACITY",
    "JOURNAL_SQL",
    "SCHEMA_VERSION",
    "STEPS",
    "FaultHook",
    "SqliteJournal",
]

#: The journal's statements (`runners/worker/journal/sql/journal.sql`).
JOURNAL_SQL: Final[Mapping[str, str]] = load("runners.worker.journal", "journal.sql")

DATABASE_NAME: Final = "journal.sqlite3"
#: The companion files SQLite creates beside the database in WAL mode.
_COMPANION_SUFFIXES: Final = ("-wal", "-shm")
SCHEMA_VERSION: Final = 1
DEFAULT_BUSY_TIMEOUT_MS: Final = 5_000
_FILE_MODE: Final = 0o600
_SYNCHRONOUS_FULL: Final = 2
_BUSY_TIMEOUT_RANGE: Final = IntRange(0, 600_000)

#: The points of a mutation at which `fault_hook` is called, in order.
STEPS: Final = ("begun", "checked", "written", "committed")
#: `(step, writer connection) -> None`; raising makes the operation fail at that step.
FaultHook = Callable[[str, sqlite3.Connection], None]

# SQLite primary result codes (the low byte of an extended code) and what they mean here.
_SQLITE_CORRUPT: Final = 11
_SQLITE_CONSTRAINT: Final = 19
_SQLITE_NOTADB: Final = 26
_SQLITE_CONSTRAINT_PRIMARYKEY: Final = 1555
_SQLITE_CONSTRAINT_UNIQUE: Final = 2067


def _check_expected(value: object) -> int:
    """An expected revision that is not an `int` can match no stored revision (F-4, F-5)."""
    if type(value) is not int:
        raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "expected_revision")
    return value


def _storage_error(exc: sqlite3.Error) -> JournalError:
    """A `sqlite3` failure as a journal code; the reason is SQLite's error name, never the text."""
    code_number = getattr(exc, "sqlite_errorcode", None)
    name = getattr(exc, "sqlite_errorname", None)
    reason = name if isinstance(name, str) and name.startswith("SQLITE_") else type(exc).__name__
    primary = code_number & 0xFF if isinstance(code_number, int) else None
    if primary in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return JournalError(Code.JOURNAL_CORRUPT, reason)
    if is_busy(exc):
        return JournalError(Code.JOURNAL_LOCKED, reason)
    # Disk full, I/O errors, a read-only or unopenable file, and anything unexpected: the store
    # cannot be written or read as it must be (J-7: storage failures are JOURNAL_PERMISSIONS).
    return JournalError(Code.JOURNAL_PERMISSIONS, reason)


def _decode_row(row: tuple[object, object, object], offer_id: str | None = None) -> JournalRecord:
    """F-9: the stored bytes, filed under their offer id, at the revision the row says."""
    stored_id, revision, data = row
    if not isinstance(data, bytes):
        raise JournalError(Code.JOURNAL_CORRUPT, "record:not_bytes")
    if not isinstance(stored_id, str) or (offer_id is not None and stored_id != offer_id):
        raise JournalError(Code.JOURNAL_CORRUPT, "offer_id:bad_key")
    if len(data) > HARD_LIMITS.journal_record_size_max_bytes:
        raise JournalError(Code.JOURNAL_CORRUPT, "record:too_large")
    try:
        record = decode_record(data, stored_id)
    except JournalCorrupt as exc:
        raise JournalError(Code.JOURNAL_CORRUPT, exc.field) from None
    if isinstance(revision, bool) or revision != record.revision:
        raise JournalError(Code.JOURNAL_CORRUPT, "revision:column_mismatch")
    return record


def _check_private_file(path: Path, *, required: bool) -> None:
    """F-1: a regular file of the effective uid with mode exactly `0600` (or absent if allowed)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if required:
            raise JournalError(Code.JOURNAL_PERMISSIONS, "database_missing") from None
        return
    except OSError:
        raise JournalError(Code.JOURNAL_PERMISSIONS, "database_unreadable") from None
    if not stat.S_ISREG(st.st_mode):
        raise JournalError(Code.JOURNAL_PERMISSIONS, "database_not_a_regular_file")
    if st.st_uid != os.geteuid():
        raise JournalError(Code.JOURNAL_PERMISSIONS, "database_not_owned_by_euid")
    if stat.S_IMODE(st.st_mode) != _FILE_MODE:
        raise JournalError(Code.JOURNAL_PERMISSIONS, "database_mode_not_0600")


class SqliteJournal:
    """The journal port on `<root>/journal.sqlite3`; see the module docstring.

    `ownership` defaults to a new `JournalOwnership(root)`; `acquire()` and `release()` delegate to
    it (a caller may also acquire the ownership object itself). Constructing does no I/O (L-1).
    """

    def __init__(
        self,
        root: Path,
        ownership: JournalOwnership | None = None,
        *,
        capacity: int = DEFAULT_CAPACITY,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        fault_hook: FaultHook | None = None,
    ) -> None:
        root = Path(root)
        if ownership is None:
            ownership = JournalOwnership(root)  # refuses a relative root (F-1)
        elif ownership.root != root:
            raise ValueError("ownership: must own the journal root")
        self._capacity = check_in_range(capacity, CAPACITY_RANGE, field="capacity")
        self._busy_timeout_s = (
            check_in_range(busy_timeout_ms, _BUSY_TIMEOUT_RANGE, field="busy_timeout_ms") / 1000
        )
        self._root = root
        self._path = root / DATABASE_NAME
        self._ownership = ownership
        self._fault_hook = fault_hook
        self._mutation_lock = threading.Lock()  # F-10: one mutation queue per owner
        self._read_lock = threading.Lock()
        self._open_lock = threading.Lock()  # innermost: opening or closing the connections
        self._writer: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None

    # -- views -------------------------------------------------------------------------------

    @property
    def root(self) -> Path:
        return self._root

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def ownership(self) -> JournalOwnership:
        return self._ownership

    def __repr__(self) -> str:
        return f"SqliteJournal(root={str(self._root)!r}, capacity={self._capacity})"

    # -- ownership ---------------------------------------------------------------------------

    def acquire(self) -> None:
        """W-2/W-3 through the ownership lock (`JOURNAL_LOCKED`, `JOURNAL_PERMISSIONS`)."""
        try:
            self._ownership.acquire()
        except JournalOwnershipError as exc:
            raise ownership_error(exc) from None

    def release(self) -> None:
        """Close the connections, then W-7 `release()` of the ownership."""
        self.close()
        try:
            self._ownership.release()
        except JournalOwnershipError as exc:
            raise ownership_error(exc) from None

    def close(self) -> None:
        """Close both connections (idempotent); the next operation opens them again."""
        with self._mutation_lock, self._read_lock, self._open_lock:
            self._drop_connections()

    # -- JournalStore ------------------------------------------------------------------------

    def create(self, record: JournalRecord) -> None:
        self._require_owned()
        offer_id = check_offer_id(record.offer_id, "record.offer_id")
        if record.revision != 0:
            raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "create_revision_not_zero")
        data = self._encode(record)
        params = {"offer_id": offer_id, "revision": 0, "record": data}
        with self._transaction() as conn:
            if conn.execute(JOURNAL_SQL["select_record"], {"offer_id": offer_id}).fetchone():
                raise JournalError(Code.JOURNAL_RECORD_EXISTS, "offer_id")
            (count,) = conn.execute(JOURNAL_SQL["count_records"]).fetchone()
            if count >= self._capacity:
                raise JournalError(Code.JOURNAL_FULL, "capacity")
            self._step("checked", conn)
            try:
                conn.execute(JOURNAL_SQL["insert_record"], params)
            except sqlite3.IntegrityError as exc:
                if getattr(exc, "sqlite_errorcode", None) in (
                    _SQLITE_CONSTRAINT_PRIMARYKEY,
                    _SQLITE_CONSTRAINT_UNIQUE,
                ):
                    raise JournalError(Code.JOURNAL_RECORD_EXISTS, "offer_id") from None
                raise
            self._step("written", conn)

    def replace(self, record: JournalRecord, expected_revision: int) -> None:
        self._require_owned()
        offer_id = check_offer_id(record.offer_id, "record.offer_id")
        expected = _check_expected(expected_revision)
        if record.revision != expected + 1:
            raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "revision_not_expected_plus_one")
        data = self._encode(record)
        params = {
            "offer_id": offer_id,
            "revision": record.revision,
            "record": data,
            "expected_revision": expected,
        }
        with self._transaction() as conn:
            self._check_stored(conn, offer_id, expected)
            self._step("checked", conn)
            if conn.execute(JOURNAL_SQL["update_record"], params).rowcount != 1:
                raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "revision")
            self._step("written", conn)

    def remove(self, offer_id: str, expected_revision: int) -> None:
        self._require_owned()
        offer_id = check_offer_id(offer_id, "offer_id")
        expected = _check_expected(expected_revision)
        params = {"offer_id": offer_id, "expected_revision": expected}
        with self._transaction() as conn:
            self._check_stored(conn, offer_id, expected)
            self._step("checked", conn)
            if conn.execute(JOURNAL_SQL["delete_record"], params).rowcount != 1:
                raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "revision")
            self._step("written", conn)

    def read(self, offer_id: str) -> JournalRecord | None:
        self._require_owned()
        offer_id = check_offer_id(offer_id, "offer_id")
        with self._reading() as conn:
            rows = conn.execute(JOURNAL_SQL["select_record"], {"offer_id": offer_id}).fetchall()
        return _decode_row(rows[0], offer_id) if rows else None

    def list(self, after: str | None, limit: int) -> JournalPage:
        self._require_owned()
        if after is not None:
            check_offer_id(after, "after")
        page_size = check_in_range(limit, PAGE_RANGE, field="limit")
        params = {"after": "" if after is None else after, "limit": page_size + 1}
        with self._reading() as conn:
            rows = conn.execute(JOURNAL_SQL["list_records"], params).fetchall()
        records = tuple(_decode_row(row) for row in rows[:page_size])
        cursor = records[-1].offer_id if records else after
        return JournalPage(records=records, cursor=cursor, has_more=len(rows) > page_size)

    # -- internals ---------------------------------------------------------------------------

    def _require_owned(self) -> None:
        """W-1: held, uncompromised ownership before anything else (I-J6)."""
        require_owned(self._ownership)

    @staticmethod
    def _encode(record: JournalRecord) -> bytes:
        return encode_for_write(record)

    def _step(self, step: str, conn: sqlite3.Connection) -> None:
        if self._fault_hook is not None:
            self._fault_hook(step, conn)

    def _check_stored(self, conn: sqlite3.Connection, offer_id: str, expected: int) -> None:
        """The stored row must decode (F-9: corruption is never overwritten or deleted) and be at
        `expected` (F-4, F-5)."""
        row = conn.execute(JOURNAL_SQL["select_record"], {"offer_id": offer_id}).fetchone()
        if row is None:
            raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "record_missing")
        if _decode_row(row, offer_id).revision != expected:
            raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "revision")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One `BEGIN IMMEDIATE` ... `COMMIT` on the writer under the mutation lock; rolled back
        when the block raises. `sqlite3` errors leave as `JournalError`."""
        with self._mutation_lock:
            try:
                conn = self._connections()[0]
                conn.execute(JOURNAL_SQL["begin_immediate"])
                try:
                    self._step("begun", conn)
                    yield conn
                    self._require_owned()  # W-1 again right before the write becomes durable
                    conn.execute(JOURNAL_SQL["commit"])
                except BaseException:
                    self._rollback(conn)
                    raise
                self._step("committed", conn)
            except sqlite3.Error as exc:
                raise _storage_error(exc) from None

    def _rollback(self, conn: sqlite3.Connection) -> None:
        try:
            if conn.in_transaction:
                conn.execute(JOURNAL_SQL["rollback"])
        except sqlite3.Error:
            with self._open_lock:  # closing a connection rolls its transaction back
                self._writer = None
                with contextlib.suppress(sqlite3.Error):
                    conn.close()

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._read_lock:
            try:
                yield self._connections()[1]
            except sqlite3.Error as exc:
                raise _storage_error(exc) from None

    def _connections(self) -> tuple[sqlite3.Connection, sqlite3.Connection]:
        """The writer and the reader, opened on first use (the writer first: it migrates)."""
        with self._open_lock:
            writer, reader = self._writer, self._reader
            if writer is None:
                self._create_database_file()
                writer = self._connect()
                try:
                    self._migrate(writer)
                    self._check_files()
                except BaseException:
                    writer.close()
                    raise
                self._writer = writer
            if reader is None:
                reader = self._connect()
                try:
                    reader.execute(JOURNAL_SQL["pragma_query_only_on"])
                    self._check_files()
                except BaseException:
                    reader.close()
                    raise
                self._reader = reader
            return writer, reader

    def _drop_connections(self) -> None:
        for conn in (self._reader, self._writer):
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
        self._writer = self._reader = None

    def _create_database_file(self) -> None:
        """F-1: create the database file `0600` (O_EXCL, whatever the umask) before SQLite opens
        it; an existing one must already be a private regular file."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self._path, flags, _FILE_MODE)
        except FileExistsError:
            pass
        except OSError:
            raise JournalError(Code.JOURNAL_PERMISSIONS, "database_cannot_be_created") from None
        else:
            try:
                os.fchmod(fd, _FILE_MODE)
                os.fsync(fd)
            finally:
                os.close(fd)
        self._check_files()

    def _check_files(self) -> None:
        _check_private_file(self._path, required=True)
        for suffix in _COMPANION_SUFFIXES:
            _check_private_file(self._path.with_name(DATABASE_NAME + suffix), required=False)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self._path,
            timeout=self._busy_timeout_s,
            isolation_level=None,  # no implicit transactions: BEGIN IMMEDIATE is explicit
            check_same_thread=False,  # always used under one of the adapter's locks
        )
        try:
            mode = enter_wal(conn, JOURNAL_SQL["pragma_journal_mode_wal"], self._busy_timeout_s)
            if mode.lower() != "wal":
                raise JournalError(Code.JOURNAL_PERMISSIONS, "wal_unavailable")
            conn.execute(JOURNAL_SQL["pragma_synchronous_full"])
            (level,) = conn.execute(JOURNAL_SQL["read_synchronous"]).fetchone()
            if level != _SYNCHRONOUS_FULL:
                raise JournalError(Code.JOURNAL_PERMISSIONS, "synchronous_not_full")
            conn.execute(JOURNAL_SQL["pragma_trusted_schema_off"])
        except BaseException:
            conn.close()
            raise
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Version 0 (a new file) gets the table; version 1 is current; anything else is not a
        journal this code understands (`JOURNAL_CORRUPT`)."""
        conn.execute(JOURNAL_SQL["begin_immediate"])
        try:
            (version,) = conn.execute(JOURNAL_SQL["read_user_version"]).fetchone()
            if version == 0:
                conn.execute(JOURNAL_SQL["create_journal_records"])
                conn.execute(JOURNAL_SQL["set_user_version_1"])
            elif version != SCHEMA_VERSION:
                raise JournalError(Code.JOURNAL_CORRUPT, "schema_version")
            conn.execute(JOURNAL_SQL["commit"])
        except BaseException:
            if conn.in_transaction:
                conn.execute(JOURNAL_SQL["rollback"])
            raise
