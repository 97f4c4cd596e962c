"""The startup recovery supervisor's plan, pure (SPEC §3.13; INBOX-37).

`plan_recovery(result, budget)` turns one complete startup audit into the serial list of
actions, in the audit's order: a receipt cleanup for each `settled_completion`, and a
Reconciler-then-Coordinator pass for each launch or execution reconciliation entry (one
action per audited entry that needs one [decision]). More actions than the budget (default 64,
hard 1024) fail closed before the first side effect (`RECOVERY_ACTION_BUDGET_EXHAUSTED`); so
does an incomplete audit, which never reaches here as an `AuditResult` (`audit_result`).
`overall(outcomes)` stays `reconciliation_required` unless every action settled its record.

Per record, `before_reconcile(record)` applies §3.7's `REPLAY` row first: a record found in
`launching` has no operation of this process in flight (startup, a poll), so it becomes
`recovery_required(launch_outcome_unknown)` before the Reconciler looks at it (INBOX-05); a
final record has nothing to reconcile. `start_failure_replays(audit)` names the audited records
whose row is "replay `fail_start` only" (the restart row of §3.7).

The completion poll (E-6) acts on one journal page with the same rules: `poll_action(record,
in_flight, held)` skips a record with a delivery in flight, reconciles a record that may own a
local execution (merging the lease lifecycle's newer version into it first, so the completion
uses the journal's version and a replay after a crash is exact), replays `fail_start` for a
record whose `REPLAY` row says so, and leaves every other record alone.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from kernel.outcomes import Rejected
from kernel.specs.budgets import HARD_LIMITS
from kernel.specs.codes import Code
from kernel.specs.journal import (
    FINAL_STATES,
    REPLAY,
    AuditClass,
    ReplayAction,
)
from kernel.worker.auditor import AuditEntry, AuditResult
from kernel.worker.coordinator import SETTLED, CoordinatorOutcome
from kernel.worker.journal import LaunchOutcomeUnknown, LeaseVersionAdvanced
from kernel.worker.lease_loss import MAY_OWN_EXECUTION
from kernel.worker.record import JournalRecord, OfferLease


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


class CleanupOutcome(enum.StrEnum):
    """The `clean_receipt` action's item outcomes (the Coordinator's are `CoordinatorOutcome`)."""

    CLEANED = "cleaned"
    FAILED = "failed"


#: Item outcomes after which the record needs no further startup action.
SETTLED_ITEMS: Final = frozenset({CleanupOutcome.CLEANED.value, *(o.value for o in SETTLED)})


def item_settled(outcome: str) -> bool:
    return outcome in SETTLED_ITEMS


@dataclass(frozen=True, slots=True)
class MarkLaunchUnknown:
    """Write `recovery_required(launch_outcome_unknown)` first; the Executor is never called."""

    @property
    def event(self) -> LaunchOutcomeUnknown:
        return LaunchOutcomeUnknown()


@dataclass(frozen=True, slots=True)
class Reconcile:
    """Run the Reconciler, then the Coordinator, on the record."""


def before_reconcile(record: JournalRecord) -> MarkLaunchUnknown | Reconcile | CoordinatorOutcome:
    """§3.7 for a record found with no operation in flight, before the Reconciler."""
    if REPLAY[record.state] is ReplayAction.JOIN_OR_LAUNCH_UNKNOWN:
        return MarkLaunchUnknown()
    if record.state in FINAL_STATES:
        return CoordinatorOutcome.NOTHING_TO_DO
    return Reconcile()


def start_failure_replays(result: AuditResult) -> tuple[str, ...]:
    """The audited offers whose §3.7 row is "replay `fail_start` only" (restart)."""
    return tuple(
        e.offer_id for e in result.entries if REPLAY[e.state] is ReplayAction.REPLAY_FAIL_START
    )


class PollAction(enum.StrEnum):
    SKIP = "skip"
    RECONCILE = "reconcile"
    REPLAY_FAIL_START = "replay_fail_start"


@dataclass(frozen=True, slots=True)
class PollStep:
    """What the completion poll does with one listed record: first `merge` (the lease
    lifecycle's newer version) when there is one, then `action`."""

    action: PollAction
    merge: LeaseVersionAdvanced | None = None


def poll_action(record: JournalRecord, *, in_flight: bool, held: OfferLease | None) -> PollStep:
    """The completion poll's rule for one record (module docstring)."""
    if in_flight:
        return PollStep(PollAction.SKIP)
    if record.state in MAY_OWN_EXECUTION:  # a completion may come from its execution
        merge = None
        if held is not None and held.version > record.offer.lease.version:
            merge = LeaseVersionAdvanced(held, record.offer.delivery_kind)
        return PollStep(PollAction.RECONCILE, merge)
    if REPLAY[record.state] is ReplayAction.REPLAY_FAIL_START:
        return PollStep(PollAction.REPLAY_FAIL_START)
    return PollStep(PollAction.SKIP)
