"""The startup recovery supervisor's plan (SPEC §3.13)."""

from __future__ import annotations

import pytest

from kernel.outcomes import Rejected
from kernel.specs.budgets import Paging
from kernel.specs.codes import Code
from kernel.specs.journal import JournalState
from kernel.worker.auditor import AuditPage, AuditProgress, AuditResult, audit_page, audit_result
from kernel.worker.auditor import entry as audit_entry
from kernel.worker.supervisor import RecoveryAction, overall, plan_recovery

STATES = [
    JournalState.ACCEPTED,
    JournalState.COMPLETION_ACKNOWLEDGED,
    JournalState.LAUNCHING,
    JournalState.START_FAILURE_ACKNOWLEDGED,
    JournalState.STARTED,
    JournalState.RUNNING_ACKNOWLEDGED,
    JournalState.RECOVERY_REQUIRED,
]


def _audit(states: list[JournalState]) -> AuditResult:
    entries = tuple(audit_entry(f"{i:064x}", f"a{i}", s) for i, s in enumerate(states, 1))
    cursor = entries[-1].offer_id if entries else None
    progress = audit_page(AuditProgress(Paging(64, 1)), AuditPage(entries, cursor, False))
    assert isinstance(progress, AuditProgress)
    result = audit_result(progress)
    assert isinstance(result, AuditResult)
    return result


@pytest.mark.spec("INBOX-37")
def test_the_plan_follows_the_audit_order_with_one_action_per_entry_that_needs_one() -> None:
    plan = plan_recovery(_audit(STATES), 64)
    assert not isinstance(plan, Rejected)
    assert [(p.action, p.entry.state) for p in plan] == [
        (RecoveryAction.CLEAN_RECEIPT, JournalState.COMPLETION_ACKNOWLEDGED),
        (RecoveryAction.RECONCILE, JournalState.LAUNCHING),
        (RecoveryAction.RECONCILE, JournalState.STARTED),
        (RecoveryAction.RECONCILE, JournalState.RUNNING_ACKNOWLEDGED),
        (RecoveryAction.RECONCILE, JournalState.RECOVERY_REQUIRED),
    ]


@pytest.mark.spec("INBOX-37")
def test_over_budget_fails_closed_before_any_action_and_one_failure_keeps_the_status() -> None:
    """INBOX-37: more actions than the budget -> zero side effects (no plan at all); a failing
    item leaves the overall result `reconciliation_required`."""
    assert plan_recovery(_audit(STATES), 4) == Rejected(Code.RECOVERY_ACTION_BUDGET_EXHAUSTED)
    assert not isinstance(plan_recovery(_audit(STATES), 5), Rejected)
    assert plan_recovery(_audit([JournalState.ACCEPTED] * 10), 1) == ()
    assert overall([True, True]) is Code.READY
    assert overall([True, False, True]) is Code.RECONCILIATION_REQUIRED
    for bad in (0, 1025):
        with pytest.raises(ValueError, match="budget"):
            plan_recovery(_audit(STATES), bad)
