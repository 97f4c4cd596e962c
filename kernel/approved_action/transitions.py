"""The approval domain's one total transition (issue 19, decision AA-D1):
`apply_action(aggregate, command, observed_at_ms) -> ActionOutcome`.

Every applied outcome is a row of `ACTION_TABLE` (checked by the contract), moves the action's
version by one and appends one Event at the observation time. Refusals are values:

- any command but a request, on no action: `Rejected(ACTION_NOT_FOUND)`;
- `request_approval` on an existing id: `Replayed(EXISTING)` if identical, else
  `Rejected(ACTION_ID_CONFLICT)`; one whose admission the Run kernel refuses: that `Rejected`
  code (A-1..A-5, checked at request time, so an approved action can always be admitted);
- `approve_action` / `deny_action` after the decision: `Replayed(ALREADY_APPLIED)` for the same
  decision by the same person, else `Rejected(ACTION_NOT_PENDING)`;
- `claim_action` on an action no longer `approved`, `start_action` / `resolve_action` on one not
  `starting`: `Raced(NOT_ELIGIBLE)` (a candidate that changed since its page was read, D-3).

The at-most-once rule: only `start_action` ever admits a Run, and only from `starting`, in the
same transaction that ends `starting`. `resolve_action` reads the Run under the action's Run id
and never admits one: no Run is proof it never started (`failed`, `START_INTERRUPTED`), its Run
is proof it did (`started`), another Run is a contradiction a person resolves
(`manual_required`, `ACTION_RUN_MISMATCH`).
"""

from __future__ import annotations

from dataclasses import replace

import icontract

from kernel.approved_action.commands import (
    ActionCommand,
    ApproveAction,
    ClaimAction,
    DenyAction,
    RequestApproval,
    StartAction,
)
from kernel.approved_action.effects import (
    AnyActionEffect,
    AppendActionEvent,
    InsertAction,
    UpdateAction,
    apply_action_effects,
)
from kernel.approved_action.entities import ActionAggregate, ActionEvent, ApprovedAction
from kernel.approved_action.invariants import check_action_invariants, run_matches
from kernel.approved_action.outcomes import ActionApplied, ActionOutcome
from kernel.entities import RunAggregate
from kernel.outcomes import Applied, Raced, Rejected, Replayed
from kernel.specs.approved_action import (
    ACTION_TABLE,
    ActionCommandName,
    ActionEventType,
    ActionStatus,
)
from kernel.specs.codes import Code
from kernel.specs.invariants import Violation
from kernel.specs.states import Actor
from kernel.transitions import apply

__all__ = ["action_step_violations", "apply_action"]


def action_step_violations(
    before: ActionAggregate | None, command: ActionCommand, result: ActionOutcome, now: int
) -> list[Violation]:
    """Everything the postcondition checks (also used by the models)."""
    if not isinstance(result, ActionApplied):
        return []
    after = result.action
    key = after.action_id
    out = check_action_invariants(after, result.run, with_run=True)
    source = None if before is None else before.action.status
    if not ACTION_TABLE.allows(source, ActionCommandName(command.name), after.status):
        out.append(Violation("TABLE", key, f"{source} -{command.name}-> {after.status}"))
    try:
        replayed = apply_action_effects(None if before is None else before.action, result.effects)
    except Exception as exc:
        out.append(Violation("EFFECTS", key, f"effects do not apply: {type(exc).__name__}"))
    else:
        if replayed != after:
            out.append(Violation("EFFECTS", key, "effects do not reproduce the action"))
    expected_version = 1 if before is None else before.action.version + 1
    if after.version != expected_version:
        out.append(Violation("V-1", key, "action version did not move by one"))
    events = result.events
    if [e.seq for e in events] != [after.event_seq] or any(e.at_ms != now for e in events):
        out.append(Violation("V-3", key, "not exactly one Event at the observation time"))
    run_before = None if before is None else before.run
    if result.run is not run_before and source is not ActionStatus.STARTING:
        out.append(Violation("AA-RUN", key, "only a start may admit the Run"))
    return out


def _ok(
    aggregate: ActionAggregate | None,
    command: ActionCommand,
    result: ActionOutcome,
    observed_at_ms: int,
) -> bool:
    return not action_step_violations(aggregate, command, result, observed_at_ms)


def _before_ok(aggregate: ActionAggregate | None) -> bool:
    return aggregate is None or not check_action_invariants(aggregate.action)


@icontract.require(lambda observed_at_ms: isinstance(observed_at_ms, int) and observed_at_ms >= 0)
@icontract.require(_before_ok, "a stored action keeps its invariants")
@icontract.ensure(_ok)
def apply_action(
    aggregate: ActionAggregate | None, command: ActionCommand, observed_at_ms: int
) -> ActionOutcome:
    """The transition of `command` on the action as loaded (see the module docstring)."""
    now = observed_at_ms
    if isinstance(command, RequestApproval):
        return _request(aggregate, command, now)
    if aggregate is None:
        return Rejected(Code.ACTION_NOT_FOUND)
    action, run = aggregate.action, aggregate.run
    if now < action.updated_at_ms:
        return Rejected(Code.CLOCK_REGRESSION)
    if isinstance(command, ApproveAction | DenyAction):
        return _decide(action, run, command, now)
    if isinstance(command, ClaimAction):
        if action.status is not ActionStatus.APPROVED:
            return Raced(Code.NOT_ELIGIBLE)
        changed = replace(action, status=ActionStatus.STARTING, claimed_at_ms=now)
        return _applied(
            action, changed, run, kind=ActionEventType.CLAIMED, actor=Actor.SCHEDULER,
            now=now, code=Code.CLAIMED,
        )  # fmt: skip
    if action.status is not ActionStatus.STARTING:
        return Raced(Code.NOT_ELIGIBLE)
    if isinstance(command, StartAction):
        return _start(action, run, now)
    return _resolve(action, run, now)


# -- the rows -------------------------------------------------------------------------------------
def _request(
    aggregate: ActionAggregate | None, command: RequestApproval, now: int
) -> ActionOutcome:
    if aggregate is not None:
        same = (
            aggregate.action.admission == command.admission
            and aggregate.action.requested_by == command.requested_by
        )
        return Replayed(Code.EXISTING) if same else Rejected(Code.ACTION_ID_CONFLICT)
    # The admission is checked now, with the Run kernel's own rules, so an approved action can
    # always be admitted: a refusal later would strand it behind its barrier.
    probe = apply(None, command.admission, now)
    if not isinstance(probe, Applied):
        return Rejected(probe.code)
    action = ApprovedAction(
        action_id=command.action_id,
        admission=command.admission,
        status=ActionStatus.PENDING,
        version=1,
        event_seq=1,
        requested_by=command.requested_by,
        requested_at_ms=now,
        updated_at_ms=now,
    )
    event = ActionEvent(
        action.action_id, 1, ActionEventType.REQUESTED, Actor.USER, now, by=command.requested_by
    )
    return ActionApplied(
        action, None, (InsertAction(action), AppendActionEvent(event)), Code.REQUESTED
    )


def _decide(
    action: ApprovedAction, run: RunAggregate | None, command: ApproveAction | DenyAction, now: int
) -> ActionOutcome:
    approve = isinstance(command, ApproveAction)
    target = ActionStatus.APPROVED if approve else ActionStatus.DENIED
    if action.status is not ActionStatus.PENDING:
        if action.decided_by == command.decided_by and (
            action.status is target or (approve and action.claimed_at_ms is not None)
        ):
            return Replayed(Code.ALREADY_APPLIED)
        return Rejected(Code.ACTION_NOT_PENDING)
    changed = replace(
        action,
        status=target,
        decided_by=command.decided_by,
        decided_at_ms=now,
        finished_at_ms=None if approve else now,
    )
    kind = ActionEventType.APPROVED if approve else ActionEventType.DENIED
    code = Code.APPROVED if approve else Code.DENIED
    return _applied(
        action, changed, run, kind=kind, actor=Actor.USER, now=now, code=code,
        by=command.decided_by,
    )  # fmt: skip


def _start(action: ApprovedAction, run: RunAggregate | None, now: int) -> ActionOutcome:
    """The only place a Run is admitted: from `starting`, with the end of the barrier."""
    if run is not None:
        return _from_evidence(action, run, now, Actor.SCHEDULER)
    admitted = apply(None, action.admission, now)
    if not isinstance(admitted, Applied):
        # Checked at request time; a refusal now is a contradiction a person resolves.
        return _end(action, None, ActionStatus.MANUAL_REQUIRED, admitted.code, Actor.SCHEDULER, now)
    started = _end(action, admitted.aggregate, ActionStatus.STARTED, None, Actor.SCHEDULER, now)
    return replace(started, effects=started.effects + admitted.effects)


def _resolve(action: ApprovedAction, run: RunAggregate | None, now: int) -> ActionOutcome:
    """Evidence only: the Run under the action's id, never a start."""
    if run is None:
        return _end(
            action, None, ActionStatus.FAILED, Code.START_INTERRUPTED, Actor.RECONCILER, now
        )
    return _from_evidence(action, run, now, Actor.RECONCILER)


def _from_evidence(
    action: ApprovedAction, run: RunAggregate, now: int, actor: Actor
) -> ActionApplied:
    if run_matches(action, run):
        return _end(
            action, run, ActionStatus.STARTED, None, actor, now, outcome=Code.VERIFIED_STARTED
        )
    return _end(action, run, ActionStatus.MANUAL_REQUIRED, Code.ACTION_RUN_MISMATCH, actor, now)


_END_EVENT = {
    ActionStatus.STARTED: (ActionEventType.STARTED, Code.STARTED),
    ActionStatus.FAILED: (ActionEventType.FAILED, Code.VERIFIED_NOT_STARTED),
    ActionStatus.MANUAL_REQUIRED: (ActionEventType.MANUAL_REQUIRED, Code.EVIDENCE_CONTRADICTED),
}


def _end(  # noqa: PLR0917 - the row's six facts, in the table's words
    action: ApprovedAction,
    run: RunAggregate | None,
    status: ActionStatus,
    code: str | None,
    actor: Actor,
    now: int,
    *,
    outcome: Code | None = None,
) -> ActionApplied:
    kind, default_code = _END_EVENT[status]
    changed = replace(action, status=status, finished_at_ms=now, code=code)
    return _applied(
        action, changed, run, kind=kind, actor=actor, now=now,
        code=outcome or default_code, event_code=code,
    )  # fmt: skip


def _applied(
    before: ApprovedAction,
    changed: ApprovedAction,
    run: RunAggregate | None,
    *,
    kind: ActionEventType,
    actor: Actor,
    now: int,
    code: Code,
    by: str | None = None,
    event_code: str | None = None,
) -> ActionApplied:
    seq = before.event_seq + 1
    after = replace(changed, version=before.version + 1, event_seq=seq, updated_at_ms=now)
    event = ActionEvent(after.action_id, seq, kind, actor, now, by=by, code=event_code)
    effects: tuple[AnyActionEffect, ...] = (
        UpdateAction(after, before.version),
        AppendActionEvent(event),
    )
    return ActionApplied(after, run, effects, code)
