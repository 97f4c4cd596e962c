"""The startup recovery supervisor's plan, pure (SPEC §3.13; INBOX-37).

`plan_recovery(result, budget)` turns one complete startup audit into the serial list of
actions, in the audit's order: a receipt cleanup for each `settled_completion`, and a
Reconciler-then-Coordinator pass for each launch or execution reconciliation entry (one
action per audited entry that needs one [decision]). More actions than the budget (default 64,
hard 1024) fail closed before the first side effect (`RECOVERY_ACTION_BUDGET_EXHAUSTED`); so
does an incomplete audit, which never reaches here as an `AuditResult` (`audit_result`).
`overall(outcomes)` stays `reconciliation_required` unless every action settled its record.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kernel.outcomes import Rejected
from kernel.specs.budgets import HARD_LIMITS
from kernel.specs.codes import Code
from kernel.specs.journal import AuditClass
from kernel.worker.auditor import AuditEntry, AuditResult


class RecoveryAction(enum.StrEnum):
    CLEAN_RECEIPT = "clean_receipt"  # settled_completion: idempotent receipt cleanup
    RECONCILE = "reconcile"  # launch or execution reconciliation: Reconciler then Coordinator


@dataclass(frozen=True, slots=True)
class PlannedAction:
    action: RecoveryAction
    entry: AuditEntry


_ACTIONS = {
    AuditClass.SETTLED_COMPLETION: RecoveryAction.CLEAN_RECEIPT,
    AuditClass.LAUNCH_RECONCILIATION: RecoveryAction.RECONCILE,
    AuditClass.EXECUTION_RECONCILIATION: RecoveryAction.RECONCILE,
}


def check_action_budget(budget: int) -> None:
    """§3.13: 1..1024 actions (default 64). Raises `ValueError` otherwise."""
    limit = HARD_LIMITS.recovery_supervisor_actions_max
    if type(budget) is not int or not 1 <= budget <= limit:
        raise ValueError(f"recovery action budget must be 1..{limit}")


def plan_recovery(result: AuditResult, budget: int) -> tuple[PlannedAction, ...] | Rejected:
    """The serial plan, or `Rejected(RECOVERY_ACTION_BUDGET_EXHAUSTED)` before any action."""
    check_action_budget(budget)
    plan = tuple(
        PlannedAction(_ACTIONS[e.classification], e)
        for e in result.entries
        if e.classification in _ACTIONS
    )
    if len(plan) > budget:
        return Rejected(Code.RECOVERY_ACTION_BUDGET_EXHAUSTED)
    return plan


def overall(settled: list[bool]) -> Code:
    """`ready` only when every planned action settled its record; a failing item does not
    stop the others, and the result then stays `reconciliation_required`."""
    return Code.READY if all(settled) else Code.RECONCILIATION_REQUIRED
