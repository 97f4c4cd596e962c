"""The inbox lifecycle on the real journal adapters (SPEC §3.10, §3.13; INBOX-28).

Every test runs against the file journal on a temporary directory and the SQLite journal on a
temporary file, with real ownership and its real refresh timer (one daemon thread). The
journal is wrapped by `Recorded`, which logs every port call in order, and, at `release()`,
the lifecycle state at that moment (so "release first, then refuse" is observed, not assumed).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import pytest

from kernel.identity import Secret
from kernel.outcomes import Rejected
from kernel.specs.budgets import Paging
from kernel.specs.codes import Code
from kernel.specs.inbox_lifecycle import (
    HOLDS_OWNERSHIP,
    INBOX_TABLE,
    InboxCode,
    InboxState,
)
from kernel.specs.states import CompletionOutcome
from kernel.worker.auditor import AuditResult
from kernel.worker.journal import (
    FailStartAcknowledged,
    JournalApplied,
    PrepareFailed,
    journal_step,
)
from kernel.worker.record import JournalRecord
from kernel.worker.supervisor import RecoveryAction, overall, plan_recovery
from runners.worker.inbox_lifecycle import (
    InboxStatus,
    RecoveryReport,
    StartupRecovery,
    WorkerExecutionOfferInboxLifecycle,
)
from runners.worker.journal.file import FileJournal, record_name
from runners.worker.journal.lock import (
    LOCK_DIR_NAME,
    REFRESH_THREAD_NAME,
    JournalOwnership,
    JournalOwnershipError,
)
from runners.worker.journal.port import JournalPage
from runners.worker.journal.sqlite import DATABASE_NAME, SqliteJournal
from runners.worker.posix.receipts import CompletionReceiptStore, Receipt
from runners.worker.retention import cleanup_settled_receipt
from tests.support.journal_fixtures import CALLBACK_TOKEN, LEASE_TOKEN, revisions

Kind = Literal["file", "sqlite"]
BUDGET = Paging(16, 4)
EXCEPTION_TEXT = "exception text with a secret-command-line"


# -- records and adapters --------------------------------------------------------------------
def _start_failure_acknowledged(generation: int) -> tuple[JournalRecord, ...]:
    chain = list(revisions(generation)[:2])
    for event in (PrepareFailed(), FailStartAcknowledged()):
        outcome = journal_step(chain[-1], event, chain[-1].updated_at_ms + 1)
        assert isinstance(outcome, JournalApplied)
        assert outcome.record is not None
        chain.append(outcome.record)
    return tuple(chain)


def _chains(*names: str) -> list[tuple[JournalRecord, ...]]:
    """One offer (lease generation) per name: `accepted`, `launching`, `started`,
    `completion_acknowledged`, `start_failure_acknowledged`."""
    lengths = {"accepted": 1, "launching": 3, "started": 4, "completion_acknowledged": 6}
    out = []
    for generation, name in enumerate(names, start=1):
        if name == "start_failure_acknowledged":
            out.append(_start_failure_acknowledged(generation))
        else:
            out.append(revisions(generation)[: lengths[name]])
    return out


def _make(kind: Kind, root: Path, capacity: int = 64) -> FileJournal | SqliteJournal:
    return (
        FileJournal(root, capacity=capacity)
        if kind == "file"
        else SqliteJournal(root, capacity=capacity)
    )


def _seed(kind: Kind, root: Path, chains: list[tuple[JournalRecord, ...]]) -> None:
    """Write the chains in an earlier tenure and release it (a restart follows)."""
    journal = _make(kind, root, capacity=max(64, len(chains)))
    journal.acquire()
    try:
        for chain in chains:
            journal.create(chain[0])
            for record in chain[1:]:
                journal.replace(record, record.revision - 1)
    finally:
        journal.release()


def _corrupt(kind: Kind, root: Path, offer_id: str) -> None:
    if kind == "file":
        (root / record_name(offer_id)).write_bytes(b"\x00not a record")
        return
    with contextlib.closing(sqlite3.connect(root / DATABASE_NAME)) as conn, conn:
        conn.execute("UPDATE journal_records SET record = ? WHERE offer_id = ?", (b"[", offer_id))


class Recorded:
    """The real journal with every port call logged in order; `release` also logs the
    lifecycle state at the moment it is called. `list_fault`, when set, is raised by `list`."""

    def __init__(self, inner: FileJournal | SqliteJournal, log: list[str]) -> None:
        self.inner = inner
        self.log = log
        self.lifecycle: WorkerExecutionOfferInboxLifecycle | None = None
        self.states_at_release: list[InboxState] = []
        self.list_fault: Exception | None = None

    @property
    def capacity(self) -> int:
        return self.inner.capacity

    def acquire(self) -> None:
        self.log.append("acquire")
        self.inner.acquire()

    def release(self) -> None:
        self.log.append("release")
        if self.lifecycle is not None:
            self.states_at_release.append(self.lifecycle.state)
        self.inner.release()

    def list(self, after: str | None, limit: int) -> JournalPage:
        self.log.append("list")
        if self.list_fault is not None:
            raise self.list_fault
        return self.inner.list(after, limit)

    def read(self, offer_id: str) -> JournalRecord | None:
        return self.inner.read(offer_id)


@pytest.fixture(params=["file", "sqlite"])
def kind(request: pytest.FixtureRequest) -> Kind:
    value: Kind = request.param
    return value


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "journal"


@pytest.fixture
def receipts(tmp_path: Path) -> CompletionReceiptStore:
    store = CompletionReceiptStore(tmp_path / "receipts")
    store.ensure_directory()
    return store


def _lifecycle(
    kind: Kind,
    root: Path,
    *,
    recovery: StartupRecovery | None = None,
    capacity: int = 64,
    budget: Paging = BUDGET,
) -> tuple[WorkerExecutionOfferInboxLifecycle, Recorded]:
    journal = Recorded(_make(kind, root, capacity), [])
    lifecycle = WorkerExecutionOfferInboxLifecycle(journal, budget, recovery=recovery)
    journal.lifecycle = lifecycle
    return lifecycle, journal


@pytest.fixture(autouse=True)
def _nothing_left_locked(root: Path) -> Iterator[None]:
    """After each test no lock is left behind: every lifecycle released what it took."""
    yield
    assert not (root / LOCK_DIR_NAME).exists()


def _assert_table_edges(lifecycle: WorkerExecutionOfferInboxLifecycle) -> None:
    """The lifecycle only ever took edges of `INBOX_TABLE`, as one connected walk from
    `inert` to its current state."""
    state = InboxState.INERT
    for edge in lifecycle.history:
        assert edge.source is state
        assert INBOX_TABLE.allows(edge.source, edge.trigger, edge.target)
        state = edge.target
    assert state is lifecycle.state


def _another_owner_acquires(root: Path) -> None:
    """Right now a second process's ownership can take the root (and gives it back)."""
    other = JournalOwnership(root)
    other.acquire()
    other.release()


def _refresh_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == REFRESH_THREAD_NAME]


def _socket_fds() -> int:
    count = 0
    for name in os.listdir("/dev/fd"):
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                count += 1
    return count


def _no_secret(status: InboxStatus) -> None:
    text = repr(status)
    for secret in (LEASE_TOKEN.reveal(), CALLBACK_TOKEN, "secret-command-line", EXCEPTION_TEXT):
        assert secret not in text


def _receipt_for(record: JournalRecord) -> Receipt:
    assert record.executor_started_at_ms is not None
    return Receipt(
        run_id=record.offer.lease.run_id,
        attempt_id=record.offer.lease.attempt_id,
        executor_started_at_ms=record.executor_started_at_ms,
        callback_sequence=record.callback_sequence or 1,
        outcome=CompletionOutcome.SUCCEEDED,
        exit_code=0,
        finished_at_ms=record.updated_at_ms,
        callback_token=Secret.of(CALLBACK_TOKEN, "callback_token"),
    )


class SupervisorStandIn:
    """A bounded recovery built from the kernel's plan (`plan_recovery`) and the real settled
    receipt cleanup; reconcile actions are counted, not run (the Reconciler is not this
    test's). Logs `recovery` into the journal's log when called."""

    def __init__(
        self,
        journal: Recorded,
        receipts: CompletionReceiptStore,
        budget: int = 64,
        after: Callable[[], None] | None = None,
    ) -> None:
        self.journal = journal
        self.receipts = receipts
        self.budget = budget
        self.after = after
        self.calls: list[AuditResult] = []

    def __call__(self, audit: AuditResult) -> RecoveryReport:
        self.journal.log.append("recovery")
        self.calls.append(audit)
        plan = plan_recovery(audit, self.budget)
        if isinstance(plan, Rejected):
            return RecoveryReport(refused=plan.code)
        settled: list[bool] = []
        failed = 0
        for action in plan:
            if action.action is RecoveryAction.CLEAN_RECEIPT:
                done = cleanup_settled_receipt(
                    self.journal.inner, self.receipts, action.entry.offer_id
                )
                settled.append(done.settled)
                failed += not done.settled
            else:
                settled.append(False)  # a reconcile action is not run here: not settled
        if self.after is not None:
            self.after()
        return RecoveryReport(status=overall(settled), actions=len(plan), failed_items=failed)


class Raising:
    """A recovery that raises (with text that must never reach the status)."""

    def __init__(self, journal: Recorded) -> None:
        self.journal = journal

    def __call__(self, audit: AuditResult) -> RecoveryReport:
        self.journal.log.append("recovery")
        raise RuntimeError(EXCEPTION_TEXT)


# -- the order --------------------------------------------------------------------------------
@pytest.mark.spec("INBOX-28")
def test_without_recovery_it_acquires_audits_and_holds_until_stop(kind: Kind, root: Path) -> None:
    """Acquire, audit, hold: the lock stays held (another owner is refused) until `stop()`,
    which releases it. A second `start()` is a no-op."""
    _seed(kind, root, _chains("accepted", "launching"))
    lifecycle, journal = _lifecycle(kind, root)
    assert lifecycle.state is InboxState.INERT
    assert journal.log == []  # L-1: constructing does no I/O
    status = lifecycle.start()
    assert status.state is InboxState.HOLDING
    assert status.code is Code.RECONCILIATION_REQUIRED
    assert status.audit is not None
    assert len(status.audit.entries) == 2
    assert journal.log == ["acquire", "list"]
    with pytest.raises(JournalOwnershipError) as held:
        _another_owner_acquires(root)
    assert held.value.code is Code.JOURNAL_LOCKED
    assert lifecycle.start() is status  # no-op
    assert journal.log == ["acquire", "list"]
    stopped = lifecycle.stop()
    assert stopped.state is InboxState.STOPPED
    assert stopped.release_code is None
    assert journal.log == ["acquire", "list", "release"]
    assert journal.states_at_release == [InboxState.STOPPING]
    _another_owner_acquires(root)
    assert lifecycle.stop().state is InboxState.STOPPED  # idempotent
    _assert_table_edges(lifecycle)


@pytest.mark.spec("INBOX-28")
def test_with_recovery_it_acquires_audits_recovers_reaudits_and_holds(
    kind: Kind, root: Path, receipts: CompletionReceiptStore
) -> None:
    """Acquire, audit, recovery, re-audit, hold, in that order. The recovery gets the complete
    first audit; here it cleans the settled completion's receipt (§3.13 settled_completion),
    and the held status carries the re-audit and the report."""
    chains = _chains("accepted", "completion_acknowledged", "started")
    _seed(kind, root, chains)
    completed = chains[1][-1]
    receipts.publish(_receipt_for(completed))
    journal = Recorded(_make(kind, root), [])
    supervisor = SupervisorStandIn(journal, receipts)
    lifecycle = WorkerExecutionOfferInboxLifecycle(journal, BUDGET, recovery=supervisor)
    journal.lifecycle = lifecycle
    status = lifecycle.start()
    assert journal.log == ["acquire", "list", "recovery", "list"]
    assert status.state is InboxState.HOLDING
    assert [e.offer_id for e in supervisor.calls[0].entries] == sorted(
        c[-1].offer_id for c in chains
    )
    assert receipts.read(completed.offer.lease.attempt_id) is None
    assert status.recovery == RecoveryReport(
        status=Code.RECONCILIATION_REQUIRED, actions=2, failed_items=0
    )
    assert status.audit is not None
    assert status.code is status.audit.status is Code.RECONCILIATION_REQUIRED
    assert [s.target for s in lifecycle.history] == [
        InboxState.ACQUIRING,
        InboxState.AUDITING,
        InboxState.RECOVERING,
        InboxState.REAUDITING,
        InboxState.HOLDING,
    ]
    _no_secret(status)
    lifecycle.stop()
    _assert_table_edges(lifecycle)


@pytest.mark.spec("INBOX-28")
def test_recovery_does_not_run_when_no_entry_needs_it(
    kind: Kind, root: Path, receipts: CompletionReceiptStore
) -> None:
    """[decision §3.10] An injected recovery runs only for settled completions and launch or
    execution reconciliation: with only `accepted` and `start_failure_acknowledged` records
    (or none) it is not called and the order is acquire, audit, hold."""
    _seed(kind, root, _chains("accepted", "start_failure_acknowledged"))
    journal = Recorded(_make(kind, root), [])
    supervisor = SupervisorStandIn(journal, receipts)
    lifecycle = WorkerExecutionOfferInboxLifecycle(journal, BUDGET, recovery=supervisor)
    status = lifecycle.start()
    assert status.state is InboxState.HOLDING
    assert status.code is Code.READY
    assert supervisor.calls == []
    assert journal.log == ["acquire", "list"]
    lifecycle.stop()
    _assert_table_edges(lifecycle)


# -- refusals: release first, then refuse ---------------------------------------------------------
def _assert_released_then_refused(
    lifecycle: WorkerExecutionOfferInboxLifecycle,
    journal: Recorded,
    root: Path,
    code: Code | InboxCode,
) -> None:
    status = lifecycle.status
    assert status.state is InboxState.REFUSED
    assert status.code is code
    assert status.release_code is None
    assert journal.log.count("release") == 1
    assert journal.log[-1] == "release"  # nothing after the release
    (at_release,) = journal.states_at_release
    assert at_release in HOLDS_OWNERSHIP  # still holding when it released: not yet refused
    assert at_release is not InboxState.REFUSED
    assert lifecycle.history[-1].target is InboxState.REFUSED
    _another_owner_acquires(root)  # the lock is free right after the refusal
    _no_secret(status)
    _assert_table_edges(lifecycle)
    assert lifecycle.start() is status  # refused is terminal
    assert lifecycle.stop() is status


@pytest.mark.spec("INBOX-28")
def test_an_exhausted_scan_budget_releases_then_refuses(kind: Kind, root: Path) -> None:
    """More records than `page_size x pages` (the journal was filled with a larger capacity):
    `AUDIT_BUDGET_EXHAUSTED`, after releasing ownership."""
    _seed(kind, root, _chains("accepted", "accepted", "accepted", "accepted", "accepted"))
    lifecycle, journal = _lifecycle(kind, root, capacity=4, budget=Paging(2, 2))
    lifecycle.start()
    assert journal.log == ["acquire", "list", "list", "release"]
    assert journal.states_at_release == [InboxState.AUDITING]
    _assert_released_then_refused(lifecycle, journal, root, Code.AUDIT_BUDGET_EXHAUSTED)


@pytest.mark.spec("INBOX-28")
def test_a_corrupt_journal_releases_then_refuses(kind: Kind, root: Path) -> None:
    """A record damaged on disk (file) or in its row (SQLite): `AUDIT_JOURNAL_CORRUPT`, after
    releasing ownership; the damaged record is left as it was (F-9)."""
    chains = _chains("accepted", "started", "launching")
    _seed(kind, root, chains)
    _corrupt(kind, root, chains[1][-1].offer_id)
    lifecycle, journal = _lifecycle(kind, root)
    lifecycle.start()
    _assert_released_then_refused(lifecycle, journal, root, Code.AUDIT_JOURNAL_CORRUPT)
    if kind == "file":
        assert (root / record_name(chains[1][-1].offer_id)).read_bytes() == b"\x00not a record"


@pytest.mark.spec("INBOX-28")
def test_an_audit_exception_releases_then_refuses_with_a_fixed_code(kind: Kind, root: Path) -> None:
    """§3.10 "any audit exception": the port raising something unexpected refuses with
    `INBOX_AUDIT_FAILED` after the release; the exception text appears nowhere (S-1)."""
    _seed(kind, root, _chains("accepted"))
    lifecycle, journal = _lifecycle(kind, root)
    journal.list_fault = RuntimeError(EXCEPTION_TEXT)
    lifecycle.start()
    assert journal.log == ["acquire", "list", "release"]
    _assert_released_then_refused(lifecycle, journal, root, InboxCode.AUDIT_FAILED)


@pytest.mark.spec("INBOX-28", "INBOX-37")
def test_an_exhausted_recovery_action_budget_releases_then_refuses(
    kind: Kind, root: Path, receipts: CompletionReceiptStore
) -> None:
    """§3.13: more actions than the supervisor's budget fails closed before any side effect
    (`RECOVERY_ACTION_BUDGET_EXHAUSTED`); the lifecycle releases, then refuses, and no
    re-audit follows. The settled completion's receipt is still there."""
    chains = _chains("completion_acknowledged", "launching", "started")
    _seed(kind, root, chains)
    receipts.publish(_receipt_for(chains[0][-1]))
    journal = Recorded(_make(kind, root), [])
    supervisor = SupervisorStandIn(journal, receipts, budget=2)
    lifecycle = WorkerExecutionOfferInboxLifecycle(journal, BUDGET, recovery=supervisor)
    journal.lifecycle = lifecycle
    lifecycle.start()
    assert journal.log == ["acquire", "list", "recovery", "release"]
    assert journal.states_at_release == [InboxState.RECOVERING]
    _assert_released_then_refused(lifecycle, journal, root, Code.RECOVERY_ACTION_BUDGET_EXHAUSTED)
    assert lifecycle.status.recovery == RecoveryReport(
        refused=Code.RECOVERY_ACTION_BUDGET_EXHAUSTED
    )
    assert receipts.read(chains[0][-1].offer.lease.attempt_id) is not None


@pytest.mark.spec("INBOX-28")
def test_a_raising_recovery_releases_then_refuses(kind: Kind, root: Path) -> None:
    """[decision IL-5] A recovery that raises leaves what its batch did unknown: release, then
    refuse with `INBOX_RECOVERY_FAILED`, never the exception text."""
    _seed(kind, root, _chains("launching"))
    journal = Recorded(_make(kind, root), [])
    lifecycle = WorkerExecutionOfferInboxLifecycle(journal, BUDGET, recovery=Raising(journal))
    journal.lifecycle = lifecycle
    lifecycle.start()
    assert journal.log == ["acquire", "list", "recovery", "release"]
    _assert_released_then_refused(lifecycle, journal, root, InboxCode.RECOVERY_FAILED)


@pytest.mark.spec("INBOX-28")
def test_a_failing_reaudit_releases_then_refuses(
    kind: Kind, root: Path, receipts: CompletionReceiptStore
) -> None:
    """The re-audit obeys the same rules: a record corrupted during recovery makes it
    `AUDIT_JOURNAL_CORRUPT`, released from `reauditing`, then refused."""
    chains = _chains("launching", "accepted")
    _seed(kind, root, chains)
    journal = Recorded(_make(kind, root), [])
    supervisor = SupervisorStandIn(
        journal, receipts, after=lambda: _corrupt(kind, root, chains[1][-1].offer_id)
    )
    lifecycle = WorkerExecutionOfferInboxLifecycle(journal, BUDGET, recovery=supervisor)
    journal.lifecycle = lifecycle
    lifecycle.start()
    assert journal.log == ["acquire", "list", "recovery", "list", "release"]
    assert journal.states_at_release == [InboxState.REAUDITING]
    _assert_released_then_refused(lifecycle, journal, root, Code.AUDIT_JOURNAL_CORRUPT)


@pytest.mark.spec("INBOX-28")
def test_a_failed_acquire_refuses_without_touching_the_journal(kind: Kind, root: Path) -> None:
    """A lock held by another live owner: `JOURNAL_LOCKED`; nothing was taken, so nothing is
    listed or released, and the other owner keeps its lock."""
    other = JournalOwnership(root)
    other.acquire()
    try:
        lifecycle, journal = _lifecycle(kind, root)
        status = lifecycle.start()
        assert status.state is InboxState.REFUSED
        assert status.code is Code.JOURNAL_LOCKED
        assert journal.log == ["acquire"]
        other.verify()  # still the owner
        _assert_table_edges(lifecycle)
    finally:
        other.release()


@pytest.mark.spec("INBOX-28")
def test_stop_after_the_ownership_was_compromised_reports_the_release_code(
    kind: Kind, root: Path
) -> None:
    """W-6: when the lock was taken away while holding, `stop()` still ends in `stopped`, with
    `JOURNAL_COMPROMISED` as the release code (the lock is left alone)."""
    lifecycle, _ = _lifecycle(kind, root)
    assert lifecycle.start().state is InboxState.HOLDING
    shutil.rmtree(root / LOCK_DIR_NAME)
    status = lifecycle.stop()
    assert status.state is InboxState.STOPPED
    assert status.release_code is Code.JOURNAL_COMPROMISED
    _assert_table_edges(lifecycle)


# -- no timer, no transport ---------------------------------------------------------------------
@pytest.mark.spec("INBOX-28")
def test_it_creates_no_thread_beyond_the_adapters_refresh_timer_and_no_socket(
    kind: Kind, root: Path, receipts: CompletionReceiptStore
) -> None:
    """While holding, the only new thread is the ownership's one refresh timer (the adapter's,
    F-11); construction, audit, recovery and re-audit start none, and no socket is opened (no
    transport). After `stop()` and after a refusal, the thread count is back where it was."""
    chains = _chains("completion_acknowledged", "launching")
    _seed(kind, root, chains)
    threads_before = set(threading.enumerate())
    sockets_before = _socket_fds()
    journal = Recorded(_make(kind, root), [])
    lifecycle = WorkerExecutionOfferInboxLifecycle(
        journal, BUDGET, recovery=SupervisorStandIn(journal, receipts)
    )
    assert set(threading.enumerate()) == threads_before  # inert: nothing started
    assert lifecycle.start().state is InboxState.HOLDING
    new = set(threading.enumerate()) - threads_before
    assert [t.name for t in new] == [REFRESH_THREAD_NAME]
    assert all(t.daemon for t in new)
    assert _socket_fds() == sockets_before
    lifecycle.stop()
    assert set(threading.enumerate()) - threads_before == set()
    # A refusal stops the timer with the release, too.
    refused, refused_journal = _lifecycle(kind, root)
    refused_journal.list_fault = RuntimeError(EXCEPTION_TEXT)
    assert refused.start().state is InboxState.REFUSED
    assert set(threading.enumerate()) - threads_before == set()
    assert _socket_fds() == sockets_before
    assert _refresh_threads() == [t for t in threads_before if t.name == REFRESH_THREAD_NAME]


# -- concurrency ----------------------------------------------------------------------------
@pytest.mark.spec("INBOX-28")
@pytest.mark.parametrize("round_", range(10))
def test_concurrent_start_and_stop_are_serialized(kind: Kind, root: Path, round_: int) -> None:
    """Racing `start()` and `stop()` calls from several threads: at most one acquire, exactly as
    many releases as acquires, only table edges, the end state `stopped`, and the lock free."""
    _seed(kind, root, _chains("accepted"))
    lifecycle, journal = _lifecycle(kind, root)
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def call(operation: Callable[[], InboxStatus]) -> None:
        try:
            barrier.wait()
            operation()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [
        threading.Thread(target=call, args=(lifecycle.start if i % 2 else lifecycle.stop,))
        for i in range(8)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(10)
    assert errors == []
    # A stop that won the race stops the inert lifecycle for good; a stop that lost it waits
    # for the start to settle and then releases: either way the end is `stopped`.
    assert lifecycle.state is InboxState.STOPPED
    assert journal.log.count("acquire") <= 1
    assert journal.log.count("release") == journal.log.count("acquire")
    _assert_table_edges(lifecycle)
    _another_owner_acquires(root)
