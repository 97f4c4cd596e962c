"""The Worker runtime with the real POSIX executor, launch wrapper and receipt files, and the
edge runner as the control plane (SPEC §3.5, §3.11, §3.12, §3.15; INBOX-29, INBOX-30,
INBOX-38, INBOX-40, S-1).

A real child runs for each offer; the wrapper publishes the completion receipt; recovery reads
and authenticates it (RV-1..RV-5 over the real file) and completes the Attempt on the control
plane. The last test scans every result, Event, log record and journal byte for the tokens
the run used (S-1, I-J5).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel.identity import Secret
from kernel.specs.journal import DeliveryKind, JournalState, RecoveryReason
from kernel.specs.states import Profile
from kernel.worker.reconciler import ReceiptCheck, UnknownInboxReason
from kernel.worker.record import JournalRecord
from runners.passes import lease_expiry_page
from runners.worker.coordinator import CoordinatorOutcome
from runners.worker.journal.file import FileJournal
from runners.worker.journal.lock import JournalOwnership
from runners.worker.ports import ExecutionContext
from runners.worker.posix.adapters import (
    PosixController,
    PosixExecutorPort,
    PosixInspector,
    ReceiptEvidence,
    SpawnJournal,
    TokenContextFactory,
)
from runners.worker.posix.executor import PosixExecutor
from runners.worker.posix.receipts import (
    CompletionReceiptStore,
    ReceiptAuthenticator,
    decode_receipt,
)
from tests.support.posix_processes import wait_until
from tests.support.worker_fixtures import (
    ControlPlane,
    ManualClock,
    NoTimer,
    Worker,
    lease_token_for,
    run_id,
)


class CapturingFactory(TokenContextFactory):
    """The real factory, keeping the tokens it made (so the test can scan for them)."""

    def __init__(self) -> None:
        self.tokens: list[str] = []

    def prepare(self, record: JournalRecord, executor_started_at_ms: int) -> ExecutionContext:
        context = super().prepare(record, executor_started_at_ms)
        self.tokens.append(context.callback_token.reveal())
        return context


class PosixWorld:
    def __init__(self, root: Path) -> None:
        self.clock = ManualClock()
        self.control = ControlPlane(root / "control.sqlite3", self.clock)
        self.journal = FileJournal(
            root / "journal", JournalOwnership(root / "journal", timer_factory=NoTimer)
        )
        self.journal.acquire()
        self.receipts = CompletionReceiptStore(root / "receipts")
        self.receipts.ensure_directory()
        self.spawns = SpawnJournal(root / "spawns")
        self.executor = PosixExecutor(self.receipts)
        self.port = PosixExecutorPort(self.executor, self.spawns)
        self.evidence = ReceiptEvidence(self.receipts, ReceiptAuthenticator())
        self.worker = Worker(
            self.journal,
            self.control,
            self.port,
            receipts=self.evidence,
            inspector=PosixInspector(),
            controller=PosixController(),
        )
        self.factory = CapturingFactory()
        self.worker.receiver._factory = self.factory

    def close(self) -> None:
        self.executor.reap()
        with contextlib.suppress(Exception):
            self.journal.release()
        self.control.close()

    def wait_exit(self, record: JournalRecord) -> None:
        """Until the wrapper published the receipt (it does so before it exits)."""
        attempt_id = record.offer.lease.attempt_id
        assert wait_until(lambda: self.receipts.read(attempt_id) is not None)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[PosixWorld]:
    w = PosixWorld(tmp_path)
    yield w
    w.close()


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.mark.spec("INBOX-29", "INBOX-34")
def test_a_real_child_completes_through_its_receipt(world: PosixWorld) -> None:
    """INBOX-29/34: the child exits 0, the wrapper publishes the receipt, recovery reads it
    first (no process probe), submits the completion, writes `completion_acknowledged` and
    deletes the receipt; the spawn journal has exactly one line."""
    offer = world.control.admit_and_grant(run_id(), _py("pass"))
    result = world.worker.receiver.deliver(offer)
    assert result.state is JournalState.RUNNING_ACKNOWLEDGED
    record = world.journal.read(offer.offer_id)
    assert record is not None
    world.wait_exit(record)
    world.worker.receiver.deliver(
        world.control.offer(offer.lease.attempt_id, DeliveryKind.LEASE_RECOVERY)
    )
    merged = world.journal.read(offer.offer_id)
    assert merged is not None
    rec = world.worker.reconciler.reconcile(merged, world.clock(), world.control.sessions["w1"])
    assert rec.receipt is ReceiptCheck.VALID
    assert rec.probes == 0
    done = world.worker.coordinator.recover(merged, rec)
    assert done.outcome is CoordinatorOutcome.COMPLETED
    assert done.exit_code == 0
    assert world.control.attempt_status(offer.lease.attempt_id) == "succeeded"
    assert world.receipts.read(offer.lease.attempt_id) is None
    assert world.spawns.entries() == [(offer.offer_id, offer.lease.attempt_id)]


@pytest.mark.spec("INBOX-30")
def test_a_tampered_receipt_is_unknown_before_any_probe(world: PosixWorld) -> None:
    """INBOX-30: a receipt whose callback token was replaced (same Run, Attempt, start time
    and sequence) fails RV-5: `unknown(receipt_unauthenticated)` and no process probe."""
    offer = world.control.admit_and_grant(run_id(), _py("pass"))
    world.worker.receiver.deliver(offer)
    record = world.journal.read(offer.offer_id)
    assert record is not None
    world.wait_exit(record)
    candidates = [p for p in world.receipts.root.iterdir() if not p.name.startswith(".")]
    assert len(candidates) == 1
    path = candidates[0]
    receipt = decode_receipt(path.read_bytes())
    forged = dataclasses.replace(
        receipt, callback_token=Secret.of("forged-token-0123456789abcdef0123456789", "t")
    )
    path.unlink()
    world.receipts.publish(forged)
    rec = world.worker.reconciler.reconcile(record, world.clock(), world.control.sessions["w1"])
    assert rec.receipt is ReceiptCheck.UNAUTHENTICATED
    assert rec.probes == 0
    assert getattr(rec.evidence, "reason", None) is UnknownInboxReason.RECEIPT_UNAUTHENTICATED


@pytest.mark.spec("INBOX-40")
def test_lease_loss_stops_the_real_process_group(world: PosixWorld) -> None:
    """INBOX-40: the control plane expires the lease of a running child; the lifecycle
    reports the loss; the lease-loss coordinator re-verifies the durable identity, signals
    the group and writes `lease_lost_local_execution_stopped`; the child is gone."""
    offer = world.control.admit_and_grant(run_id(), _py("import time; time.sleep(30)"))
    world.worker.receiver.deliver(offer)
    record = world.journal.read(offer.offer_id)
    assert record is not None
    assert record.executor_handle is not None
    world.clock.advance(31_000)
    page = lease_expiry_page(
        world.control.store, world.control.store, world.clock(), 16, None, profile=Profile.EDGE
    )
    assert page.failed is False
    assert world.worker.lifecycle.tick(world.clock()).lost == 1
    after = world.journal.read(offer.offer_id)
    assert after is not None
    assert after.recovery_reason is RecoveryReason.LEASE_LOST_LOCAL_EXECUTION_STOPPED
    assert world.port.wait(record.executor_handle, 10) is not None  # the wrapper ended


@pytest.mark.spec("INBOX-38", "S-1")
def test_no_token_in_results_events_logs_or_journal_bytes(
    world: PosixWorld, caplog: pytest.LogCaptureFixture
) -> None:
    """INBOX-38 / S-1 / I-J5: after offers that complete, fail to start and lose their lease,
    no receiver, recovery, supervisor or lease-loss result, no control-plane Event, no log
    record and no journal file contains a lease token or a callback token."""
    caplog.set_level(logging.DEBUG)
    results: list[object] = []
    ok = world.control.admit_and_grant(run_id(), _py("pass"))
    refused = world.control.admit_and_grant(run_id(), ["/nonexistent/ql3-no-such-binary"])
    lost = world.control.admit_and_grant(run_id(), _py("import time; time.sleep(30)"))
    for offer in (ok, refused, lost):
        results.append(world.worker.receiver.deliver(offer))
    record = world.journal.read(ok.offer_id)
    assert record is not None
    world.wait_exit(record)
    results.append(
        world.worker.receiver.deliver(
            world.control.offer(ok.lease.attempt_id, DeliveryKind.LEASE_RECOVERY)
        )
    )
    for offer in (ok, lost):
        results.append(world.worker.supervisor.reconcile_one(offer.offer_id, world.clock()))
    world.clock.advance(31_000)
    lease_expiry_page(
        world.control.store, world.control.store, world.clock(), 16, None, profile=Profile.EDGE
    )
    world.worker.lifecycle.tick(world.clock())
    results.extend(world.worker.lease_loss.outcomes)
    secrets_used = [lease_token_for(o.lease.attempt_id).reveal() for o in (ok, refused, lost)]
    secrets_used += world.factory.tokens
    assert len(world.factory.tokens) == 3
    texts = [repr(r) for r in results] + [str(r) for r in results]
    texts += [repr(world.worker.receiver), repr(world.worker.lifecycle), repr(world.port)]
    projection = world.control.store.project()
    texts.append(repr(projection))
    texts += [rec.getMessage() for rec in caplog.records]
    texts.append(world.spawns.path.read_text())
    journal_bytes = b"".join(p.read_bytes() for p in (world.journal.root).iterdir() if p.is_file())
    for secret in secrets_used:
        for text in texts:
            assert secret not in text
    for callback in world.factory.tokens:  # the journal stores the lease token, never these
        assert callback.encode() not in journal_bytes
    states = {getattr(r, "state", None) for r in results}
    assert (
        JournalState.COMPLETION_ACKNOWLEDGED in states
        or JournalState.RUNNING_ACKNOWLEDGED in states
    )
