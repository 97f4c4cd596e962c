"""No Reconciler, Coordinator or Supervisor result shows a token, command or ExecutionSpec
(SPEC §3.11-§3.13, S-1; INBOX-38)."""

from __future__ import annotations

import pytest

from kernel.specs.budgets import Paging
from kernel.specs.codes import Code
from kernel.specs.states import CompletionOutcome
from kernel.worker.auditor import AuditPage, AuditProgress, AuditResult, audit_page, audit_result
from kernel.worker.auditor import entry as audit_entry
from kernel.worker.coordinator import (
    CompletionSubmission,
    after_journal_write,
    after_receipt_delete,
    after_submission,
    plan_completion,
)
from kernel.worker.journal import JournalApplied, journal_step
from kernel.worker.reconciler import (
    CompletionObserved,
    HandleInspection,
    Phase,
    ReceiptCheck,
    ReceiptFacts,
    Submission,
    after_inspection,
    after_receipt,
    completion_submission,
)
from kernel.worker.record import JournalRecord
from kernel.worker.supervisor import plan_recovery
from tests.support.journal_fixtures import CALLBACK_TOKEN, LEASE_TOKEN, PIPELINE, T0, accepted

SECRETS = (LEASE_TOKEN.reveal(), CALLBACK_TOKEN, "secret-command-line", "argv")


def _at(n: int) -> JournalRecord:
    record = accepted()
    for i, event in enumerate(PIPELINE[:n]):
        outcome = journal_step(record, event, T0 + i + 1)
        assert isinstance(outcome, JournalApplied)
        assert outcome.record is not None
        record = outcome.record
    return record


def _results() -> list[object]:
    record = _at(4)
    facts = ReceiptFacts(1, T0 + 9, 0, CompletionOutcome.SUCCEEDED)
    evidence = CompletionObserved(facts)
    submission = completion_submission(evidence, Code.CURRENT, None)
    assert submission == Submission(ready=True)
    sent = plan_completion(record, record, evidence, submission)
    assert isinstance(sent, CompletionSubmission)
    entries = (audit_entry(record.offer_id, "r1-a1", record.state),)
    progress = audit_page(AuditProgress(Paging(16, 4)), AuditPage(entries, record.offer_id, False))
    assert isinstance(progress, AuditProgress)
    audit = audit_result(progress)
    assert isinstance(audit, AuditResult)
    return [
        after_inspection(HandleInspection.EXITED),
        after_receipt(record, Phase.REREAD, ReceiptCheck.VALID, facts),
        evidence,
        submission,
        sent,
        after_submission(Code.COMPLETED, sent),
        after_submission(Code.LEASE_TOKEN_MISMATCH, sent),
        after_journal_write(True, "r1-a1"),
        after_receipt_delete(False),
        audit,
        plan_recovery(audit, 64),
    ]


@pytest.mark.spec("INBOX-38")
def test_no_result_shows_a_token_a_command_or_an_execution_spec() -> None:
    for result in _results():
        for text in (repr(result), str(result)):
            for secret in SECRETS:
                assert secret not in text, (type(result).__name__, secret)
