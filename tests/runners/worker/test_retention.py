"""Terminal retention and settled receipt cleanup on the real adapters (SPEC §3.14, §3.13, D-1;
INBOX-39, INBOX-41, CAD-15).

Every test runs against the file journal on a temporary directory and the SQLite journal on a
temporary file (real ownership), with a real `CompletionReceiptStore` directory. Each offer is
its own Run and Attempt (so each has its own receipt file), and every record is reached through
`journal_step`; every record gets a receipt, whatever its state, so a wrong deletion shows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel.identity import Secret
from kernel.specs.codes import Code
from kernel.specs.journal import LEASE_LOST_REASONS, JournalState
from kernel.specs.states import CompletionOutcome
from kernel.worker.journal import (
    CompletionAcknowledged,
    ControlPlaneAlreadyRunning,
    ControlPlaneTerminal,
    DeliveryAccepted,
    FailStartAcknowledged,
    HandleReturned,
    JournalApplied,
    JournalEvent,
    LaunchOutcomeUnknown,
    LeaseLost,
    PrepareFailed,
    PrepareSucceeded,
    RunningAcknowledged,
    StartingAcknowledged,
    journal_step,
)
from kernel.worker.record import JournalRecord, OfferCandidate
from runners.worker.journal.file import FileJournal, _Os, record_name
from runners.worker.journal.port import JournalError, JournalPage
from runners.worker.journal.sqlite import DATABASE_NAME, SqliteJournal
from runners.worker.posix.receipts import (
    CompletionReceiptStore,
    Receipt,
    ReceiptDeleteError,
    ReceiptErrorCode,
)
from runners.worker.retention import (
    DEFAULT_DELETE_BUDGET,
    DEFAULT_PAGE_SIZE,
    ReceiptCleanup,
    RetentionKeep,
    TerminalRetention,
    cleanup_settled_receipt,
)
from tests.support.journal_fixtures import (
    CALLBACK_DIGEST,
    CALLBACK_TOKEN,
    LEASE_TOKEN,
    T0,
    events,
    lease,
    offer,
    spec,
)

Kind = Literal["file", "sqlite"]
MINUTE = 60_000
DAY = 24 * 60 * MINUTE
RETENTION = 10 * MINUTE
#: Long after every record below was written (they all date from T0..T0+10).
LATE = T0 + 100 + RETENTION

NAMES = (
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
)


# -- records: one Run/Attempt per offer -----------------------------------------------------------
def _step(chain: tuple[JournalRecord, ...], event: JournalEvent) -> tuple[JournalRecord, ...]:
    last = chain[-1]
    outcome = journal_step(last, event, last.updated_at_ms + 1)
    assert isinstance(outcome, JournalApplied), outcome
    assert outcome.record is not None
    return (*chain, outcome.record)


def chain_for(n: int, name: str) -> tuple[JournalRecord, ...]:
    """The revisions of the offer of Run `r<n>` / Attempt `r<n>-a1` ending as `name`."""
    run, attempt = f"r{n}", f"r{n}-a1"
    snapshot = lease(run_id=run, attempt_id=attempt)
    document = offer(
        snapshot,
        execution_spec=spec(run_id=run, attempt_id=attempt),
        candidate=OfferCandidate(run, attempt, "proj", "task", 1, "shell"),
    )
    first = journal_step(None, DeliveryAccepted(document), T0)
    assert isinstance(first, JournalApplied)
    assert first.record is not None
    chain: tuple[JournalRecord, ...] = (first.record,)
    if name == "accepted":
        return chain
    if name == "control_plane_already_running":
        return _step(chain, ControlPlaneAlreadyRunning())
    chain = _step(chain, StartingAcknowledged(lease(version=3, run_id=run, attempt_id=attempt)))
    if name == "starting_acknowledged":
        return chain
    if name in ("start_failed", "start_failure_acknowledged"):
        chain = _step(chain, PrepareFailed("PREPARE_FAILED"))
        return chain if name == "start_failed" else _step(chain, FailStartAcknowledged())
    chain = _step(chain, PrepareSucceeded(1, CALLBACK_DIGEST, T0 + 5))
    if name == "launching":
        return chain
    if name == "launch_outcome_unknown":
        return _step(chain, LaunchOutcomeUnknown())
    if name == "lease_lost_unverified":
        return _step(chain, LeaseLost(stopped=False))
    chain = _step(chain, HandleReturned("posix:v1:boot:4242:99"))
    if name == "started":
        return chain
    if name == "control_plane_terminal":
        return _step(chain, ControlPlaneTerminal())
    if name == "lease_lost_stopped":
        return _step(chain, LeaseLost(stopped=True))
    chain = _step(chain, RunningAcknowledged())
    if name == "running_acknowledged":
        return chain
    assert name == "completion_acknowledged", name
    return _step(chain, CompletionAcknowledged())


def receipt_for(record: JournalRecord, sequence: int | None = None) -> Receipt:
    """A receipt naming the record's Run and Attempt (sequence: the record's, or `sequence`)."""
    return Receipt(
        run_id=record.offer.lease.run_id,
        attempt_id=record.offer.lease.attempt_id,
        executor_started_at_ms=record.executor_started_at_ms or 0,
        callback_sequence=sequence or record.callback_sequence or 1,
        outcome=CompletionOutcome.SUCCEEDED,
        exit_code=0,
        finished_at_ms=record.updated_at_ms,
        callback_token=Secret.of(CALLBACK_TOKEN, "callback_token"),
    )


def write(journal: FileJournal | SqliteJournal, chain: tuple[JournalRecord, ...]) -> None:
    journal.create(chain[0])
    for record in chain[1:]:
        journal.replace(record, record.revision - 1)


def all_records(journal: FileJournal | SqliteJournal) -> dict[str, JournalRecord]:
    page = journal.list(None, 64)
    assert not page.has_more
    return {r.offer_id: r for r in page.records}


def receipt_files(receipts: CompletionReceiptStore) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(receipts.root.iterdir())
        if not p.name.startswith(".")
    }


# -- adapters -----------------------------------------------------------------------------------
class FaultyUnlink(_Os):
    """The real OS, except that `unlink` fails with EIO while `failing` is set."""

    failing = False

    def unlink(self, path: Path) -> None:
        if self.failing:
            raise OSError(errno.EIO, "injected")
        super().unlink(path)


class Faults:
    """The file adapter's unlink fault or the SQLite adapter's fault hook, switched on demand."""

    def __init__(self) -> None:
        self.os = FaultyUnlink()
        self.failing = False

    def hook(self, step: str, connection: sqlite3.Connection) -> None:
        if self.failing and step == "written":
            raise sqlite3.OperationalError("injected")

    def set(self, failing: bool) -> None:
        self.failing = failing
        self.os.failing = failing


def make_journal(
    kind: Kind, root: Path, faults: Faults | None = None
) -> FileJournal | SqliteJournal:
    if kind == "file":
        return FileJournal(root, _os=None if faults is None else faults.os)
    return SqliteJournal(root, fault_hook=None if faults is None else faults.hook)


@pytest.fixture(params=["file", "sqlite"])
def kind(request: pytest.FixtureRequest) -> Kind:
    value: Kind = request.param
    return value


@pytest.fixture
def faults() -> Faults:
    return Faults()


@pytest.fixture
def journal(kind: Kind, tmp_path: Path, faults: Faults) -> Iterator[FileJournal | SqliteJournal]:
    store = make_journal(kind, tmp_path / "journal", faults)
    store.acquire()
    yield store
    with contextlib.suppress(JournalError):
        store.release()


@pytest.fixture
def receipts(tmp_path: Path) -> Iterator[CompletionReceiptStore]:
    store = CompletionReceiptStore(tmp_path / "receipts")
    store.ensure_directory()
    yield store
    os.chmod(store.root, 0o700)  # a test may have opened it up to make deletes fail


def seed(
    journal: FileJournal | SqliteJournal,
    receipts: CompletionReceiptStore,
    names: tuple[str, ...] = NAMES,
    first: int = 1,
) -> dict[str, JournalRecord]:
    """One offer per name (Runs `r<first>`, ...), each with a published receipt; returns
    `name#n` -> final record, in the order given."""
    final: dict[str, JournalRecord] = {}
    for n, name in enumerate(names, start=first):
        chain = chain_for(n, name)
        write(journal, chain)
        receipts.publish(receipt_for(chain[-1]))
        final[f"{name}#{n}"] = chain[-1]
    return final


class Logged:
    """The real journal and receipt store with `remove` and receipt `delete` logged in order."""

    def __init__(
        self, journal: FileJournal | SqliteJournal, receipts: CompletionReceiptStore
    ) -> None:
        self.journal = journal
        self.receipts = receipts
        self.log: list[tuple[str, str]] = []

    # journal port
    def list(self, after: str | None, limit: int) -> JournalPage:
        return self.journal.list(after, limit)

    def read(self, offer_id: str) -> JournalRecord | None:
        return self.journal.read(offer_id)

    def create(self, record: JournalRecord) -> None:
        pytest.fail("retention never creates")

    def replace(self, record: JournalRecord, expected_revision: int) -> None:
        pytest.fail("retention never replaces")

    def remove(self, offer_id: str, expected_revision: int) -> None:
        self.log.append(("remove", offer_id))
        self.journal.remove(offer_id, expected_revision)


class LoggedReceipts:
    """The receipt store, logging deletes into the same log as the journal's removes."""

    def __init__(self, logged: Logged) -> None:
        self._logged = logged

    def read(self, attempt_id: str) -> Receipt | None:
        return self._logged.receipts.read(attempt_id)

    def delete(self, attempt_id: str) -> None:
        self._logged.log.append(("receipt_delete", attempt_id))
        self._logged.receipts.delete(attempt_id)


# -- INBOX-39 / INBOX-41: what is deleted, in which order ---------------------------------------
@pytest.mark.spec("INBOX-39", "INBOX-41", "CAD-15")
def test_only_old_final_records_are_deleted_and_receipts_go_first(
    journal: FileJournal | SqliteJournal, receipts: CompletionReceiptStore
) -> None:
    """Of one record per state and recovery reason, all older than the retention, exactly the
    `completion_acknowledged` and `start_failure_acknowledged` ones are deleted; the completion's
    receipt is deleted before its record; every other record (`running_acknowledged`, both
    lease-lost reasons and every non-final state included) and every other receipt is left
    byte-identical."""
    final = seed(journal, receipts)
    before = all_records(journal)
    receipts_before = receipt_files(receipts)
    logged = Logged(journal, receipts)
    retention = TerminalRetention(logged, LoggedReceipts(logged), RETENTION, 64, 64)
    result = retention.run(None, LATE)
    by_state = {r.state: r for r in final.values() if r.recovery_reason is None}
    completed = by_state[JournalState.COMPLETION_ACKNOWLEDGED]
    failed = by_state[JournalState.START_FAILURE_ACKNOWLEDGED]
    assert set(result.deleted_offer_ids) == {completed.offer_id, failed.offer_id}
    assert result.deleted == 2
    assert (result.examined, result.kept, result.cursor, result.code) == (13, (), None, None)
    attempt = completed.offer.lease.attempt_id
    assert logged.log.index(("receipt_delete", attempt)) < logged.log.index(
        ("remove", completed.offer_id)
    )
    assert [entry for entry in logged.log if entry[0] == "receipt_delete"] == [
        ("receipt_delete", attempt)
    ]
    after = all_records(journal)
    assert after == {k: v for k, v in before.items() if k not in result.deleted_offer_ids}
    lease_lost = [r for r in after.values() if r.recovery_reason in LEASE_LOST_REASONS]
    assert len(lease_lost) == 2  # INBOX-41: never deleted
    assert receipt_files(receipts) == {
        k: v for k, v in receipts_before.items() if k != f"{attempt}.json"
    }


@pytest.mark.spec("INBOX-39")
def test_a_record_exactly_as_old_as_the_retention_is_kept(
    journal: FileJournal | SqliteJournal, receipts: CompletionReceiptStore
) -> None:
    """§3.14 [decision] ages: the completion from `completion_acknowledged_at_ms`, the start
    failure from `updated_at_ms`; each must be strictly older than the retention."""
    final = seed(journal, receipts, ("completion_acknowledged", "start_failure_acknowledged"))
    completed, failed = final.values()
    assert completed.completion_acknowledged_at_ms is not None
    retention = TerminalRetention(journal, receipts, RETENTION)
    at_limit = retention.run(None, failed.updated_at_ms + RETENTION)
    assert at_limit.deleted == 0
    just_past_failure = retention.run(None, failed.updated_at_ms + RETENTION + 1)
    assert just_past_failure.deleted_offer_ids == (failed.offer_id,)
    at_completion_limit = retention.run(None, completed.completion_acknowledged_at_ms + RETENTION)
    assert at_completion_limit.deleted == 0
    past = retention.run(None, completed.completion_acknowledged_at_ms + RETENTION + 1)
    assert past.deleted_offer_ids == (completed.offer_id,)
    assert all_records(journal) == {}


# -- budgets and the cursor -----------------------------------------------------------------------
@pytest.mark.spec("INBOX-39")
def test_the_delete_budget_stops_mid_page_and_the_rest_comes_back_next_call(
    journal: FileJournal | SqliteJournal, receipts: CompletionReceiptStore
) -> None:
    """At most `delete_budget` deletions per call: the call stops at the record that used the
    budget up (its offer id is the cursor), the remaining records come back next call, and the
    scan resets to the start once it reaches the end. Nothing but the eligible records goes."""
    names = ("start_failure_acknowledged", "accepted") * 3 + ("completion_acknowledged",) * 4
    final = seed(journal, receipts, names)
    final_states = {JournalState.COMPLETION_ACKNOWLEDGED, JournalState.START_FAILURE_ACKNOWLEDGED}
    eligible = sorted(r.offer_id for r in final.values() if r.state in final_states)
    ordered = sorted(r.offer_id for r in final.values())
    retention = TerminalRetention(journal, receipts, RETENTION, page_size=16, delete_budget=2)
    cursor: str | None = None
    calls = []
    for _ in range(10):
        result = retention.run(cursor, LATE)
        calls.append(result)
        assert result.deleted <= 2
        cursor = result.cursor
        if cursor is None:
            break
    deleted = [oid for r in calls for oid in r.deleted_offer_ids]
    assert sorted(deleted) == eligible
    assert deleted == [oid for oid in ordered if oid in eligible]  # in journal order
    for result in calls[:-1]:  # each stopped where its budget ran out
        assert result.cursor == result.deleted_offer_ids[-1]
    assert calls[-1].cursor is None
    assert len(calls) == 4  # 7 eligible, 2 per call
    left = all_records(journal)
    assert {r.state for r in left.values()} == {JournalState.ACCEPTED}
    # Only the completions' receipts were deleted (a start failure has no receipt to clean).
    assert len(receipt_files(receipts)) == 6


@pytest.mark.spec("INBOX-39")
def test_the_cursor_is_the_last_record_examined_and_resets_at_the_end(
    journal: FileJournal | SqliteJournal, receipts: CompletionReceiptStore
) -> None:
    """One page per call: with pages of 2 over 5 records the cursors are the 2nd and 4th offer
    ids, then the start again; a call from the start after that sees the first page again."""
    final = seed(
        journal,
        receipts,
        ("accepted", "started", "launching", "running_acknowledged", "start_failed"),
    )
    ids = sorted(r.offer_id for r in final.values())
    retention = TerminalRetention(journal, receipts, RETENTION, page_size=2)
    first = retention.run(None, LATE)
    second = retention.run(first.cursor, LATE)
    third = retention.run(second.cursor, LATE)
    assert [(r.cursor, r.examined) for r in (first, second, third)] == [
        (ids[1], 2),
        (ids[3], 2),
        (None, 1),
    ]
    assert retention.run(third.cursor, LATE).cursor == ids[1]
    assert all(r.deleted == 0 for r in (first, second, third))


# -- races and failures keep the record ------------------------------------------------------------
class RacingRemove(Logged):
    """Before the remove reaches the adapter, a concurrent writer stores a newer revision."""

    def remove(self, offer_id: str, expected_revision: int) -> None:
        stored = self.journal.read(offer_id)
        assert stored is not None
        newer = dataclasses.replace(
            stored, revision=stored.revision + 1, updated_at_ms=stored.updated_at_ms + 1
        )
        self.journal.replace(newer, stored.revision)
        super().remove(offer_id, expected_revision)


class RacingRead(Logged):
    """Before retention re-reads a completion, a concurrent writer stores a newer revision."""

    def read(self, offer_id: str) -> JournalRecord | None:
        stored = self.journal.read(offer_id)
        assert stored is not None
        completion_at = stored.updated_at_ms + 1
        newer = dataclasses.replace(
            stored,
            revision=stored.revision + 1,
            updated_at_ms=completion_at,
            completion_acknowledged_at_ms=completion_at,
        )
        self.journal.replace(newer, stored.revision)
        return self.journal.read(offer_id)


@pytest.mark.spec("INBOX-39")
def test_a_concurrent_replace_is_never_deleted(
    journal: FileJournal | SqliteJournal, receipts: CompletionReceiptStore
) -> None:
    """A record whose revision moved after it was listed is kept (`revision_conflict`): at the
    remove (the revision CAS refuses), and for a completion already at the re-read, where its
    receipt is then left untouched too. The newer revisions are still there."""
    final = seed(journal, receipts, ("start_failure_acknowledged",))
    (failed,) = final.values()
    racing = RacingRemove(journal, receipts)
    result = TerminalRetention(racing, receipts, RETENTION).run(None, LATE)
    assert result.deleted == 0
    assert result.kept_codes == (RetentionKeep.REVISION_CONFLICT,)
    assert result.kept[0].code is Code.JOURNAL_REVISION_CONFLICT
    stored = journal.read(failed.offer_id)
    assert stored is not None
    assert stored.revision == failed.revision + 1
    assert racing.log == [("remove", failed.offer_id)]


@pytest.mark.spec("INBOX-39", "CAD-15")
def test_a_completion_replaced_before_its_re_read_keeps_record_and_receipt(
    journal: FileJournal | SqliteJournal, receipts: CompletionReceiptStore
) -> None:
    """Receipts first, but only for the revision that was listed: a completion whose revision
    moved before the re-read keeps its receipt (no delete is even attempted) and its record."""
    (completed,) = seed(journal, receipts, ("completion_acknowledged",)).values()
    reading = RacingRead(journal, receipts)
    result = TerminalRetention(reading, LoggedReceipts(reading), RETENTION).run(None, LATE)
    assert result.deleted == 0
    assert [(k.offer_id, k.reason) for k in result.kept] == [
        (completed.offer_id, RetentionKeep.REVISION_CONFLICT)
    ]
    assert reading.log == []  # neither a receipt delete nor a remove
    assert receipts.read(completed.offer.lease.attempt_id) is not None
    stored = journal.read(completed.offer_id)
    assert stored is not None
    assert stored.revision == completed.revision + 1


@pytest.mark.spec("INBOX-39")
def test_a_failed_receipt_cleanup_keeps_the_record(
    journal: FileJournal | SqliteJournal, receipts: CompletionReceiptStore
) -> None:
    """A receipt directory that cannot be used (not private: every delete is refused with
    `RECEIPT_PERMISSIONS`) keeps the completion's record; the start failure on the same page is
    still deleted (it has no receipt). Once the directory is fixed the next call deletes it."""
    final = seed(journal, receipts, ("completion_acknowledged", "start_failure_acknowledged"))
    completed, failed = final.values()
    os.chmod(receipts.root, 0o750)  # noqa: S103 - a not-private directory is what is refused
    retention = TerminalRetention(journal, receipts, RETENTION)
    result = retention.run(None, LATE)
    assert result.deleted_offer_ids == (failed.offer_id,)
    assert [(k.offer_id, k.reason, k.code) for k in result.kept] == [
        (
            completed.offer_id,
            RetentionKeep.RECEIPT_CLEANUP_FAILED,
            ReceiptErrorCode.RECEIPT_PERMISSIONS,
        )
    ]
    assert journal.read(completed.offer_id) == completed
    os.chmod(receipts.root, 0o700)
    assert receipts.read(completed.offer.lease.attempt_id) is not None
    again = retention.run(result.cursor, LATE)
    assert again.deleted_offer_ids == (completed.offer_id,)
    assert receipts.read(completed.offer.lease.attempt_id) is None


@pytest.mark.spec("INBOX-39")
def test_a_failed_remove_keeps_the_record(
    journal: FileJournal | SqliteJournal, receipts: CompletionReceiptStore, faults: Faults
) -> None:
    """An unlink (file) or DELETE (SQLite) that fails keeps the record (`remove_failed`, the
    adapter's code); the completion's receipt is already gone (receipts first, missing is then
    success), and the next call deletes the record."""
    final = seed(journal, receipts, ("completion_acknowledged", "start_failure_acknowledged"))
    retention = TerminalRetention(journal, receipts, RETENTION)
    faults.set(failing=True)
    result = retention.run(None, LATE)
    assert result.deleted == 0
    assert {k.reason for k in result.kept} == {RetentionKeep.REMOVE_FAILED}
    assert {k.offer_id for k in result.kept} == {r.offer_id for r in final.values()}
    assert {k.code for k in result.kept} == {Code.JOURNAL_PERMISSIONS}
    assert all_records(journal) == {r.offer_id: r for r in final.values()}
    faults.set(failing=False)
    again = retention.run(result.cursor, LATE)
    assert again.deleted == 2
    assert all_records(journal) == {}


@pytest.mark.spec("INBOX-39")
@pytest.mark.parametrize("damage", ["not_owned", "corrupt"])
def test_a_page_that_cannot_be_listed_examines_nothing(
    kind: Kind, tmp_path: Path, receipts: CompletionReceiptStore, damage: str
) -> None:
    """Without ownership (W-1) or with a corrupt record on the page (F-9: never skipped), the
    call returns the journal's code, examines and deletes nothing and keeps the cursor."""
    root = tmp_path / "journal"
    journal = make_journal(kind, root)
    journal.acquire()
    final = seed(journal, receipts, ("start_failure_acknowledged", "completion_acknowledged"))
    victim = sorted(r.offer_id for r in final.values())[0]
    if damage == "corrupt":
        if kind == "file":
            (root / record_name(victim)).write_bytes(b"{")
        else:
            with contextlib.closing(sqlite3.connect(root / DATABASE_NAME)) as conn, conn:
                conn.execute(
                    "UPDATE journal_records SET record = x'7b' WHERE offer_id = ?", (victim,)
                )
        expected = Code.JOURNAL_CORRUPT
        target = journal
    else:
        expected = Code.JOURNAL_NOT_OWNED
        target = make_journal(kind, root)  # a second instance that never acquired
    try:
        result = TerminalRetention(target, receipts, RETENTION).run(None, LATE)
        assert (result.cursor, result.examined, result.deleted, result.code) == (
            None,
            0,
            0,
            expected,
        )
        assert len(receipt_files(receipts)) == 2
    finally:
        journal.release()


# -- bounds ----------------------------------------------------------------------------------------
@pytest.mark.spec("INBOX-39")
@pytest.mark.parametrize(
    "retention_ms", [0, MINUTE - 1, 30 * DAY + 1, -MINUTE, float(MINUTE), True, "60000"]
)
def test_a_retention_outside_one_minute_to_thirty_days_is_rejected(
    journal: FileJournal | SqliteJournal,
    receipts: CompletionReceiptStore,
    retention_ms: object,
) -> None:
    """§3.14: the retention has no default and must be 1 minute..30 days (an integer)."""
    with pytest.raises(ValueError, match="retention"):
        TerminalRetention(journal, receipts, retention_ms)  # type: ignore[arg-type]


@pytest.mark.spec("INBOX-39")
@pytest.mark.parametrize(("page_size", "delete_budget"), [(0, 8), (65, 8), (16, 0), (16, 65)])
def test_page_and_delete_budget_outside_their_hard_limits_are_rejected(
    journal: FileJournal | SqliteJournal,
    receipts: CompletionReceiptStore,
    page_size: int,
    delete_budget: int,
) -> None:
    """§3.14 / §3.17: page 1..64, deletes per call 1..64."""
    with pytest.raises(ValueError, match=r"page_size|delete_budget"):
        TerminalRetention(journal, receipts, RETENTION, page_size, delete_budget)


def test_the_limits_themselves_are_accepted_and_the_defaults_are_the_spec_values(
    journal: FileJournal | SqliteJournal, receipts: CompletionReceiptStore
) -> None:
    """Defaults page 16 and deletes 8 (§6.3); the edges 1 min, 30 days, 64 and 64 are valid."""
    assert (DEFAULT_PAGE_SIZE, DEFAULT_DELETE_BUDGET) == (16, 8)
    for retention_ms in (MINUTE, 30 * DAY):
        TerminalRetention(journal, receipts, retention_ms, 64, 64)
    TerminalRetention(journal, receipts, MINUTE, 1, 1)
    with pytest.raises(ValueError, match="observed_at_ms"):
        TerminalRetention(journal, receipts, MINUTE).run(None, -1)


# -- CAD-15: settled receipt cleanup ---------------------------------------------------------------
@pytest.mark.spec("CAD-15")
@pytest.mark.parametrize("name", NAMES)
def test_cleanup_deletes_a_receipt_only_when_the_record_is_completion_acknowledged(
    journal: FileJournal | SqliteJournal, receipts: CompletionReceiptStore, name: str
) -> None:
    """The supervisor's `settled_completion` action: for a `completion_acknowledged` record the
    receipt is deleted (and a second call finds it clean); for every other state and recovery
    reason the receipt is left byte-identical (`not_settled`), whatever the receipt says."""
    (record,) = seed(journal, receipts, (name,)).values()
    before = receipt_files(receipts)
    result = cleanup_settled_receipt(journal, receipts, record.offer_id)
    attempt = record.offer.lease.attempt_id
    assert result.offer_id == record.offer_id
    assert result.state is record.state
    if record.state is JournalState.COMPLETION_ACKNOWLEDGED:
        assert (result.outcome, result.settled) == (ReceiptCleanup.CLEANED, True)
        assert receipts.read(attempt) is None
        again = cleanup_settled_receipt(journal, receipts, record.offer_id)
        assert again.outcome is ReceiptCleanup.ALREADY_CLEAN
        assert again.settled
    else:
        assert (result.outcome, result.settled) == (ReceiptCleanup.NOT_SETTLED, False)
        assert receipt_files(receipts) == before
    assert journal.read(record.offer_id) == record  # cleanup never touches the record


@pytest.mark.spec("CAD-15")
def test_cleanup_keeps_mismatching_unreadable_undeletable_and_orphan_receipts(
    journal: FileJournal | SqliteJournal, receipts: CompletionReceiptStore
) -> None:
    """D-1: a receipt with another callback sequence is kept (`receipt_mismatch`); an
    unreadable one (corrupt bytes) is kept (`receipt_read_failed`); a failing delete reports
    `receipt_delete_failed`; a receipt whose offer has no record is kept (`record_missing`: no
    proof the Attempt is terminal)."""
    chain = chain_for(1, "completion_acknowledged")
    record = chain[-1]
    attempt = record.offer.lease.attempt_id
    orphan = chain_for(2, "completion_acknowledged")[-1]
    receipts.publish(receipt_for(orphan))
    assert cleanup_settled_receipt(journal, receipts, orphan.offer_id).outcome is (
        ReceiptCleanup.RECORD_MISSING
    )
    assert receipts.read(orphan.offer.lease.attempt_id) is not None
    write(journal, chain)
    receipts.publish(receipt_for(record, sequence=2))
    mismatch = cleanup_settled_receipt(journal, receipts, record.offer_id)
    assert mismatch.outcome is ReceiptCleanup.RECEIPT_MISMATCH
    assert receipts.read(attempt) is not None
    path = receipts.root / f"{attempt}.json"
    path.write_bytes(b"{not a receipt")
    unreadable = cleanup_settled_receipt(journal, receipts, record.offer_id)
    assert (unreadable.outcome, unreadable.code) == (
        ReceiptCleanup.RECEIPT_READ_FAILED,
        ReceiptErrorCode.RECEIPT_CORRUPT,
    )
    assert path.read_bytes() == b"{not a receipt"
    path.unlink()
    receipts.publish(receipt_for(record))

    class Undeletable:
        def read(self, attempt_id: str) -> Receipt | None:
            return receipts.read(attempt_id)

        def delete(self, attempt_id: str) -> None:
            raise ReceiptDeleteError(ReceiptErrorCode.RECEIPT_DELETE_FAILED, "unlink_failed")

    failed = cleanup_settled_receipt(journal, Undeletable(), record.offer_id)
    assert (failed.outcome, failed.code, failed.settled) == (
        ReceiptCleanup.RECEIPT_DELETE_FAILED,
        ReceiptErrorCode.RECEIPT_DELETE_FAILED,
        False,
    )
    assert receipts.read(attempt) is not None
    for secret in (LEASE_TOKEN.reveal(), CALLBACK_TOKEN, "secret-command-line"):
        assert secret not in repr((mismatch, unreadable, failed))


@pytest.mark.spec("CAD-15")
def test_cleanup_on_an_unowned_journal_deletes_nothing(
    kind: Kind, tmp_path: Path, receipts: CompletionReceiptStore
) -> None:
    """A journal that cannot be read (W-1) proves nothing: `journal_read_failed`, receipt kept."""
    record = chain_for(1, "completion_acknowledged")[-1]
    receipts.publish(receipt_for(record))
    result = cleanup_settled_receipt(make_journal(kind, tmp_path / "j"), receipts, record.offer_id)
    assert (result.outcome, result.code) == (
        ReceiptCleanup.JOURNAL_READ_FAILED,
        Code.JOURNAL_NOT_OWNED,
    )
    assert receipts.read(record.offer.lease.attempt_id) is not None


@pytest.mark.spec("CAD-15")
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(NAMES),
    more=st.lists(events(), max_size=6),
    sequence=st.sampled_from([None, 1, 2]),
    kind=st.sampled_from(["file", "sqlite"]),
)
def test_cleanup_never_deletes_a_receipt_of_a_non_terminal_attempt(
    name: str, more: list[JournalEvent], sequence: int | None, kind: Kind
) -> None:
    """CAD-15 over every journal state: starting from any state and applying any further
    events the kernel accepts, the stored record's receipt is deleted if and only if the record
    is `completion_acknowledged` and the receipt carries its callback sequence; otherwise the
    receipt file is byte-identical afterwards."""
    chain = chain_for(1, name)
    for event in more:
        last = chain[-1]
        outcome = journal_step(last, event, last.updated_at_ms + 1)
        if isinstance(outcome, JournalApplied) and outcome.record is not None:
            chain = (*chain, outcome.record)
    record = chain[-1]
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        journal = make_journal(kind, base / "journal")
        journal.acquire()
        try:
            write(journal, chain)
            store = CompletionReceiptStore(base / "receipts")
            store.ensure_directory()
            store.publish(receipt_for(record, sequence))
            path = store.root / f"{record.offer.lease.attempt_id}.json"
            before = path.read_bytes()
            result = cleanup_settled_receipt(journal, store, record.offer_id)
            receipt_sequence = sequence or record.callback_sequence or 1
            should_delete = (
                record.state is JournalState.COMPLETION_ACKNOWLEDGED
                and receipt_sequence == record.callback_sequence
            )
            assert (result.outcome is ReceiptCleanup.CLEANED) == should_delete
            if should_delete:
                assert not path.exists()
            else:
                assert path.read_bytes() == before
        finally:
            journal.release()
