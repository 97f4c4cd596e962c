"""Receipt-first recovery wired to the ports, with the edge runner as the control plane (SPEC
§3.11-§3.13; INBOX-34..INBOX-37).

Both journal adapters, a real SQLite control plane; receipts are the facts a receipt store
and its authenticator answer (`MemoryReceipts`; the real receipt files are exercised in
`test_worker_posix.py`).
"""

from __future__ import annotations

import pytest

from kernel.specs.codes import Code
from kernel.specs.journal import AuditClass, DeliveryKind, JournalState, RecoveryReason
from kernel.specs.states import CompletionOutcome
from kernel.worker.auditor import AuditEntry, AuditResult
from kernel.worker.coordinator import CompletionSubmission
from kernel.worker.reconciler import HandleInspection, ReceiptFacts, UnknownInboxReason
from kernel.worker.record import JournalRecord, OfferLease
from runners.worker.coordinator import CoordinatorOutcome
from runners.worker.journal.port import JournalError, JournalStore
from runners.worker.ports import ControlPlaneUnavailable, LeaseAck
from runners.worker.supervisor import StartupSupervisor
from tests.support.worker_fixtures import (
    ControlPlane,
    MemoryReceipts,
    ScriptedExecutor,
    ScriptedInspector,
    Worker,
    run_id,
    unavailable,
)


class OrderedJournal:
    """The real journal, recording the order of writes into `log` (shared with receipts and
    the control plane wrappers)."""

    def __init__(self, inner: JournalStore, log: list[str]) -> None:
        self.inner = inner
        self.log = log
        self.fail_replace = False

    def create(self, record: JournalRecord) -> None:
        self.inner.create(record)

    def replace(self, record: JournalRecord, expected_revision: int) -> None:
        if self.fail_replace:
            raise JournalError(Code.JOURNAL_PERMISSIONS, "write:ENOSPC")
        self.inner.replace(record, expected_revision)
        self.log.append(f"journal:{record.state}")

    def remove(self, offer_id: str, expected_revision: int) -> None:
        self.inner.remove(offer_id, expected_revision)

    def read(self, offer_id: str) -> JournalRecord | None:
        return self.inner.read(offer_id)

    def list(self, after: str | None, limit: int) -> object:
        return self.inner.list(after, limit)


class OrderedReceipts(MemoryReceipts):
    log: list[str]

    def delete(self, attempt_id: str) -> bool:
        ok = super().delete(attempt_id)
        self.log.append(f"receipt_delete:{ok}")
        return ok


def _running(
    journal: JournalStore, control: ControlPlane, receipts: MemoryReceipts | None = None
) -> tuple[Worker, JournalRecord]:
    """A delivered offer whose local execution is `running_acknowledged`, with the lease
    lifecycle's newer version merged into the record (§3.12 decision) as a recovery delivery
    would."""
    offer = control.admit_and_grant(run_id())
    worker = Worker(journal, control, ScriptedExecutor(), receipts=receipts)
    worker.receiver.deliver(offer)
    worker.receiver.deliver(control.offer(offer.lease.attempt_id, DeliveryKind.LEASE_RECOVERY))
    record = journal.read(offer.offer_id)
    assert record is not None
    assert record.state is JournalState.RUNNING_ACKNOWLEDGED
    return worker, record


def _finish(receipts: MemoryReceipts, record: JournalRecord, exit_code: int = 0) -> None:
    assert record.callback_sequence is not None
    receipts.receipts[record.offer.lease.attempt_id] = ReceiptFacts(
        callback_sequence=record.callback_sequence,
        finished_at_ms=record.updated_at_ms + 5,
        exit_code=exit_code,
        outcome=CompletionOutcome.SUCCEEDED if exit_code == 0 else CompletionOutcome.FAILED,
    )


@pytest.mark.spec("INBOX-34")
def test_completion_recovery_submits_then_writes_then_deletes_the_receipt(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-34: with a valid receipt, recovery submits `complete_with_lease` first, writes
    `completion_acknowledged` second and deletes the receipt third."""
    log: list[str] = []
    receipts = OrderedReceipts()
    receipts.log = log
    ordered = OrderedJournal(journal, log)
    worker, record = _running(ordered, control, receipts)  # type: ignore[arg-type]
    _finish(receipts, record)
    real = control.client.inner.complete

    def complete(submission: CompletionSubmission) -> LeaseAck:
        log.append("submit")
        return real(submission)

    control.client.overrides["complete"] = complete
    log.clear()
    result = worker.supervisor.reconcile_one(record.offer_id, control.clock.advance(10))
    assert result.outcome is CoordinatorOutcome.COMPLETED
    assert log == ["submit", "journal:completion_acknowledged", "receipt_delete:True"]
    assert control.attempt_status(record.offer.lease.attempt_id) == "succeeded"
    final = journal.read(record.offer_id)
    assert final is not None
    assert final.state is JournalState.COMPLETION_ACKNOWLEDGED


@pytest.mark.spec("INBOX-34", "INBOX-35")
def test_failed_journal_write_keeps_the_receipt_and_the_next_pass_replays_exactly(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-34/35: the control plane committed the completion, then the journal write failed:
    the receipt stays; the next pass (a replaced Worker) resubmits the identical command, gets
    `already_terminal` and converges to `completion_acknowledged`; an altered resubmission is
    refused."""
    log: list[str] = []
    receipts = OrderedReceipts()
    receipts.log = log
    ordered = OrderedJournal(journal, log)
    worker, record = _running(ordered, control, receipts)  # type: ignore[arg-type]
    _finish(receipts, record)
    codes: list[Code] = []
    real = control.client.inner.complete

    def complete(submission: CompletionSubmission) -> LeaseAck:
        answer = real(submission)
        codes.append(answer.code)
        return answer

    control.client.overrides["complete"] = complete
    ordered.fail_replace = True
    first = worker.supervisor.reconcile_one(record.offer_id, control.clock.advance(10))
    assert first.outcome is CoordinatorOutcome.JOURNAL_WRITE_FAILED
    assert record.offer.lease.attempt_id in receipts.receipts  # kept
    assert control.attempt_status(record.offer.lease.attempt_id) == "succeeded"
    ordered.fail_replace = False
    # A replaced Worker process (same session) runs the next pass.
    replaced = Worker(ordered, control, ScriptedExecutor(), receipts=receipts)  # type: ignore[arg-type]
    second = replaced.supervisor.reconcile_one(record.offer_id, control.clock.advance(10))
    assert second.outcome is CoordinatorOutcome.COMPLETED
    assert codes == [Code.COMPLETED, Code.ALREADY_TERMINAL]
    assert record.offer.lease.attempt_id not in receipts.receipts
    # An altered resubmission (another exit code) is refused by the exact-replay rule.
    lease = record.offer.lease
    altered = CompletionSubmission(
        run_id=lease.run_id,
        attempt_id=lease.attempt_id,
        worker_id=lease.worker_id,
        worker_session_id=lease.worker_session_id,
        worker_generation=lease.worker_generation,
        lease_generation=lease.lease_generation,
        lease_token=lease.lease_token,
        expected_version=lease.version,
        callback_sequence=1,
        outcome=CompletionOutcome.FAILED,
        exit_code=3,
    )
    assert control.engine.complete(altered).code is Code.COMPLETION_CONFLICT


@pytest.mark.spec("INBOX-34")
def test_failed_receipt_deletion_never_reverts_the_final_state(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-34: a failed receipt deletion leaves the record `completion_acknowledged`
    (`completed_cleanup_pending`); a later pass retries only the deletion."""
    receipts = MemoryReceipts()
    worker, record = _running(journal, control, receipts)
    _finish(receipts, record)
    receipts.fail_delete = True
    result = worker.supervisor.reconcile_one(record.offer_id, control.clock.advance(10))
    assert result.outcome is CoordinatorOutcome.COMPLETED_CLEANUP_PENDING
    final = journal.read(record.offer_id)
    assert final is not None
    assert final.state is JournalState.COMPLETION_ACKNOWLEDGED
    again = worker.supervisor.reconcile_one(record.offer_id, control.clock.advance(10))
    assert again.outcome is CoordinatorOutcome.NOTHING_TO_DO
    after = journal.read(record.offer_id)
    assert after is not None
    assert after.revision == final.revision


@pytest.mark.spec("INBOX-36")
def test_running_ack_recovery_only_for_started_current_running_without_receipt(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-36: a `started` record whose running ACK was never answered, a clearly running
    process and no receipt: recovery sends the running ACK with the journal's lease version
    and writes `running_acknowledged`; an `exited` identity does not."""
    offer = control.admit_and_grant(run_id())
    worker = Worker(journal, control, ScriptedExecutor())
    control.client.overrides["acknowledge_running"] = unavailable
    assert worker.receiver.deliver(offer).state is JournalState.STARTED
    del control.client.overrides["acknowledge_running"]
    exited = Worker(
        journal, control, ScriptedExecutor(), inspector=ScriptedInspector(HandleInspection.EXITED)
    )
    blocked = exited.supervisor.reconcile_one(offer.offer_id, control.clock.advance(5))
    assert blocked.outcome is CoordinatorOutcome.BLOCKED
    assert blocked.unknown is UnknownInboxReason.EXITED_WITHOUT_RECEIPT
    record = journal.read(offer.offer_id)
    assert record is not None
    assert record.state is JournalState.STARTED
    running = Worker(journal, control, ScriptedExecutor())
    result = running.supervisor.reconcile_one(offer.offer_id, control.clock.advance(5))
    assert result.outcome is CoordinatorOutcome.RUNNING_ACKNOWLEDGED
    assert control.attempt_status(offer.lease.attempt_id) == "running"


@pytest.mark.spec("INBOX-36")
def test_running_ack_recovery_answered_already_running_writes_running_acknowledged(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-36: running-ACK recovery maps the answer with the receiver's own table
    (`ACK_ANSWERS`): `already_running` (the control plane has the Attempt running under the
    record's fence) is an acknowledgement, so the record becomes `running_acknowledged`."""
    offer = control.admit_and_grant(run_id())
    worker = Worker(journal, control, ScriptedExecutor())
    control.client.overrides["acknowledge_running"] = unavailable
    assert worker.receiver.deliver(offer).state is JournalState.STARTED

    def already_running(lease: OfferLease, handle: str, started: int) -> LeaseAck:
        applied = control.client.inner.acknowledge_running(lease, handle, started)
        assert applied.code is Code.APPLIED
        return LeaseAck(Code.ALREADY_RUNNING, applied.version, applied.expires_at_ms)

    control.client.overrides["acknowledge_running"] = already_running
    result = worker.supervisor.reconcile_one(offer.offer_id, control.clock.advance(5))
    assert result.outcome is CoordinatorOutcome.RUNNING_ACKNOWLEDGED
    record = journal.read(offer.offer_id)
    assert record is not None
    assert record.state is JournalState.RUNNING_ACKNOWLEDGED


@pytest.mark.spec("INBOX-36")
def test_running_ack_recovery_on_a_terminal_control_plane_writes_control_plane_terminal(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-36: the control plane already failed the Attempt (its lease expired and was
    released): running-ACK recovery writes `recovery_required(control_plane_terminal)` or
    leaves the record, never a completion."""
    offer = control.admit_and_grant(run_id())
    worker = Worker(journal, control, ScriptedExecutor())
    control.client.overrides["acknowledge_running"] = unavailable
    worker.receiver.deliver(offer)
    del control.client.overrides["acknowledge_running"]

    def terminal(*args: object) -> LeaseAck:
        return LeaseAck(Code.ALREADY_TERMINAL)

    control.client.overrides["acknowledge_running"] = terminal
    result = worker.supervisor.reconcile_one(offer.offer_id, control.clock.advance(5))
    assert result.outcome is CoordinatorOutcome.CONTROL_PLANE_TERMINAL
    record = journal.read(offer.offer_id)
    assert record is not None
    assert record.recovery_reason is RecoveryReason.CONTROL_PLANE_TERMINAL

    def mismatch(*args: object) -> LeaseAck:
        return LeaseAck(Code.LEASE_VERSION_MISMATCH)

    other = control.admit_and_grant(run_id())
    control.client.overrides["acknowledge_running"] = unavailable
    worker.receiver.deliver(other)
    control.client.overrides["acknowledge_running"] = mismatch
    waiting = worker.supervisor.reconcile_one(other.offer_id, control.clock.advance(5))
    assert waiting.outcome is CoordinatorOutcome.WAITING_FOR_AUTHORITY
    unchanged = journal.read(other.offer_id)
    assert unchanged is not None
    assert unchanged.state is JournalState.STARTED


@pytest.mark.spec("INBOX-37")
def test_supervisor_over_budget_does_nothing_and_a_failing_item_does_not_stop_others(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-37: more actions than the budget: zero side effects; within budget, one failing
    item does not stop the others and the overall result stays `reconciliation_required`."""
    receipts = MemoryReceipts()
    worker, first = _running(journal, control, receipts)
    _, second = _running(journal, control, receipts)
    _finish(receipts, first)
    _finish(receipts, second)
    entries = tuple(
        AuditEntry(
            r.offer_id, r.offer.lease.attempt_id, r.state, None, AuditClass.EXECUTION_RECONCILIATION
        )
        for r in sorted((first, second), key=lambda r: r.offer_id)
    )
    audit = AuditResult(entries=entries, counts={}, status=Code.RECONCILIATION_REQUIRED)
    tight = StartupSupervisor(
        journal,
        worker.reconciler,
        worker.coordinator,
        lambda offer_id: (True, None),
        runtime=lambda: control.sessions["w1"],
        clock=control.clock,
        budget=1,
    )
    calls_before = list(control.client.calls)
    refused = tight.run(audit)
    assert refused.refused is Code.RECOVERY_ACTION_BUDGET_EXHAUSTED
    assert refused.items == ()
    assert control.client.calls == calls_before
    failing = {entries[0].offer_id}

    def flaky(submission: CompletionSubmission) -> LeaseAck:
        if any(
            r.offer.lease.attempt_id == submission.attempt_id and r.offer_id in failing
            for r in (first, second)
        ):
            raise ControlPlaneUnavailable
        return control.client.inner.complete(submission)

    control.client.overrides["complete"] = flaky
    result = worker.supervisor.run(audit, control.clock.advance(10))
    assert [item.outcome for item in result.items] == ["submission_rejected", "completed"]
    assert result.status is Code.RECONCILIATION_REQUIRED
