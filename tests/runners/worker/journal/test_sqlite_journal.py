"""The SQLite offer journal (`runners/worker/journal/sqlite.py`; SPEC §3.1, §3.3, §3.9, §3.17).

Real database files under `tmp_path`; damaged rows are written with a raw `sqlite3` connection;
the "second process" and crash cases are real spawned processes (SIGKILL while one holds
`BEGIN IMMEDIATE`). Faults inside a transaction come through the adapter's `fault_hook`.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel.specs.codes import Code
from kernel.specs.journal import JournalState
from kernel.worker.codec import encode_record
from kernel.worker.journal import DeliveryAccepted, JournalApplied, journal_step
from kernel.worker.record import JournalRecord
from runners.worker.journal.lock import LOCK_DIR_NAME, JournalOwnership
from runners.worker.journal.port import JournalError
from runners.worker.journal.sqlite import (
    DATABASE_NAME,
    STEPS,
    SqliteJournal,
)
from tests.runners.worker.journal.sqlite_journal_workers import crash_in_transaction, outsider
from tests.support.journal_fixtures import (
    CALLBACK_TOKEN,
    LEASE_TOKEN,
    T0,
    accepted_offer,
    lease,
    offer,
    oversized,
    revisions,
    spec,
)

SECRETS = (LEASE_TOKEN.reveal(), CALLBACK_TOKEN, "secret-command-line")
WAIT_S = 120.0  # a bound on a racing thread, above the busy timeout below
#: The racing writers wait for SQLite's write lock this long: generous, so that a loaded machine
#: serialises the race instead of failing it with SQLITE_BUSY (the outcome is what is asserted).
RACE_BUSY_TIMEOUT_MS = 60_000


# -- helpers ---------------------------------------------------------------------------------
@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "journal"  # absent: `acquire()` creates it 0700 (F-1)


@pytest.fixture
def journal(root: Path) -> Iterator[SqliteJournal]:
    adapter = SqliteJournal(root, busy_timeout_ms=RACE_BUSY_TIMEOUT_MS)
    adapter.acquire()
    yield adapter
    with contextlib.suppress(JournalError):
        adapter.release()
    adapter.close()


def _error(call: Callable[[], object]) -> JournalError:
    with pytest.raises(JournalError) as info:
        call()
    text = f"{info.value!s} {info.value!r} {info.value.reason}"
    assert not any(secret in text for secret in SECRETS)  # INBOX-44
    return info.value


def _code(call: Callable[[], object]) -> Code:
    return _error(call).code


def _raw(root: Path) -> sqlite3.Connection:
    return sqlite3.connect(root / DATABASE_NAME, isolation_level=None)


def _rows(root: Path) -> list[tuple[str, int, bytes]]:
    """Every stored row, read behind the adapter's back."""
    with contextlib.closing(_raw(root)) as conn:
        rows = conn.execute(
            "SELECT offer_id, revision, record FROM journal_records ORDER BY offer_id"
        ).fetchall()
    return [(str(a), int(b), bytes(c)) for a, b, c in rows]


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _sqlite_error(name: str, number: int) -> sqlite3.OperationalError:
    """An `OperationalError` as the sqlite3 module raises it (code and name attached)."""
    exc = sqlite3.OperationalError("database or disk is full")
    exc.sqlite_errorcode = number
    exc.sqlite_errorname = name
    return exc


class Faults:
    """A `fault_hook` that raises `error` once, at `step` of the next mutation."""

    def __init__(self) -> None:
        self.step: str | None = None
        self.error: BaseException | None = None
        self.seen: list[str] = []

    def __call__(self, step: str, conn: sqlite3.Connection) -> None:
        self.seen.append(step)
        if step == self.step and self.error is not None:
            error, self.error = self.error, None
            raise error


# -- the port ----------------------------------------------------------------------------------
@pytest.mark.spec("INBOX-02")
def test_create_read_replace_remove_store_the_canonical_bytes(
    journal: SqliteJournal, root: Path
) -> None:
    rev = revisions()
    oid = rev[0].offer_id
    assert journal.read(oid) is None
    journal.create(rev[0])
    assert journal.read(oid) == rev[0]
    for expected, record in enumerate(rev[1:]):
        journal.replace(record, expected)
        assert journal.read(oid) == record
        assert _rows(root) == [(oid, record.revision, encode_record(record))]  # byte-identical
    final = journal.read(oid)
    assert final is not None
    assert final.state is JournalState.COMPLETION_ACKNOWLEDGED
    journal.remove(oid, rev[-1].revision)
    assert journal.read(oid) is None
    assert _rows(root) == []


@pytest.mark.spec("INBOX-02")
def test_a_revision_conflict_changes_nothing(journal: SqliteJournal, root: Path) -> None:
    rev = revisions()
    oid = rev[0].offer_id
    other = accepted_offer(2)
    journal.create(rev[0])
    journal.replace(rev[1], 0)
    before = _rows(root)
    conflicts: list[Callable[[], object]] = [
        lambda: journal.replace(rev[2], 0),  # stale expected revision
        lambda: journal.replace(rev[1], 0),  # stale, and the same revision again
        lambda: journal.replace(rev[3], 1),  # skips a revision
        lambda: journal.replace(rev[2], True),
        lambda: journal.replace(other, -1),  # no such record
        lambda: journal.remove(oid, 0),
        lambda: journal.remove(oid, 2),
        lambda: journal.remove(other.offer_id, 0),
        lambda: journal.create(rev[2]),  # create publishes revision 0 only
    ]
    for call in conflicts:
        assert _code(call) is Code.JOURNAL_REVISION_CONFLICT
        assert _rows(root) == before
    assert _code(lambda: journal.create(rev[0])) is Code.JOURNAL_RECORD_EXISTS
    assert _rows(root) == before
    assert journal.read(oid) == rev[1]


def test_malformed_arguments_are_refused_before_anything(journal: SqliteJournal) -> None:
    for bad in ("", "ab", "A" * 64, "g" * 64, "../" + "a" * 61):
        with pytest.raises(ValueError, match="offer_id"):
            journal.read(bad)
        with pytest.raises(ValueError, match="offer_id"):
            journal.remove(bad, 0)
    with pytest.raises(ValueError, match="capacity"):
        SqliteJournal(journal.root, capacity=1025)
    with pytest.raises(ValueError, match="ownership"):
        SqliteJournal(journal.root, JournalOwnership(journal.root / "elsewhere"))
    with pytest.raises(ValueError, match="absolute"):
        SqliteJournal(Path("relative/root"))


def test_the_connection_is_wal_with_full_synchronous_commits(root: Path) -> None:
    seen: dict[str, object] = {}

    def hook(step: str, conn: sqlite3.Connection) -> None:
        if step == "written":
            seen["journal_mode"] = conn.execute("PRAGMA journal_mode").fetchone()[0]
            seen["synchronous"] = conn.execute("PRAGMA synchronous").fetchone()[0]
            seen["in_transaction"] = conn.in_transaction

    journal = SqliteJournal(root, fault_hook=hook)
    journal.acquire()
    journal.create(accepted_offer(1))
    journal.release()
    assert seen == {"journal_mode": "wal", "synchronous": 2, "in_transaction": True}
    with contextlib.closing(_raw(root)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)
        with pytest.raises(sqlite3.IntegrityError):  # the offer id CHECK is in the schema
            conn.execute("INSERT INTO journal_records VALUES ('X', 0, x'00')")


def test_an_unknown_schema_version_is_corrupt(root: Path) -> None:
    journal = SqliteJournal(root)
    journal.acquire()
    journal.create(accepted_offer(1))
    journal.close()
    with contextlib.closing(_raw(root)) as conn:
        conn.execute("PRAGMA user_version = 7")
    assert _code(lambda: journal.read(accepted_offer(1).offer_id)) is Code.JOURNAL_CORRUPT
    journal.release()


# -- capacity (F-7) ------------------------------------------------------------------------------
@pytest.mark.spec("INBOX-17")
def test_beyond_capacity_is_full_whatever_the_states_and_nothing_is_evicted(root: Path) -> None:
    journal = SqliteJournal(root, capacity=3)
    journal.acquire()
    final = revisions(1)  # ends in completion_acknowledged: final, retention-eligible
    journal.create(final[0])
    for expected, record in enumerate(final[1:]):
        journal.replace(record, expected)
    journal.create(accepted_offer(2))
    journal.create(accepted_offer(3))
    before = _rows(root)
    assert _code(lambda: journal.create(accepted_offer(4))) is Code.JOURNAL_FULL
    assert _rows(root) == before
    journal.remove(final[0].offer_id, final[-1].revision)  # room only by an explicit remove
    journal.create(accepted_offer(4))
    assert len(_rows(root)) == 3
    journal.release()
    for bad in (0, 1025, True, 64.0):
        with pytest.raises(ValueError, match="capacity"):
            SqliteJournal(root, capacity=bad)  # type: ignore[arg-type]
    assert SqliteJournal(root, capacity=1024).capacity == 1024


def _race(count: int, action: Callable[[int], object]) -> list[str]:
    """Run `action(i)` for i in 0..count-1 on threads released together; each outcome's code."""
    barrier = threading.Barrier(count)
    outcomes: list[str] = ["unset"] * count

    def run(i: int) -> None:
        barrier.wait(WAIT_S)
        try:
            action(i)
        except JournalError as exc:
            outcomes[i] = exc.code.value
        else:
            outcomes[i] = "ok"

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    return outcomes


@pytest.mark.spec("INBOX-20")
def test_concurrent_creates_of_distinct_offers_never_exceed_capacity(root: Path) -> None:
    journal = SqliteJournal(root, capacity=5, busy_timeout_ms=RACE_BUSY_TIMEOUT_MS)
    journal.acquire()
    journal.create(accepted_offer(100))  # the connections exist before the race
    records = [accepted_offer(g) for g in range(1, 13)]
    outcomes = _race(len(records), lambda i: journal.create(records[i]))
    assert sorted(outcomes) == ["JOURNAL_FULL"] * 8 + ["ok"] * 4
    created = {records[i].offer_id for i, outcome in enumerate(outcomes) if outcome == "ok"}
    assert {oid for oid, _, _ in _rows(root)} == created | {accepted_offer(100).offer_id}
    journal.release()


@pytest.mark.spec("INBOX-20")
def test_a_conditional_remove_racing_a_replace_has_one_winner(journal: SqliteJournal) -> None:
    rev = revisions()
    for _ in range(10):
        journal.create(rev[0])
        outcomes = _race(
            2,
            lambda i: journal.replace(rev[1], 0) if i == 0 else journal.remove(rev[0].offer_id, 0),
        )
        assert sorted(outcomes) == ["JOURNAL_REVISION_CONFLICT", "ok"]
        stored = journal.read(rev[0].offer_id)
        if outcomes[0] == "ok":  # the replace came first: the remove saw revision 1
            assert stored == rev[1]
            journal.remove(rev[0].offer_id, 1)
        else:
            assert stored is None


@pytest.mark.spec("INBOX-15")
def test_concurrent_creates_of_one_offer_yield_exactly_one_record(root: Path) -> None:
    journal = SqliteJournal(root, busy_timeout_ms=RACE_BUSY_TIMEOUT_MS)
    journal.acquire()
    record = accepted_offer(1)
    # a second adapter: its own connections
    second = SqliteJournal(root, journal.ownership, busy_timeout_ms=RACE_BUSY_TIMEOUT_MS)
    outcomes = _race(8, lambda i: (journal if i % 2 else second).create(record))
    assert sorted(outcomes) == ["JOURNAL_RECORD_EXISTS"] * 7 + ["ok"]
    assert _rows(root) == [(record.offer_id, 0, encode_record(record))]
    second.close()
    journal.release()


# -- size (F-2) ----------------------------------------------------------------------------------
def _file_sizes(root: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(root.iterdir()) if p.is_file()}


@pytest.mark.spec("INBOX-18")
def test_an_oversized_record_is_refused_before_anything_is_written(
    journal: SqliteJournal, root: Path
) -> None:
    journal.create(accepted_offer(1))
    before, sizes = _rows(root), _file_sizes(root)
    big = oversized()
    assert len(encode_record(big)) > 196_608
    assert _code(lambda: journal.create(big)) is Code.JOURNAL_RECORD_TOO_LARGE
    assert (_rows(root), _file_sizes(root)) == (before, sizes)


@pytest.mark.spec("INBOX-18")
def test_an_oversized_create_opens_no_transaction(root: Path) -> None:
    faults = Faults()
    journal = SqliteJournal(root, fault_hook=faults)
    journal.acquire()
    assert _code(lambda: journal.create(oversized())) is Code.JOURNAL_RECORD_TOO_LARGE
    assert faults.seen == []
    assert not (root / DATABASE_NAME).exists()  # not even the database file
    journal.release()


# -- paging (F-8) --------------------------------------------------------------------------------
POOL = 24


@pytest.mark.spec("INBOX-19")
def test_pages_list_every_record_once_in_ascending_order(journal: SqliteJournal) -> None:
    pool = [accepted_offer(g) for g in range(1, POOL + 1)]
    present: set[int] = set()

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        database=None,
    )
    @given(
        chosen=st.sets(st.integers(0, POOL - 1), max_size=POOL),
        limit=st.integers(1, 9) | st.just(64),
    )
    def check(chosen: set[int], limit: int) -> None:
        for i in sorted(present - chosen):
            journal.remove(pool[i].offer_id, 0)
        for i in sorted(chosen - present):
            journal.create(pool[i])
        present.clear()
        present.update(chosen)
        listed: list[JournalRecord] = []
        cursor: str | None = None
        for _ in range(POOL + 2):
            page = journal.list(cursor, limit)
            assert len(page.records) <= limit
            ids = [r.offer_id for r in page.records]
            assert ids == sorted(set(ids))
            assert cursor is None or all(oid > cursor for oid in ids)
            assert page.cursor == (ids[-1] if ids else cursor)
            listed.extend(page.records)
            assert page.has_more == (len(listed) < len(chosen))
            if not page.has_more:
                break
            cursor = page.cursor
        assert listed == sorted((pool[i] for i in chosen), key=lambda r: r.offer_id)

    check()


def test_list_arguments_are_checked(journal: SqliteJournal) -> None:
    for limit in (0, 65, True):
        with pytest.raises(ValueError, match="limit"):
            journal.list(None, limit)
    with pytest.raises(ValueError, match="after"):
        journal.list("not-an-offer-id", 1)
    page = journal.list(None, 64)
    assert (page.records, page.cursor, page.has_more) == ((), None, False)


# -- corruption (F-9) ------------------------------------------------------------------------------
def _damage(kind: str, good: bytes, other: bytes) -> tuple[bytes, int | None]:
    """Damaged bytes (and a revision column, None = unchanged) of the given kind."""
    if kind == "truncated":
        return good[: len(good) // 2], None
    if kind == "flipped":
        at = good.index(b'"state":"') + len(b'"state":"')
        return good[:at] + b"X" + good[at + 1 :], None
    if kind == "not_json":
        return b"\x00\xff garbage", None
    if kind == "another_offer":
        return other, None
    return good, 5  # "revision_column": the row says 5, the bytes say 0


@pytest.mark.spec("INBOX-44")
@pytest.mark.parametrize(
    "kind", ["truncated", "flipped", "not_json", "another_offer", "revision_column"]
)
def test_a_damaged_row_is_corrupt_on_every_operation_and_left_untouched(
    journal: SqliteJournal, root: Path, kind: str
) -> None:
    rev = revisions()
    oid = rev[0].offer_id
    journal.create(rev[0])
    journal.create(accepted_offer(2))
    data, revision = _damage(kind, encode_record(rev[0]), encode_record(accepted_offer(2)))
    with contextlib.closing(_raw(root)) as conn:
        conn.execute(
            "UPDATE journal_records SET record = ?, revision = coalesce(?, revision) "
            "WHERE offer_id = ?",
            (data, revision, oid),
        )
    damaged = _rows(root)
    operations: list[Callable[[], object]] = [
        lambda: journal.read(oid),
        lambda: journal.list(None, 64),
        lambda: journal.replace(rev[1], 0),  # the stored row is decoded before the CAS
        lambda: journal.remove(oid, 0),
        lambda: journal.remove(oid, 5),
    ]
    assert {_code(call) for call in operations} == {Code.JOURNAL_CORRUPT}
    assert _code(lambda: journal.create(rev[0])) is Code.JOURNAL_RECORD_EXISTS
    assert _rows(root) == damaged  # never repaired, skipped or deleted


# -- permissions (F-1) -----------------------------------------------------------------------------
@pytest.mark.spec("INBOX-16")
@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_the_database_files_are_0600_in_a_0700_root_whatever_the_umask(
    root: Path, umask: int
) -> None:
    previous = os.umask(umask)
    try:
        journal = SqliteJournal(root)
        journal.acquire()
        journal.create(accepted_offer(1))
        names = {p.name for p in root.iterdir()}
        assert {DATABASE_NAME, DATABASE_NAME + "-wal", DATABASE_NAME + "-shm"} <= names
        assert _mode(root) == 0o700
        for suffix in ("", "-wal", "-shm"):
            assert _mode(root / (DATABASE_NAME + suffix)) == 0o600
        journal.release()
    finally:
        os.umask(previous)
    assert _mode(root / DATABASE_NAME) == 0o600


@pytest.mark.spec("INBOX-16")
@pytest.mark.parametrize("shape", ["mode_0644", "symlink", "directory", "wal_0644"])
def test_a_database_file_that_is_not_private_is_refused(root: Path, shape: str) -> None:
    journal = SqliteJournal(root)
    journal.acquire()
    journal.create(accepted_offer(1))
    journal.close()
    path = root / DATABASE_NAME
    if shape == "mode_0644":
        path.chmod(0o644)
    elif shape == "symlink":
        path.rename(root / "elsewhere")
        path.symlink_to(root / "elsewhere")
    elif shape == "directory":
        for name in (DATABASE_NAME, DATABASE_NAME + "-wal", DATABASE_NAME + "-shm"):
            with contextlib.suppress(FileNotFoundError):
                (root / name).unlink()
        path.mkdir()
    else:
        (root / (DATABASE_NAME + "-wal")).touch()
        (root / (DATABASE_NAME + "-wal")).chmod(0o644)
    assert _code(lambda: journal.read(accepted_offer(1).offer_id)) is Code.JOURNAL_PERMISSIONS
    assert _code(lambda: journal.create(accepted_offer(2))) is Code.JOURNAL_PERMISSIONS
    journal.release()


@pytest.mark.spec("INBOX-16")
def test_a_root_with_group_or_other_bits_is_refused(root: Path) -> None:
    root.mkdir(mode=0o700)
    root.chmod(0o750)
    journal = SqliteJournal(root)
    assert _code(journal.acquire) is Code.JOURNAL_PERMISSIONS
    assert not (root / DATABASE_NAME).exists()


# -- ownership (W-1) -------------------------------------------------------------------------------
@pytest.mark.spec("INBOX-21")
def test_without_ownership_every_operation_fails_and_opens_nothing(root: Path) -> None:
    rev = revisions()
    journal = SqliteJournal(root)
    operations: list[Callable[[], object]] = [
        lambda: journal.read(rev[0].offer_id),
        lambda: journal.list(None, 8),
        lambda: journal.create(rev[0]),
        lambda: journal.replace(rev[1], 0),
        lambda: journal.remove(rev[0].offer_id, 0),
    ]
    assert {_code(call) for call in operations} == {Code.JOURNAL_NOT_OWNED}
    assert not root.exists()
    journal.acquire()
    journal.create(rev[0])
    journal.release()
    assert {_code(call) for call in operations} == {Code.JOURNAL_NOT_OWNED}  # released


@pytest.mark.spec("INBOX-22")
def test_a_compromised_owner_can_neither_read_nor_write(journal: SqliteJournal, root: Path) -> None:
    rev = revisions()
    journal.create(rev[0])
    before = _rows(root)
    os.utime(root / LOCK_DIR_NAME, ns=(1, 1))  # someone changed the lock's mtime
    assert _code(lambda: journal.read(rev[0].offer_id)) is Code.JOURNAL_COMPROMISED
    assert _code(lambda: journal.replace(rev[1], 0)) is Code.JOURNAL_COMPROMISED
    assert _rows(root) == before


@pytest.mark.spec("INBOX-21")
def test_a_second_process_can_neither_read_nor_write(journal: SqliteJournal, root: Path) -> None:
    rev = revisions()
    journal.create(rev[0])
    journal.replace(rev[1], 0)
    before = _rows(root)
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    released = ctx.Event()
    proc = ctx.Process(target=outsider, args=(str(root), results, released))
    proc.start()
    try:
        seen = dict(results.get(timeout=WAIT_S) for _ in range(6))
        assert seen == {
            "acquire": "JOURNAL_LOCKED",
            "read": "JOURNAL_NOT_OWNED",
            "list": "JOURNAL_NOT_OWNED",
            "create": "JOURNAL_NOT_OWNED",
            "replace": "JOURNAL_NOT_OWNED",
            "remove": "JOURNAL_NOT_OWNED",
        }
        assert _rows(root) == before
        journal.release()
        released.set()
        assert results.get(timeout=WAIT_S) == ("after", "revision:1")
    finally:
        released.set()
        proc.join(WAIT_S)
        if proc.is_alive():  # pragma: no cover - only when the test already failed
            proc.kill()
            proc.join()
    assert proc.exitcode == 0


# -- crashes and faults (INBOX-15, INBOX-43) -------------------------------------------------------
def _restart(root: Path) -> SqliteJournal:
    """A new process's adapter after the old owner died: its lock is stale once the window has
    passed, which the test stands in for by ageing the lock's mtime (W-3 reclaim)."""
    old = time.time_ns() - 10 * 60 * 10**9
    os.utime(root / LOCK_DIR_NAME, ns=(old, old))
    journal = SqliteJournal(root)
    journal.acquire()
    return journal


@pytest.mark.spec("INBOX-15")
@pytest.mark.parametrize(
    ("operation", "step", "survivor"),
    [
        ("create", "written", None),
        ("create", "committed", 0),
        ("replace", "begun", 0),
        ("replace", "written", 0),
        ("replace", "committed", 1),
        ("remove", "written", 0),
        ("remove", "committed", None),
    ],
)
def test_sigkill_mid_transaction_leaves_the_last_durable_revision(
    root: Path, operation: str, step: str, survivor: int | None
) -> None:
    ctx = multiprocessing.get_context("spawn")
    reached = ctx.Event()
    proc = ctx.Process(target=crash_in_transaction, args=(str(root), operation, step, reached))
    proc.start()
    try:
        assert reached.wait(WAIT_S), "the child never reached the step"
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.join(WAIT_S)
    assert proc.exitcode == -signal.SIGKILL
    journal = _restart(root)
    rev = revisions()
    stored = journal.read(rev[0].offer_id)
    assert stored == (None if survivor is None else rev[survivor])
    assert [r.revision for r in journal.list(None, 64).records] == (
        [] if survivor is None else [survivor]
    )
    with contextlib.closing(_raw(root)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    # The journal goes on from there.
    if stored is None:
        journal.create(rev[0])
        stored = rev[0]
    journal.replace(rev[stored.revision + 1], stored.revision)
    journal.release()


FAULTS = [
    ("SQLITE_FULL", 13),  # ENOSPC
    ("SQLITE_IOERR_WRITE", 778),  # EIO
    ("SQLITE_IOERR_FSYNC", 1034),
    ("SQLITE_READONLY", 8),  # EACCES on the file
]


@pytest.mark.spec("INBOX-43")
@pytest.mark.parametrize(("name", "number"), FAULTS)
@pytest.mark.parametrize("step", ["begun", "checked", "written"])
def test_a_storage_fault_inside_the_transaction_keeps_the_prior_revision(
    root: Path, name: str, number: int, step: str
) -> None:
    faults = Faults()
    journal = SqliteJournal(root, fault_hook=faults)
    journal.acquire()
    rev = revisions()
    journal.create(rev[0])
    before = _rows(root)
    attempts: list[Callable[[], object]] = [
        lambda: journal.replace(rev[1], 0),
        lambda: journal.remove(rev[0].offer_id, 0),
        lambda: journal.create(accepted_offer(2)),
    ]
    for attempt in attempts:
        faults.step, faults.error = step, _sqlite_error(name, number)
        error = _error(attempt)
        assert (error.code, error.reason) == (Code.JOURNAL_PERMISSIONS, name)
        assert _rows(root) == before
        assert journal.read(rev[0].offer_id) == rev[0]
    journal.replace(rev[1], 0)  # the adapter is usable again afterwards
    assert journal.read(rev[0].offer_id) == rev[1]
    journal.release()


@pytest.mark.spec("INBOX-43")
def test_a_real_disk_full_fails_closed(root: Path) -> None:
    """SQLite's own SQLITE_FULL: the database may not grow by a page (`max_page_count`)."""

    armed = False

    def no_growth(step: str, conn: sqlite3.Connection) -> None:
        if armed and step == "checked":
            conn.execute("PRAGMA max_page_count = 1")  # clamped to the current size

    journal = SqliteJournal(root, fault_hook=no_growth)
    journal.acquire()
    rev = revisions()
    journal.create(rev[0])
    before = _rows(root)
    document = spec(argv=["echo", "y" * 100_000])  # overflow pages: the file must grow
    delivery = DeliveryAccepted(offer(lease(lease_generation=2), execution_spec=document))
    outcome = journal_step(None, delivery, T0)
    assert isinstance(outcome, JournalApplied)
    big = outcome.record
    assert big is not None
    armed = True
    error = _error(lambda: journal.create(big))
    assert (error.code, error.reason) == (Code.JOURNAL_PERMISSIONS, "SQLITE_FULL")
    assert _rows(root) == before
    armed = False
    journal.close()  # max_page_count lives with the connection
    journal.replace(rev[1], 0)
    assert journal.read(rev[0].offer_id) == rev[1]
    journal.release()


@pytest.mark.spec("INBOX-43")
def test_a_fault_after_commit_is_reported_and_the_revision_is_durable(root: Path) -> None:
    """The response is lost, the write is not: the caller learns the truth by reading."""
    faults = Faults()
    journal = SqliteJournal(root, fault_hook=faults)
    journal.acquire()
    rev = revisions()
    journal.create(rev[0])
    faults.step, faults.error = "committed", _sqlite_error("SQLITE_IOERR_WRITE", 778)
    assert _code(lambda: journal.replace(rev[1], 0)) is Code.JOURNAL_PERMISSIONS
    assert journal.read(rev[0].offer_id) == rev[1]
    assert faults.seen[-4:] == list(STEPS)
    journal.release()


@pytest.mark.parametrize(
    ("name", "number", "code"),
    [
        ("SQLITE_CORRUPT", 11, Code.JOURNAL_CORRUPT),
        ("SQLITE_NOTADB", 26, Code.JOURNAL_CORRUPT),
        ("SQLITE_BUSY", 5, Code.JOURNAL_LOCKED),
        ("SQLITE_CANTOPEN", 14, Code.JOURNAL_PERMISSIONS),
    ],
)
def test_sqlite_errors_map_to_fixed_codes(root: Path, name: str, number: int, code: Code) -> None:
    faults = Faults()
    journal = SqliteJournal(root, fault_hook=faults)
    journal.acquire()
    faults.step, faults.error = "written", _sqlite_error(name, number)
    error = _error(lambda: journal.create(accepted_offer(1)))
    assert (error.code, error.reason) == (code, name)
    assert journal.read(accepted_offer(1).offer_id) is None
    journal.release()


def test_an_unexpected_error_is_rolled_back_and_propagates(root: Path) -> None:
    faults = Faults()
    journal = SqliteJournal(root, fault_hook=faults)
    journal.acquire()
    faults.step, faults.error = "written", RuntimeError("boom")
    with pytest.raises(RuntimeError):
        journal.create(accepted_offer(1))
    assert journal.read(accepted_offer(1).offer_id) is None
    journal.create(accepted_offer(1))
    journal.release()


@pytest.mark.spec("INBOX-44")
def test_repr_and_errors_carry_no_secret(journal: SqliteJournal) -> None:
    journal.create(accepted_offer(1))
    assert not any(secret in repr(journal) for secret in SECRETS)
    _error(lambda: journal.create(accepted_offer(1)))  # asserts its own text
    _error(lambda: journal.create(oversized()))


def test_a_read_during_a_write_sees_the_last_committed_revision(root: Path) -> None:
    """F-10: reads run on their own connection and never wait for a mutation in progress."""
    seen: list[JournalRecord | None] = []
    rev = revisions()

    def hook(step: str, conn: sqlite3.Connection) -> None:
        if step == "written" and not seen:
            reader = threading.Thread(target=lambda: seen.append(adapter.read(rev[0].offer_id)))
            reader.start()
            reader.join(WAIT_S)
            assert not reader.is_alive()

    adapter = SqliteJournal(root, fault_hook=hook)
    adapter.acquire()
    adapter.create(rev[0])  # the hook reads before this commits: nothing yet
    adapter.replace(rev[1], 0)
    assert seen == [None]
    seen.clear()
    adapter.replace(rev[2], 1)  # mid-replace the reader sees revision 1
    assert seen == [rev[1]]
    assert adapter.read(rev[0].offer_id) == rev[2]
    adapter.release()
