"""The recovery Coordinator's order (SPEC §3.12), with the kernel as the control plane."""

from __future__ import annotations

import dataclasses

import pytest

from kernel import (
    Applied,
    CompleteWithLease,
    Fence,
    Replayed,
    apply,
)
from kernel.specs.codes import Code
from kernel.specs.journal import JournalState
from kernel.specs.states import CompletionOutcome
from kernel.worker.coordinator import (
    CompletionSubmission,
    CoordinatorOutcome,
    DeleteReceipt,
    FinishRecovery,
    WriteJournal,
    after_journal_write,
    after_receipt_delete,
    after_running_ack,
    after_submission,
    plan_completion,
    running_ack_eligible,
)
from kernel.worker.journal import (
    CompletionAcknowledged,
    ControlPlaneTerminal,
    JournalApplied,
    RunningAcknowledged,
    journal_step,
)
from kernel.worker.reconciler import (
    CompletionObserved,
    HandleInspection,
    ReceiptCheck,
    ReceiptFacts,
    RunningObserved,
    Submission,
)
from kernel.worker.record import JournalRecord
from tests.support import recovery_fixtures as rf
from tests.support.journal_fixtures import PIPELINE, T0, accepted, lease, offer

FACTS = ReceiptFacts(1, T0 + 900, 0, CompletionOutcome.SUCCEEDED)
READY = Submission(ready=True)


def _at(n: int) -> JournalRecord:
    record = accepted()
    for i, event in enumerate(PIPELINE[:n]):
        outcome = journal_step(record, event, T0 + i + 1)
        assert isinstance(outcome, JournalApplied)
        assert outcome.record is not None
        record = outcome.record
    return record


@pytest.mark.spec("INBOX-34")
def test_submit_then_journal_then_receipt_and_failures_never_go_back() -> None:
    """INBOX-34: submit first, write `completion_acknowledged` second, delete the receipt
    third; a failed journal write keeps the receipt; a failed deletion keeps the final state
    and reports `completed_cleanup_pending`."""
    record = _at(4)
    sent = plan_completion(record, record, CompletionObserved(FACTS), READY)
    assert isinstance(sent, CompletionSubmission)
    assert sent.expected_version == record.offer.lease.version  # the journal's own version
    step = after_submission(Code.COMPLETED, sent)
    assert step == WriteJournal(CompletionAcknowledged(1))
    assert after_journal_write(False, "r1-a1") == FinishRecovery(
        CoordinatorOutcome.JOURNAL_WRITE_FAILED
    )
    assert after_journal_write(True, "r1-a1") == DeleteReceipt("r1-a1")
    assert after_receipt_delete(True) == FinishRecovery(CoordinatorOutcome.COMPLETED)
    assert after_receipt_delete(False) == FinishRecovery(
        CoordinatorOutcome.COMPLETED_CLEANUP_PENDING
    )
    assert after_submission(Code.ALREADY_TERMINAL, sent) == step  # the resubmission
    assert after_submission(Code.LEASE_TOKEN_MISMATCH, sent) == FinishRecovery(
        CoordinatorOutcome.SUBMISSION_REJECTED, Code.LEASE_TOKEN_MISMATCH
    )
    assert "lease-token" not in repr(sent)


def test_a_changed_revision_is_raced_and_only_a_ready_completion_is_submitted() -> None:
    record = _at(4)
    newer = dataclasses.replace(record, revision=record.revision + 1)
    assert plan_completion(record, newer, CompletionObserved(FACTS), READY) == FinishRecovery(
        CoordinatorOutcome.RACED
    )
    assert plan_completion(record, None, CompletionObserved(FACTS), READY) == FinishRecovery(
        CoordinatorOutcome.RACED
    )
    blocked = Submission(False, Code.SESSION_FENCED)
    assert plan_completion(record, record, CompletionObserved(FACTS), blocked) == FinishRecovery(
        CoordinatorOutcome.BLOCKED, Code.SESSION_FENCED
    )
    assert plan_completion(record, record, RunningObserved(), None) == FinishRecovery(
        CoordinatorOutcome.BLOCKED
    )


@pytest.mark.spec("INBOX-35")
def test_a_committed_completion_replayed_after_a_crash_converges_and_altered_is_refused() -> None:
    """INBOX-35 against the kernel's own control plane: the Worker completed (the control plane
    committed), crashed before its journal write, and recovery resubmits the identical command
    from the journal: `already_terminal`, which converges; an altered resubmission is refused."""
    control = rf.remote_started("r1", "r1-a1", T0, running=True)
    control_lease = control.current_lease(rf.latest(control))
    assert control_lease is not None
    snap = lease(
        version=control_lease.version,
        token=rf.lease_token("r1-a1", 1),
        worker_session_id=rf.WORKER.session_id,
        expires_at_ms=control_lease.expires_at_ms,
    )
    record = dataclasses.replace(_at(4), offer=offer(snap))
    sent = plan_completion(record, record, CompletionObserved(FACTS), READY)
    assert isinstance(sent, CompletionSubmission)

    def command(submission: CompletionSubmission) -> CompleteWithLease:
        return CompleteWithLease(
            run_id=submission.run_id,
            attempt_id=submission.attempt_id,
            fence=Fence(
                submission.worker_id,
                submission.worker_session_id,
                submission.worker_generation,
                submission.lease_generation,
                submission.lease_token,
                submission.expected_version,
            ),
            worker=rf.WORKER,
            callback_sequence=submission.callback_sequence,
            outcome=submission.outcome,
            exit_code=submission.exit_code,
        )

    first = apply(control, command(sent), T0 + 1_000)
    assert isinstance(first, Applied)  # committed; the Worker crashes before its journal write
    again = apply(first.aggregate, command(sent), T0 + 2_000)
    assert isinstance(again, Replayed)
    assert isinstance(after_submission(again.code, sent), WriteJournal)
    altered = dataclasses.replace(sent, exit_code=3, outcome=CompletionOutcome.FAILED)
    refused = apply(first.aggregate, command(altered), T0 + 2_000)
    assert not isinstance(refused, Applied)
    assert isinstance(after_submission(refused.code, altered), FinishRecovery)


@pytest.mark.spec("INBOX-36")
def test_running_ack_recovery_conditions_and_outcomes() -> None:
    """INBOX-36: only `started` + current + running identity + no receipt; a terminal control
    plane -> `recovery_required(control_plane_terminal)`; a version mismatch -> nothing."""
    started = _at(3)
    ok = (ReceiptCheck.ABSENT, HandleInspection.RUNNING, Code.CURRENT)
    assert running_ack_eligible(started, *ok)
    assert not running_ack_eligible(_at(4), *ok)
    assert not running_ack_eligible(
        started, ReceiptCheck.VALID, HandleInspection.RUNNING, Code.CURRENT
    )
    assert not running_ack_eligible(
        started, ReceiptCheck.ABSENT, HandleInspection.EXITED, Code.CURRENT
    )
    assert not running_ack_eligible(
        started, ReceiptCheck.ABSENT, HandleInspection.RUNNING, Code.SESSION_FENCED
    )
    acknowledged = WriteJournal(RunningAcknowledged(), CoordinatorOutcome.RUNNING_ACKNOWLEDGED)
    assert after_running_ack(Code.APPLIED) == acknowledged
    assert after_running_ack(Code.ALREADY_RUNNING) == acknowledged
    assert after_running_ack(Code.ALREADY_TERMINAL) == WriteJournal(
        ControlPlaneTerminal(), CoordinatorOutcome.CONTROL_PLANE_TERMINAL
    )
    assert after_running_ack(Code.LEASE_VERSION_MISMATCH) == FinishRecovery(
        CoordinatorOutcome.WAITING_FOR_AUTHORITY, Code.LEASE_VERSION_MISMATCH
    )
    terminal = journal_step(started, ControlPlaneTerminal(), T0 + 50)
    assert isinstance(terminal, JournalApplied)
    assert terminal.record is not None
    assert terminal.record.state is JournalState.RECOVERY_REQUIRED
