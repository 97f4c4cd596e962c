"""`WorkerRuntime`, the assembled Worker (SPEC §3.5, §3.10-§3.14), on real parts: a journal
adapter, the POSIX executor with its wrapper and receipt files, and the edge runner as the
control plane. Startup goes through the inbox lifecycle with the supervisor as its recovery.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel.specs.codes import Code
from kernel.specs.inbox_lifecycle import InboxState
from kernel.specs.journal import DeliveryKind, JournalState, RecoveryReason
from kernel.specs.limits import LEASE_DURATION_DEFAULT_MS
from runners.worker.journal.file import FileJournal
from runners.worker.journal.sqlite import SqliteJournal
from runners.worker.posix.adapters import PosixExecutorPort, SpawnJournal
from runners.worker.posix.executor import PosixExecutor
from runners.worker.posix.receipts import CompletionReceiptStore
from runners.worker.receiver import ResultKind
from runners.worker.runtime import WorkerRuntime
from tests.support.posix_processes import wait_until
from tests.support.worker_fixtures import WORKER_ID, ControlPlane, ManualClock, run_id


class World:
    def __init__(self, root: Path, adapter: str) -> None:
        self.root = root
        self.adapter = adapter
        self.clock = ManualClock()
        self.control = ControlPlane(root / "control.sqlite3", self.clock)
        self.receipts = CompletionReceiptStore(root / "receipts")
        self.receipts.ensure_directory()
        self.spawns = SpawnJournal(root / "spawns")
        self.executors: list[PosixExecutor] = []

    def runtime(self) -> WorkerRuntime:
        journal_root = self.root / "journal"
        journal = (
            FileJournal(journal_root) if self.adapter == "file" else SqliteJournal(journal_root)
        )
        executor = PosixExecutor(self.receipts)
        self.executors.append(executor)
        return WorkerRuntime(
            journal,
            self.control.client,
            PosixExecutorPort(executor, self.spawns),
            self.receipts,
            session=lambda: self.control.sessions[WORKER_ID],
            clock=self.clock,
            grace_ms=0,
            retention_ms=60_000,
        )

    def close(self) -> None:
        for executor in self.executors:
            executor.reap()
        self.control.close()


@pytest.fixture(params=["file", "sqlite"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, request.param)
    yield w
    w.close()


@pytest.mark.spec("INBOX-28", "INBOX-34")
def test_start_deliver_complete_restart_and_retain(world: World) -> None:
    """INBOX-28/34: a runtime holds the journal after a `ready` audit, refuses deliveries
    before that, runs a real child to completion through its receipt; a restarted runtime's
    startup audit sees the settled completion, cleans up, and retention later removes the
    record (receipt first)."""
    runtime = world.runtime()
    offer = world.control.admit_and_grant(run_id(), [sys.executable, "-c", "pass"])
    early = runtime.deliver(offer)
    assert (early.kind, early.code) == (ResultKind.REJECTED, Code.JOURNAL_NOT_OWNED)
    status = runtime.start()
    assert status.state is InboxState.HOLDING
    assert status.code is Code.READY
    result = runtime.deliver(offer)
    assert result.state is JournalState.RUNNING_ACKNOWLEDGED
    attempt_id = offer.lease.attempt_id
    assert wait_until(lambda: world.receipts.read(attempt_id) is not None)
    runtime.deliver(world.control.offer(attempt_id, DeliveryKind.LEASE_RECOVERY))
    poll = runtime.poll_completions()
    assert [r.outcome.value for r in poll.results] == ["completed"]
    assert world.control.attempt_status(attempt_id) == "succeeded"
    assert world.receipts.read(attempt_id) is None
    runtime.stop()
    assert world.spawns.entries() == [(offer.offer_id, attempt_id)]

    again = world.runtime()
    status = again.start()
    assert status.state is InboxState.HOLDING
    assert status.code is Code.READY  # a settled completion does not block startup
    world.clock.advance(61_000)
    kept = again.retention(None)
    assert kept.deleted == 1
    assert again.journal.read(offer.offer_id) is None
    again.stop()


@pytest.mark.spec("INBOX-05", "INBOX-28")
def test_startup_recovery_of_a_launching_record_never_spawns(world: World) -> None:
    """INBOX-05/28: a Worker died between the `launching` write and `start()`; the next
    runtime's startup (acquire, audit, recovery, re-audit) writes
    `recovery_required(launch_outcome_unknown)`, spawns nothing, and holds with
    `reconciliation_required`."""
    runtime = world.runtime()
    runtime.start()
    offer = world.control.admit_and_grant(run_id(), [sys.executable, "-c", "pass"])

    class Died(BaseException):
        pass

    def die(context: object) -> str:
        raise Died

    runtime.receiver._executor = type("Dying", (), {"start": staticmethod(die)})()
    with pytest.raises(Died):
        runtime.deliver(offer)
    record = runtime.journal.read(offer.offer_id)
    assert record is not None
    assert record.state is JournalState.LAUNCHING
    runtime.stop()
    restarted = world.runtime()
    status = restarted.start()
    assert status.state is InboxState.HOLDING
    assert status.code is Code.RECONCILIATION_REQUIRED
    after = restarted.journal.read(offer.offer_id)
    assert after is not None
    assert after.recovery_reason is RecoveryReason.LAUNCH_OUTCOME_UNKNOWN
    assert world.spawns.entries() == []
    restarted.stop()


@pytest.mark.spec("INBOX-34")
def test_a_live_completion_needs_no_redelivery(world: World) -> None:
    """§3.12 decision / WR-11: while the Worker runs, the lease lifecycle holds the version
    T4 and renewals produced; `poll_completions` merges it into the record before it submits,
    so the completion goes through without a control-plane redelivery, and the lease is no
    longer tracked afterwards."""
    runtime = world.runtime()
    runtime.start()
    offer = world.control.admit_and_grant(run_id(), [sys.executable, "-c", "pass"])
    assert runtime.deliver(offer).state is JournalState.RUNNING_ACKNOWLEDGED
    attempt_id = offer.lease.attempt_id
    # WR-6: a renewal is due once a third of the runtime's lease duration (the kernel's default,
    # E-2: 60 s) has passed; the granted lease is still live then.
    world.clock.advance(LEASE_DURATION_DEFAULT_MS // 3 + 1_000)
    assert runtime.tick().renewed == 1
    assert wait_until(lambda: world.receipts.read(attempt_id) is not None)
    poll = runtime.poll_completions()
    assert [r.outcome.value for r in poll.results] == ["completed"]
    assert world.control.attempt_status(attempt_id) == "succeeded"
    assert runtime.lifecycle.tracked() == ()
    runtime.stop()
