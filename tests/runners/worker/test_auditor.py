"""The startup auditor on the real journal adapters (SPEC §3.10 U-1..U-5; INBOX-25..INBOX-27).

Every test runs against the file journal on a temporary directory and the SQLite journal on a
temporary file, with real ownership. Records are reached through `journal_step` (the fixtures),
one distinct offer per journal state and recovery reason.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

from kernel.specs.budgets import Paging
from kernel.specs.codes import Code
from kernel.specs.journal import (
    AUDIT_CLASSIFICATION,
    AuditClass,
    JournalState,
    RecoveryReason,
)
from kernel.worker.auditor import AuditResult
from kernel.worker.journal import (
    ControlPlaneAlreadyRunning,
    ControlPlaneTerminal,
    FailStartAcknowledged,
    JournalApplied,
    JournalEvent,
    LaunchOutcomeUnknown,
    LeaseLost,
    PrepareFailed,
    journal_step,
)
from kernel.worker.record import JournalRecord
from runners.worker.auditor import AuditRefused, StartupAuditor
from runners.worker.journal.file import FileJournal, record_name
from runners.worker.journal.port import JournalError, JournalPage
from runners.worker.journal.sqlite import DATABASE_NAME, SqliteJournal
from tests.support.journal_fixtures import CALLBACK_TOKEN, LEASE_TOKEN, revisions

Kind = Literal["file", "sqlite"]
KINDS: tuple[Kind, ...] = ("file", "sqlite")
BUDGET = Paging(16, 4)  # the edge default (U-2): covers the default capacity of 64
SECRETS = (LEASE_TOKEN.reveal(), CALLBACK_TOKEN, "secret-command-line")


# -- records: one distinct offer (lease generation) per state and recovery reason -------------
def _then(chain: tuple[JournalRecord, ...], event: JournalEvent) -> tuple[JournalRecord, ...]:
    last = chain[-1]
    outcome = journal_step(last, event, last.updated_at_ms + 1)
    assert isinstance(outcome, JournalApplied), outcome
    assert outcome.record is not None
    return (*chain, outcome.record)


def variants(first_generation: int = 1) -> dict[str, tuple[JournalRecord, ...]]:
    """Name -> the revisions of one offer ending in that state (every §3.4 state and every
    recovery reason), each offer with its own lease generation."""
    names = [
        "accepted",
        "starting_acknowledged",
        "launching",
        "started",
        "running_acknowledged",
        "completion_acknowledged",
        "start_failed",
        "start_failure_acknowledged",
        "launch_outcome_unknown",
        "control_plane_already_running",
        "control_plane_terminal",
        "lease_lost_stopped",
        "lease_lost_unverified",
    ]
    out: dict[str, tuple[JournalRecord, ...]] = {}
    for offset, name in enumerate(names):
        chain = revisions(first_generation + offset)
        by_state = {
            "accepted": chain[:1],
            "starting_acknowledged": chain[:2],
            "launching": chain[:3],
            "started": chain[:4],
            "running_acknowledged": chain[:5],
            "completion_acknowledged": chain[:6],
        }
        if name in by_state:
            out[name] = by_state[name]
        elif name == "start_failed":
            out[name] = _then(chain[:2], PrepareFailed("PREPARE_FAILED"))
        elif name == "start_failure_acknowledged":
            out[name] = _then(_then(chain[:2], PrepareFailed()), FailStartAcknowledged())
        elif name == "launch_outcome_unknown":
            out[name] = _then(chain[:3], LaunchOutcomeUnknown())
        elif name == "control_plane_already_running":
            out[name] = _then(chain[:1], ControlPlaneAlreadyRunning())
        elif name == "control_plane_terminal":
            out[name] = _then(chain[:4], ControlPlaneTerminal())
        elif name == "lease_lost_stopped":
            out[name] = _then(chain[:4], LeaseLost(stopped=True))
        else:
            out[name] = _then(chain[:3], LeaseLost(stopped=False))
    return out


def write(journal: FileJournal | SqliteJournal, chain: tuple[JournalRecord, ...]) -> None:
    journal.create(chain[0])
    for record in chain[1:]:
        journal.replace(record, record.revision - 1)


# -- adapters ----------------------------------------------------------------------------------
def make_journal(kind: Kind, root: Path, capacity: int = 64) -> FileJournal | SqliteJournal:
    if kind == "file":
        return FileJournal(root, capacity=capacity)
    return SqliteJournal(root, capacity=capacity)


def corrupt(kind: Kind, root: Path, offer_id: str) -> None:
    """Damage one stored record behind the adapter's back (F-9)."""
    if kind == "file":
        (root / record_name(offer_id)).write_bytes(b'{"schema_version": 1, "truncated')
        return
    with contextlib.closing(sqlite3.connect(root / DATABASE_NAME)) as conn, conn:
        conn.execute(
            "UPDATE journal_records SET record = ? WHERE offer_id = ?", (b"{garbage", offer_id)
        )


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> Kind:
    value: Kind = request.param
    return value


@pytest.fixture
def journal(kind: Kind, tmp_path: Path) -> Iterator[FileJournal | SqliteJournal]:
    store = make_journal(kind, tmp_path / "journal")
    store.acquire()
    yield store
    with contextlib.suppress(JournalError):
        store.release()


class ListOnly:
    """The journal as a spy: `list` and `capacity` pass through and are counted; every other
    port (writes, reads by id, ownership) fails the test when called."""

    def __init__(self, inner: FileJournal | SqliteJournal) -> None:
        self._inner = inner
        self.lists: list[str | None] = []

    @property
    def capacity(self) -> int:
        return self._inner.capacity

    def list(self, after: str | None, limit: int) -> JournalPage:
        self.lists.append(after)
        return self._inner.list(after, limit)

    def create(self, record: JournalRecord) -> None:
        pytest.fail("the auditor created a record")

    def replace(self, record: JournalRecord, expected_revision: int) -> None:
        pytest.fail("the auditor replaced a record")

    def remove(self, offer_id: str, expected_revision: int) -> None:
        pytest.fail("the auditor removed a record")

    def read(self, offer_id: str) -> JournalRecord | None:
        pytest.fail("the auditor read by id (it lists only)")

    def acquire(self) -> None:
        pytest.fail("the auditor acquired ownership")

    def release(self) -> None:
        pytest.fail("the auditor released ownership")


class ForbiddenPort:
    """An ACK / Executor / stop / delete port: touching it in any way fails the test."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attribute: str) -> object:
        pytest.fail(f"the auditor used the {object.__getattribute__(self, '_name')} port")

    def __call__(self, *args: object, **kwargs: object) -> object:
        pytest.fail(f"the auditor called the {object.__getattribute__(self, '_name')} port")


FileState = tuple[str, int, int, int, int]


def snapshot(root: Path) -> dict[str, FileState]:
    """Every regular file under the root: SHA-256, size, mode, inode and mtime; plus the root
    directory's own entry list, inode and mtime (a created or removed entry changes it).

    Two things are left out because they are not journal state: the lock directory's mtime
    (the refresh timer's, W-4), and the content and mtime of SQLite's `-shm` file, the
    shared-memory WAL index that every reader updates with its read mark (it holds no record
    and is rebuilt from the WAL; SQLite never reads it as durable data). Its inode, size and
    mode are still compared, and the database and `-wal` are compared byte for byte."""
    found: dict[str, FileState] = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = Path(directory) / name
            st = path.stat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            mtime = st.st_mtime_ns
            if name.endswith("-shm"):
                digest, mtime = "<wal-index>", 0
            key = str(path.relative_to(root))
            found[key] = (digest, st.st_size, stat.S_IMODE(st.st_mode), st.st_ino, mtime)
    st = root.stat()
    listing = ",".join(sorted(os.listdir(root)))
    found["<root>"] = (listing, 0, stat.S_IMODE(st.st_mode), st.st_ino, st.st_mtime_ns)
    return found


def _no_secret(value: object) -> None:
    text = repr(value)
    for secret in SECRETS:
        assert secret not in text


# -- U-1 / INBOX-27: strictly read-only ---------------------------------------------------------
@pytest.mark.spec("INBOX-27")
def test_auditing_leaves_every_journal_file_byte_identical(
    kind: Kind, journal: FileJournal | SqliteJournal, tmp_path: Path
) -> None:
    """U-1: after an audit of a journal holding every state, every file under the root (the
    record files, or the SQLite database with its -wal and -shm, and the lock's owner file)
    has the same bytes, size, mode, inode and mtime, and the root lists the same entries; the
    only journal call was `list`."""
    for chain in variants().values():
        write(journal, chain)
    root = tmp_path / "journal"
    names = set(os.listdir(root))
    if kind == "sqlite":
        assert {DATABASE_NAME, DATABASE_NAME + "-wal"} <= names
        assert (root / (DATABASE_NAME + "-wal")).stat().st_size > 0  # the WAL holds the writes
    else:
        assert len([n for n in names if n.endswith(".json")]) == len(variants())
    before = snapshot(root)
    spy = ListOnly(journal)
    result = StartupAuditor(spy, BUDGET).audit()
    assert isinstance(result, AuditResult)
    assert len(result.entries) == len(variants())
    assert snapshot(root) == before
    assert spy.lists == [None]  # 13 records fit one page of 16: one read, nothing else


def test_the_snapshot_sees_a_single_write(
    journal: FileJournal | SqliteJournal, tmp_path: Path
) -> None:
    """The byte-identity check above can fail: one replace (a write of one revision) changes
    the snapshot of either adapter."""
    chain = variants()["started"]
    write(journal, chain[:-1])
    before = snapshot(tmp_path / "journal")
    journal.replace(chain[-1], chain[-1].revision - 1)
    assert snapshot(tmp_path / "journal") != before


@pytest.mark.spec("INBOX-27")
def test_a_corrupt_journal_is_reported_and_left_exactly_as_found(
    kind: Kind, journal: FileJournal | SqliteJournal, tmp_path: Path
) -> None:
    """U-1, F-9: a corrupt record is `AUDIT_JOURNAL_CORRUPT` (with the journal's code), and the
    audit neither repairs nor deletes it: every file stays byte-identical."""
    chains = list(variants().values())
    for chain in chains:
        write(journal, chain)
    corrupt(kind, tmp_path / "journal", chains[3][-1].offer_id)
    before = snapshot(tmp_path / "journal")
    result = StartupAuditor(ListOnly(journal), BUDGET).audit()
    assert result == AuditRefused(Code.AUDIT_JOURNAL_CORRUPT, Code.JOURNAL_CORRUPT, 0)
    assert snapshot(tmp_path / "journal") == before


@pytest.mark.spec("INBOX-27")
def test_the_auditor_takes_no_ack_executor_stop_or_delete_port(
    journal: FileJournal | SqliteJournal,
) -> None:
    """U-1: the auditor's only inputs are the journal and the budget. Handing it an ACK
    (control plane), Executor, stop (controller) or delete (receipt store) port is a
    `TypeError`, and none of those spies is touched."""
    assert list(inspect.signature(StartupAuditor).parameters) == ["journal", "budget"]
    for port in ("control_plane", "executor", "controller", "receipts"):
        spy = ForbiddenPort(port)
        with pytest.raises(TypeError):
            StartupAuditor(journal, BUDGET, **{port: spy})
        with pytest.raises(TypeError):
            StartupAuditor(journal, BUDGET, spy)  # type: ignore[call-arg]
    auditor = StartupAuditor(journal, BUDGET)
    assert {name for name in dir(auditor) if not name.startswith("_")} == {"audit", "budget"}


# -- U-4 / U-5 / INBOX-25: classification and the result ---------------------------------------
@pytest.mark.spec("INBOX-25")
def test_every_state_and_reason_is_classified_as_in_u4(
    journal: FileJournal | SqliteJournal,
) -> None:
    """U-4, U-5: one entry per record in ascending `offer_id` order carrying offer id, Attempt
    id, state, reason and the U-4 class; counts per class; `reconciliation_required` because
    launching/started records are present; no token, command line or ExecutionSpec."""
    chains = variants()
    for chain in chains.values():
        write(journal, chain)
    result = StartupAuditor(journal, BUDGET).audit()
    assert isinstance(result, AuditResult)
    finals = sorted((chain[-1] for chain in chains.values()), key=lambda r: r.offer_id)
    assert [e.offer_id for e in result.entries] == [r.offer_id for r in finals]
    for found, record in zip(result.entries, finals, strict=True):
        assert found.attempt_id == record.offer.lease.attempt_id
        assert found.state is record.state
        assert found.recovery_reason is record.recovery_reason
        assert found.classification is AUDIT_CLASSIFICATION[record.state]
    reasons = {e.recovery_reason for e in result.entries} - {None}
    assert reasons == set(RecoveryReason)
    assert {e.state for e in result.entries} == set(JournalState)
    assert dict(result.counts) == {
        AuditClass.NO_LOCAL_EXECUTION: 3,
        AuditClass.SETTLED_START_FAILURE: 1,
        AuditClass.SETTLED_COMPLETION: 1,
        AuditClass.LAUNCH_RECONCILIATION: 6,
        AuditClass.EXECUTION_RECONCILIATION: 2,
    }
    assert result.status is Code.RECONCILIATION_REQUIRED
    _no_secret(result)


@pytest.mark.spec("INBOX-25")
def test_settled_and_waiting_records_are_ready(journal: FileJournal | SqliteJournal) -> None:
    """U-5 [decision]: `ready` when no entry needs launch or execution reconciliation (settled
    completions do not block startup); an empty journal is ready too."""
    empty = StartupAuditor(journal, BUDGET).audit()
    assert isinstance(empty, AuditResult)
    assert (empty.entries, empty.status) == ((), Code.READY)
    chains = variants()
    for name in (
        "accepted",
        "start_failed",
        "start_failure_acknowledged",
        "completion_acknowledged",
    ):
        write(journal, chains[name])
    result = StartupAuditor(journal, BUDGET).audit()
    assert isinstance(result, AuditResult)
    assert len(result.entries) == 4
    assert result.status is Code.READY


@pytest.mark.spec("INBOX-25")
def test_a_scan_over_several_pages_lists_every_record_once(
    journal: FileJournal | SqliteJournal,
) -> None:
    """U-3 on a real adapter: 13 records with pages of 4 take exactly 4 reads, each after the
    previous cursor, and every record appears once, in order."""
    for chain in variants().values():
        write(journal, chain)
    spy = ListOnly(journal)
    result = StartupAuditor(spy, Paging(4, 16)).audit()
    assert isinstance(result, AuditResult)
    ids = [e.offer_id for e in result.entries]
    assert ids == sorted(set(ids))
    assert len(ids) == 13
    assert spy.lists == [None, ids[3], ids[7], ids[11]]


# -- U-2 / U-3 / INBOX-26: budgets and bad pages -------------------------------------------------
@pytest.mark.spec("INBOX-26")
def test_more_records_than_the_budget_is_exhausted_without_an_extra_read(
    kind: Kind, tmp_path: Path
) -> None:
    """U-2/U-3: a journal holding more records than `page_size x pages` (written with a larger
    capacity, audited with a smaller one) fails `AUDIT_BUDGET_EXHAUSTED` after exactly `pages`
    reads; nothing partial is reported."""
    root = tmp_path / "journal"
    writer = make_journal(kind, root, capacity=16)
    writer.acquire()
    for chain in list(variants().values())[:5]:
        write(writer, chain)
    writer.release()
    journal = make_journal(kind, root, capacity=4)
    journal.acquire()
    try:
        spy = ListOnly(journal)
        result = StartupAuditor(spy, Paging(2, 2)).audit()
        assert result == AuditRefused(Code.AUDIT_BUDGET_EXHAUSTED, None, 2)
        assert len(spy.lists) == 2
    finally:
        journal.release()


class _Repeating:
    """A broken port that returns its first page again for every cursor."""

    def __init__(self, inner: FileJournal | SqliteJournal) -> None:
        self._inner = inner

    @property
    def capacity(self) -> int:
        return self._inner.capacity

    def list(self, after: str | None, limit: int) -> JournalPage:
        return self._inner.list(None, limit)


@pytest.mark.spec("INBOX-26")
def test_a_repeated_page_is_a_cursor_error(journal: FileJournal | SqliteJournal) -> None:
    """U-3: a port that repeats a page is `AUDIT_CURSOR_INVALID` on the second page."""
    for chain in list(variants().values())[:6]:
        write(journal, chain)
    result = StartupAuditor(_Repeating(journal), Paging(4, 16)).audit()
    assert result == AuditRefused(Code.AUDIT_CURSOR_INVALID, None, 1)


@pytest.mark.spec("INBOX-26")
def test_a_read_without_ownership_is_a_journal_refusal(kind: Kind, tmp_path: Path) -> None:
    """U-3: any `JournalError` while reading (here W-1, ownership never acquired) is
    `AUDIT_JOURNAL_CORRUPT`, carrying the journal's code, never its text."""
    result = StartupAuditor(make_journal(kind, tmp_path / "journal"), BUDGET).audit()
    assert result == AuditRefused(Code.AUDIT_JOURNAL_CORRUPT, Code.JOURNAL_NOT_OWNED, 0)


@pytest.mark.spec("INBOX-26")
@pytest.mark.parametrize(
    "budget", [Paging(8, 4), Paging(65, 1), Paging(64, 17), Paging(0, 4), Paging(16, 0)]
)
def test_a_budget_outside_u2_is_rejected_at_construction(
    journal: FileJournal | SqliteJournal, budget: Paging
) -> None:
    """U-2: above the hard limits (64 per page, 16 pages), empty, or not covering the journal
    capacity (64): a `ValueError` before any read."""
    with pytest.raises(ValueError, match="audit"):
        StartupAuditor(ListOnly(journal), budget)
