"""What the Approved Action ports do with each due item, decided here so that the runner's port
only sequences calls (ARCHITECTURE rule 1; SPEC §5.1; decision AA-D1).

- The dispatcher claims an item (`ClaimAction`: the start barrier, its own transaction), and
  `after_claim` says whether it then starts it (`StartAction`: admit the Run, end the barrier).
- `dispatch_tally` / `recovery_tally` turn one item's outcomes into the page counters of §5.1
  (numbers only, AA-07).

Counter readings [decision AA-D2]: `started` counts a Run admitted now or found admitted;
`recovery_required` an action the evidence sent to `manual_required`; `already_terminal` a
candidate another writer moved on (`Raced(NOT_ELIGIBLE)`); `deferred` a lost compare-and-set
(the next cycle sees it again); `unavailable` a refusal the item cannot get past. A claimed
action whose start raced stays `starting`: the next cycle's recovery phase resolves it from the
Run's facts. Recovery: `verified_succeeded` (its Run is there: `started`), `verified_failed`
(no Run: `failed`, START_INTERRUPTED), `manual_required`, `already_resolved` (no longer
`starting`), `deferred` (a lost compare-and-set). `claimed`, `succeeded`, `failed`, `blocked`,
`retrying`, `execution_active` stay 0 in this domain: the reconciler resolves in one transaction,
and a started action's Run has its own lifecycle.
"""

from __future__ import annotations

from kernel.approved_action.commands import ClaimAction, StartAction
from kernel.approved_action.outcomes import ActionApplied, ActionOutcome
from kernel.approved_action.pages import DispatchCounters, RecoveryCounters
from kernel.outcomes import Raced
from kernel.specs.codes import Code

__all__ = ["after_claim", "dispatch_tally", "recovery_tally"]


def after_claim(claim: ClaimAction, outcome: ActionOutcome) -> StartAction | None:
    """The start that follows a claim: only after the barrier committed (`Applied`)."""
    return StartAction(claim.action_id) if isinstance(outcome, ActionApplied) else None


def _count(kind: type[RecoveryCounters] | type[DispatchCounters], **fields: int) -> dict[str, int]:
    out = kind.zero().as_dict()
    out.update(fields)
    return out


def dispatch_tally(claim: ActionOutcome, start: ActionOutcome | None) -> DispatchCounters:
    """One dispatched item's counters (scanned 1, and what its claim and start did)."""
    fields: dict[str, int] = {"scanned": 1}
    if not isinstance(claim, ActionApplied):
        fields[_missed(claim, "already_terminal")] = 1
    else:
        fields["claimed"] = 1
        if isinstance(start, ActionApplied):
            manual = start.code is Code.EVIDENCE_CONTRADICTED
            fields["recovery_required" if manual else "started"] = 1
        elif start is not None:
            fields[_missed(start, "recovery_required")] = 1
    return DispatchCounters(**_count(DispatchCounters, **fields))


def recovery_tally(outcome: ActionOutcome) -> RecoveryCounters:
    """One resolved item's counters (scanned 1, and how it was resolved)."""
    fields: dict[str, int] = {"scanned": 1}
    if isinstance(outcome, ActionApplied):
        name = {
            Code.VERIFIED_STARTED: "verified_succeeded",
            Code.VERIFIED_NOT_STARTED: "verified_failed",
        }.get(outcome.code, "manual_required")
        fields[name] = 1
    else:
        fields[_missed(outcome, "already_resolved")] = 1
    return RecoveryCounters(**_count(RecoveryCounters, **fields))


def _missed(outcome: ActionOutcome, not_eligible: str) -> str:
    """The counter of an outcome that changed nothing."""
    if isinstance(outcome, Raced):
        return not_eligible if outcome.code is Code.NOT_ELIGIBLE else "deferred"
    return "unavailable"
