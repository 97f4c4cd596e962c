"""The approval domain's transition, invariants, rules and due indexes, pure (issue 19 item 3,
decision AA-D1; `kernel/approved_action/transitions.py`, `kernel/specs/approved_action.py`).

Directed tests of every row of `ACTION_TABLE` and every refusal of `apply_action` (its module
docstring lists them), the admission checked at request time, `approval_id`,
`person_refusal`, `run_matches`, the invariants (AA-I1..AA-I5) on every applied outcome and on
hand-broken rows, `rules` (`after_claim`, `dispatch_tally`, `recovery_tally`) and the
`selection.due_page` oracle. Then two Hypothesis properties over random command sequences on a
few actions (with the Run evidence a store could hold: none, the action's own Run, another Run
under its id): `apply_action` never raises, and every applied outcome is a row of the table
with no step violation.

There is no AA id for the approval domain (AA-01..AA-15 are the supervisor's), so only the
totality property carries a mark (RUN-05: every transition is total).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import Applied, PolicyDefinition, RunAggregate, apply
from kernel.approved_action import (
    ActionAggregate,
    ActionApplied,
    ActionCommand,
    ActionCursor,
    ActionOutcome,
    ActionSource,
    ApproveAction,
    ApprovedAction,
    ClaimAction,
    DenyAction,
    DispatchCounters,
    RecoveryCounters,
    RequestApproval,
    ResolveAction,
    StartAction,
    action_key,
    action_step_violations,
    after_claim,
    apply_action,
    approval_id,
    check_action_invariants,
    dispatch_tally,
    due_page,
    person_refusal,
    recovery_tally,
    run_matches,
)
from kernel.approved_action.commands import PERSON_MAX_LENGTH
from kernel.approved_action.effects import AppendActionEvent, InsertAction, UpdateAction
from kernel.approved_action.selection import DUE_PAGE_HARD_CAP
from kernel.commands import AdmitRun, CommandError
from kernel.identity import is_portable_id
from kernel.outcomes import Raced, Rejected, Replayed
from kernel.specs.approved_action import (
    ACTION_TABLE,
    FINAL_ACTION_STATUSES,
    ActionCommandName,
    ActionEventType,
    ActionStatus,
)
from kernel.specs.codes import Code
from kernel.specs.states import Actor, RunStatus, Safety

T0 = 1_000_000
S = ActionStatus


# -- helpers -------------------------------------------------------------------------------------
def admission(n: int = 1, **changes: Any) -> AdmitRun:
    """The admission a CLI submission of task `t` revision 1 would pin (ids `run-`/`att-` hex)."""
    fields: dict[str, Any] = {
        "run_id": f"run-{n:032x}",
        "attempt_id": f"att-{n:032x}",
        "project_id": "local",
        "task_id": "t",
        "task_revision": 1,
        "executor_type": "local.posix",
        "actor": Actor.USER,
    }
    return AdmitRun(**(fields | changes))


def action_id(n: int = 1) -> str:
    return approval_id(admission(n).run_id)


def request(n: int = 1, by: str = "ann", **changes: Any) -> RequestApproval:
    return RequestApproval(action_id(n), admission(n, **changes), by)


def checked(
    before: ActionAggregate | None, command: ActionCommand, at: int
) -> tuple[ActionOutcome, ActionAggregate | None]:
    """`apply_action`, with the step checked like the contract does, and the aggregate after
    (the same object when nothing applied)."""
    outcome = apply_action(before, command, at)
    assert action_step_violations(before, command, outcome, at) == []
    if not isinstance(outcome, ActionApplied):
        return outcome, before
    assert check_action_invariants(outcome.action, outcome.run, with_run=True) == []
    source = None if before is None else before.action.status
    assert ACTION_TABLE.allows(source, ActionCommandName(command.name), outcome.action.status)
    return outcome, ActionAggregate(outcome.action, outcome.run)


def applied(before: ActionAggregate | None, command: ActionCommand, at: int) -> ActionAggregate:
    outcome, after = checked(before, command, at)
    assert isinstance(outcome, ActionApplied), outcome
    assert after is not None
    return after


def reach(status: ActionStatus, n: int = 1, run: str = "own") -> ActionAggregate:
    """An action in `status`, reached through `apply_action` from a request at T0 (one ms per
    step). `run` picks the evidence of the ends reached from `starting`: `own` (the start
    admits it), `none` (resolved without a Run) or `foreign` (another Run under its id)."""
    agg = applied(None, request(n), T0)
    if status is S.PENDING:
        return agg
    if status is S.DENIED:
        return applied(agg, DenyAction(agg.action.action_id, "bob"), T0 + 1)
    agg = applied(agg, ApproveAction(agg.action.action_id, "bob"), T0 + 1)
    if status is S.APPROVED:
        return agg
    agg = applied(agg, ClaimAction(agg.action.action_id), T0 + 2)
    if status is S.STARTING:
        return agg
    if status is S.STARTED:
        return applied(agg, StartAction(agg.action.action_id), T0 + 3)
    if status is S.FAILED:
        return applied(agg, ResolveAction(agg.action.action_id), T0 + 3)
    assert status is S.MANUAL_REQUIRED
    with_foreign = dataclasses.replace(agg, run=foreign_run(agg.action))
    return applied(with_foreign, ResolveAction(agg.action.action_id), T0 + 3)


def own_run(action: ApprovedAction, at: int = T0) -> RunAggregate:
    admitted = apply(None, action.admission, at)
    assert isinstance(admitted, Applied)
    return admitted.aggregate


def foreign_run(action: ApprovedAction, at: int = T0) -> RunAggregate:
    """Another Run under the action's Run id (another task)."""
    other = dataclasses.replace(action.admission, task_id="someone-else")
    admitted = apply(None, other, at)
    assert isinstance(admitted, Applied)
    return admitted.aggregate


def command_of(
    trigger: ActionCommandName, agg: ActionAggregate | None, n: int = 1
) -> ActionCommand:
    key = action_id(n) if agg is None else agg.action.action_id
    commands: dict[ActionCommandName, ActionCommand] = {
        ActionCommandName.REQUEST_APPROVAL: request(n),
        ActionCommandName.APPROVE_ACTION: ApproveAction(key, "carol"),
        ActionCommandName.DENY_ACTION: DenyAction(key, "carol"),
        ActionCommandName.CLAIM_ACTION: ClaimAction(key),
        ActionCommandName.START_ACTION: StartAction(key),
        ActionCommandName.RESOLVE_ACTION: ResolveAction(key),
    }
    return commands[trigger]


# -- the rows ------------------------------------------------------------------------------------
def test_a_request_creates_a_pending_action_with_the_exact_admission_and_one_event() -> None:
    command = request(by="ann")
    outcome, agg = checked(None, command, T0)
    assert isinstance(outcome, ActionApplied)
    assert outcome.code is Code.REQUESTED
    assert outcome.run is None  # a request admits nothing
    action = outcome.action
    assert (action.action_id, action.admission, action.status) == (
        command.action_id,
        command.admission,
        S.PENDING,
    )
    assert (action.version, action.event_seq, action.requested_by) == (1, 1, "ann")
    assert action.requested_at_ms == action.updated_at_ms == T0
    assert action.run_id == command.admission.run_id
    assert outcome.effects == (
        InsertAction(action),
        AppendActionEvent(outcome.events[0]),
    )
    (event,) = outcome.events
    assert (event.type, event.actor, event.by, event.at_ms, event.seq) == (
        ActionEventType.REQUESTED,
        Actor.USER,
        "ann",
        T0,
        1,
    )
    assert agg is not None


def test_approve_and_deny_record_who_and_when() -> None:
    pending = reach(S.PENDING)
    key = pending.action.action_id
    approved, _ = checked(pending, ApproveAction(key, "bob"), T0 + 5)
    assert isinstance(approved, ActionApplied)
    assert approved.code is Code.APPROVED
    assert (approved.action.status, approved.action.decided_by, approved.action.decided_at_ms) == (
        S.APPROVED,
        "bob",
        T0 + 5,
    )
    assert approved.action.finished_at_ms is None  # due for dispatch, not final
    (event,) = approved.events
    assert (event.type, event.actor, event.by, event.seq) == (
        ActionEventType.APPROVED,
        Actor.USER,
        "bob",
        2,
    )
    assert isinstance(approved.effects[0], UpdateAction)
    assert approved.effects[0].expected_version == 1

    denied, _ = checked(pending, DenyAction(key, "dan"), T0 + 7)
    assert isinstance(denied, ActionApplied)
    assert denied.code is Code.DENIED
    action = denied.action
    assert (action.status, action.decided_by, action.decided_at_ms, action.finished_at_ms) == (
        S.DENIED,
        "dan",
        T0 + 7,
        T0 + 7,
    )
    assert action.code is None
    assert action.claimed_at_ms is None
    assert [e.type for e in denied.events] == [ActionEventType.DENIED]


def test_the_claim_is_the_start_barrier_and_admits_nothing() -> None:
    approved = reach(S.APPROVED)
    outcome, after = checked(approved, ClaimAction(approved.action.action_id), T0 + 9)
    assert isinstance(outcome, ActionApplied)
    assert outcome.code is Code.CLAIMED
    assert outcome.action.status is S.STARTING
    assert outcome.action.claimed_at_ms == T0 + 9
    assert outcome.run is None
    assert not any(isinstance(e, InsertAction) for e in outcome.effects)
    assert len(outcome.effects) == 2  # the action's update and its Event: no Run effect
    (event,) = outcome.events
    assert (event.type, event.actor, event.by) == (ActionEventType.CLAIMED, Actor.SCHEDULER, None)
    assert after is not None


def test_the_start_admits_the_run_and_ends_the_barrier_in_one_outcome() -> None:
    starting = reach(S.STARTING)
    outcome, _ = checked(starting, StartAction(starting.action.action_id), T0 + 20)
    assert isinstance(outcome, ActionApplied)
    assert outcome.code is Code.STARTED
    assert outcome.action.status is S.STARTED
    assert outcome.action.finished_at_ms == T0 + 20
    assert outcome.action.code is None
    assert outcome.run is not None
    assert outcome.run.run.status is RunStatus.QUEUED
    assert run_matches(outcome.action, outcome.run)
    # The action's effects come first, then exactly the Run kernel's admission effects.
    admitted = apply(None, starting.action.admission, T0 + 20)
    assert isinstance(admitted, Applied)
    assert outcome.effects[2:] == admitted.effects
    assert [e.type for e in outcome.events] == [ActionEventType.STARTED]
    assert outcome.events[0].actor is Actor.SCHEDULER


def test_a_start_that_finds_its_run_does_not_admit_it_again() -> None:
    starting = reach(S.STARTING)
    run = own_run(starting.action, T0 + 2)
    found = dataclasses.replace(starting, run=run)
    outcome, _ = checked(found, StartAction(starting.action.action_id), T0 + 20)
    assert isinstance(outcome, ActionApplied)
    assert (outcome.action.status, outcome.code) == (S.STARTED, Code.VERIFIED_STARTED)
    assert outcome.run is run
    assert len(outcome.effects) == 2  # no admission effect


def test_a_start_that_meets_another_run_needs_a_person() -> None:
    starting = reach(S.STARTING)
    found = dataclasses.replace(starting, run=foreign_run(starting.action))
    outcome, _ = checked(found, StartAction(starting.action.action_id), T0 + 20)
    assert isinstance(outcome, ActionApplied)
    assert (outcome.action.status, outcome.code) == (S.MANUAL_REQUIRED, Code.EVIDENCE_CONTRADICTED)
    assert outcome.action.code == Code.ACTION_RUN_MISMATCH
    assert outcome.run is found.run
    assert len(outcome.effects) == 2
    (event,) = outcome.events
    assert (event.type, event.code) == (ActionEventType.MANUAL_REQUIRED, Code.ACTION_RUN_MISMATCH)


def test_a_start_whose_stored_admission_is_refused_now_needs_a_person() -> None:
    """Unreachable through a request (checked then); on stored data the start admits nothing
    and hands the action to a person with the Run kernel's code."""
    starting = reach(S.STARTING)
    bad = PolicyDefinition(0, True, Safety.IDEMPOTENT, 0, 0)
    stored = dataclasses.replace(
        starting.action, admission=dataclasses.replace(starting.action.admission,
                                                       provider_policy=bad)
    )  # fmt: skip
    outcome, _ = checked(ActionAggregate(stored, None), StartAction(stored.action_id), T0 + 20)
    assert isinstance(outcome, ActionApplied)
    assert outcome.action.status is S.MANUAL_REQUIRED
    assert outcome.action.code == Code.INVALID_RUN_RETRY_POLICY
    assert outcome.run is None
    assert len(outcome.effects) == 2


@pytest.mark.parametrize(
    ("evidence", "status", "code", "action_code"),
    [
        ("none", S.FAILED, Code.VERIFIED_NOT_STARTED, Code.START_INTERRUPTED),
        ("own", S.STARTED, Code.VERIFIED_STARTED, None),
        ("foreign", S.MANUAL_REQUIRED, Code.EVIDENCE_CONTRADICTED, Code.ACTION_RUN_MISMATCH),
    ],
)
def test_the_reconciler_resolves_from_the_runs_facts_and_never_starts(
    evidence: str, status: ActionStatus, code: Code, action_code: Code | None
) -> None:
    starting = reach(S.STARTING)
    run = {
        "none": None,
        "own": own_run(starting.action, T0 + 2),
        "foreign": foreign_run(starting.action),
    }[evidence]
    agg = dataclasses.replace(starting, run=run)
    outcome, _ = checked(agg, ResolveAction(starting.action.action_id), T0 + 30)
    assert isinstance(outcome, ActionApplied)
    assert (outcome.action.status, outcome.code, outcome.action.code) == (
        status,
        code,
        action_code,
    )
    assert outcome.run is run  # the evidence as read: never a new Run
    assert len(outcome.effects) == 2  # the action's update and its Event, nothing admitted
    (event,) = outcome.events
    assert event.actor is Actor.RECONCILER
    assert event.code == action_code
    assert outcome.action.finished_at_ms == T0 + 30


@pytest.mark.parametrize("decision", [ApproveAction, DenyAction])
@pytest.mark.parametrize("evidence", ["own", "foreign"])
def test_a_decision_keeps_the_run_loaded_under_the_action_id(
    decision: type[ApproveAction] | type[DenyAction], evidence: str
) -> None:
    """A store holds whatever Run is under the action's Run id (another writer may admit one:
    nothing in the Run tables knows the action), and `load_action` loads it in every status. A
    decision must carry it through like the claim does; it must not look like a Run that
    vanished (the postcondition's AA-RUN check), nor raise."""
    pending = reach(S.PENDING)
    run = (own_run if evidence == "own" else foreign_run)(pending.action)
    loaded = dataclasses.replace(pending, run=run)
    outcome, after = checked(loaded, decision(pending.action.action_id, "bob"), T0 + 5)
    assert isinstance(outcome, ActionApplied)
    assert outcome.run is run
    assert after is not None
    assert after.run is run


# -- the refusals --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command",
    [
        ApproveAction(action_id(), "bob"),
        DenyAction(action_id(), "bob"),
        ClaimAction(action_id()),
        StartAction(action_id()),
        ResolveAction(action_id()),
    ],
    ids=lambda c: c.name,
)
def test_any_command_but_a_request_on_no_action_is_not_found(command: ActionCommand) -> None:
    assert apply_action(None, command, T0) == Rejected(Code.ACTION_NOT_FOUND)


def test_a_request_replayed_is_existing_and_another_under_its_id_conflicts() -> None:
    pending = reach(S.PENDING)
    assert apply_action(pending, request(), T0 + 1) == Replayed(Code.EXISTING)
    # A replay is recognised in any status, not only `pending`.
    assert apply_action(reach(S.STARTED), request(), T0 + 9) == Replayed(Code.EXISTING)
    assert apply_action(pending, request(by="zed"), T0 + 1) == Rejected(Code.ACTION_ID_CONFLICT)
    other = RequestApproval(action_id(), admission(task_id="other"), "ann")
    assert apply_action(pending, other, T0 + 1) == Rejected(Code.ACTION_ID_CONFLICT)


@pytest.mark.parametrize(
    ("policy", "code"),
    [
        (PolicyDefinition(0, True, Safety.IDEMPOTENT, 0, 0), Code.INVALID_RUN_RETRY_POLICY),
        (PolicyDefinition(3, True, Safety.UNKNOWN, 0, 0), Code.RUN_RETRY_POLICY_UNSAFE),
    ],
)
def test_a_request_whose_admission_the_run_kernel_refuses_is_refused_with_its_code(
    policy: PolicyDefinition, code: Code
) -> None:
    """Checked at request time, with the Run kernel's own rules (A-1..A-5)."""
    command = request(provider_policy=policy)
    probe = apply(None, command.admission, T0)
    assert isinstance(probe, Rejected)
    assert probe.code is code  # the Run kernel's own answer ...
    assert apply_action(None, command, T0) == Rejected(code)  # ... is the request's


def test_a_valid_policy_is_accepted_and_pinned() -> None:
    policy = PolicyDefinition(3, True, Safety.IDEMPOTENT, 10, 100)
    outcome = apply_action(None, request(provider_policy=policy), T0)
    assert isinstance(outcome, ActionApplied)
    assert outcome.action.admission.provider_policy == policy


def test_a_decision_replayed_by_the_same_person_is_already_applied() -> None:
    approved = reach(S.APPROVED)
    key = approved.action.action_id
    assert apply_action(approved, ApproveAction(key, "bob"), T0 + 5) == Replayed(
        Code.ALREADY_APPLIED
    )
    # Also past the barrier: the approval was applied, whatever happened after it.
    for status in (S.STARTING, S.STARTED, S.FAILED, S.MANUAL_REQUIRED):
        agg = reach(status)
        assert apply_action(agg, ApproveAction(key, "bob"), T0 + 5) == Replayed(
            Code.ALREADY_APPLIED
        ), status
    denied = reach(S.DENIED)
    assert apply_action(denied, DenyAction(key, "bob"), T0 + 5) == Replayed(Code.ALREADY_APPLIED)


@pytest.mark.parametrize(
    ("status", "command"),
    [
        (S.APPROVED, ApproveAction(action_id(), "carol")),  # another person
        (S.APPROVED, DenyAction(action_id(), "bob")),  # the other decision
        (S.DENIED, ApproveAction(action_id(), "bob")),
        (S.DENIED, DenyAction(action_id(), "carol")),
        (S.STARTING, DenyAction(action_id(), "bob")),
        (S.STARTED, DenyAction(action_id(), "bob")),
        (S.STARTED, ApproveAction(action_id(), "carol")),
        (S.FAILED, DenyAction(action_id(), "bob")),
        (S.MANUAL_REQUIRED, ApproveAction(action_id(), "carol")),
    ],
)
def test_another_decision_after_the_decision_is_not_pending(
    status: ActionStatus, command: ActionCommand
) -> None:
    assert apply_action(reach(status), command, T0 + 5) == Rejected(Code.ACTION_NOT_PENDING)


@pytest.mark.parametrize("status", [s for s in S if s is not S.APPROVED])
def test_a_claim_of_an_action_no_longer_approved_is_not_eligible(status: ActionStatus) -> None:
    agg = reach(status)
    assert apply_action(agg, ClaimAction(agg.action.action_id), T0 + 5) == Raced(Code.NOT_ELIGIBLE)


@pytest.mark.parametrize("command_type", [StartAction, ResolveAction])
@pytest.mark.parametrize("status", [s for s in S if s is not S.STARTING])
def test_a_start_or_resolve_of_an_action_not_starting_is_not_eligible(
    status: ActionStatus, command_type: type[StartAction] | type[ResolveAction]
) -> None:
    agg = reach(status)
    # Even with a Run under its id: the evidence is never read outside `starting`.
    for run in (None, own_run(agg.action)):
        found = dataclasses.replace(agg, run=run)
        assert apply_action(found, command_type(agg.action.action_id), T0 + 5) == Raced(
            Code.NOT_ELIGIBLE
        )


@pytest.mark.parametrize("status", list(S))
def test_a_command_observed_before_the_last_write_is_a_clock_regression(
    status: ActionStatus,
) -> None:
    agg = reach(status)
    last = agg.action.updated_at_ms
    for trigger in ActionCommandName:
        if trigger is ActionCommandName.REQUEST_APPROVAL:
            continue  # a request is decided by the id alone (replay or conflict)
        command = command_of(trigger, agg)
        assert apply_action(agg, command, last - 1) == Rejected(Code.CLOCK_REGRESSION), trigger
    # The same time as the last write is not a regression.
    assert not isinstance(apply_action(agg, ClaimAction(agg.action.action_id), last), Rejected)


def test_a_negative_observation_time_is_refused_by_the_contract() -> None:
    import icontract  # noqa: PLC0415 - only this test needs it

    with pytest.raises(icontract.ViolationError):
        apply_action(None, request(), -1)


def test_every_missing_pair_of_the_table_is_refused_and_changes_nothing() -> None:
    """The code side of the table: for each declared (source, trigger) the table does not
    list, the transition returns a value that writes nothing."""
    refused: set[tuple[ActionStatus | None, ActionCommandName]] = set()
    for source, trigger in ACTION_TABLE.missing():
        agg = None if source is None else reach(source)
        at = T0 + 50
        outcome = apply_action(agg, command_of(trigger, agg), at)
        assert isinstance(outcome, Rejected | Replayed | Raced), (source, trigger, outcome)
        refused.add((source, trigger))
    assert refused == set(ACTION_TABLE.missing())
    assert refused  # the table refuses something


# -- commands, ids, persons ----------------------------------------------------------------------
def test_approval_id_of_a_cli_run_id_keeps_its_random_part() -> None:
    hexpart = "0123456789abcdef" * 2
    assert approval_id(f"run-{hexpart}") == f"apr-{hexpart}"


@pytest.mark.parametrize("run_id", ["r1", "run-short", "run-" + "a" * 33, "wf:step/1", "x" * 200])
def test_approval_id_of_any_other_run_id_is_a_digest(run_id: str) -> None:
    digest = hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:32]
    assert approval_id(run_id) == f"apr-{digest}"
    assert is_portable_id(approval_id(run_id))
    assert approval_id(run_id) == approval_id(run_id)  # deterministic: a replay replays


def test_approval_ids_of_distinct_cli_run_ids_differ() -> None:
    assert approval_id(f"run-{1:032x}") != approval_id(f"run-{2:032x}")


@pytest.mark.parametrize(
    "value", ["a", "ann", "Ann O'Neil", "x" * PERSON_MAX_LENGTH, "émile", "user@example"]
)
def test_person_refusal_accepts_short_printable_names(value: str) -> None:
    assert person_refusal(value) is None


@pytest.mark.parametrize(
    "value",
    ["", "x" * (PERSON_MAX_LENGTH + 1), " ann", "ann ", "a\nb", "a\tb", "\x00", None, 7, b"ann"],
)
def test_person_refusal_refuses_anything_else(value: object) -> None:
    why = person_refusal(value)
    assert isinstance(why, str)
    assert why


@pytest.mark.parametrize(
    "build",
    [
        lambda: ApproveAction("", "bob"),
        lambda: ApproveAction("has space", "bob"),
        lambda: DenyAction(action_id(), ""),
        lambda: ApproveAction(action_id(), " bob"),
        lambda: ClaimAction(7),  # type: ignore[arg-type]
        lambda: StartAction("a/../b\n"),
        lambda: ResolveAction(""),
        lambda: RequestApproval(action_id(), "not an admission", "ann"),  # type: ignore[arg-type]
        lambda: RequestApproval(action_id(), admission(), "x" * (PERSON_MAX_LENGTH + 1)),
    ],
)
def test_malformed_commands_are_refused_at_construction(build: Any) -> None:
    with pytest.raises(CommandError):
        build()


# -- run_matches ---------------------------------------------------------------------------------
def test_run_matches_its_own_run_only() -> None:
    action = reach(S.STARTING).action
    assert run_matches(action, own_run(action))
    for change in (
        {"run_id": f"run-{9:032x}"},
        {"attempt_id": f"att-{9:032x}"},
        {"task_id": "other"},
        {"task_revision": 2},
        {"project_id": "elsewhere"},
        {"executor_type": "shell"},
    ):
        other = apply(None, dataclasses.replace(action.admission, **change), T0)
        assert isinstance(other, Applied)
        assert not run_matches(action, other.aggregate), change
    # The actor and the policy are not part of the match (the Run's facts are its ids).
    other = apply(None, dataclasses.replace(action.admission, actor=Actor.TRIGGER), T0)
    assert isinstance(other, Applied)
    assert run_matches(action, other.aggregate)


def test_run_matches_needs_the_first_attempt() -> None:
    action = reach(S.STARTING).action
    run = own_run(action)
    assert not run_matches(action, dataclasses.replace(run, attempts=()))


# -- invariants ----------------------------------------------------------------------------------
@pytest.mark.parametrize("status", list(S))
def test_every_reached_status_keeps_the_invariants(status: ActionStatus) -> None:
    agg = reach(status)
    assert agg.action.status is status
    assert check_action_invariants(agg.action, agg.run, with_run=True) == []
    assert agg.action.version == agg.action.event_seq
    assert (agg.action.finished_at_ms is not None) == (status in FINAL_ACTION_STATUSES)


def _rules(action: ApprovedAction, run: RunAggregate | None = None) -> set[str]:
    return {v.invariant for v in check_action_invariants(action, run, with_run=True)}


def test_the_invariants_catch_hand_broken_rows() -> None:
    pending = reach(S.PENDING).action
    started = reach(S.STARTED)
    approved = reach(S.APPROVED).action
    starting = reach(S.STARTING).action
    failed = reach(S.FAILED).action
    assert _rules(dataclasses.replace(pending, version=2)) == {"AA-I1"}
    assert "AA-I1" in _rules(dataclasses.replace(pending, version=0, event_seq=0))
    assert _rules(dataclasses.replace(pending, decided_by="bob")) == {"AA-I2"}
    assert _rules(dataclasses.replace(approved, decided_by=None, decided_at_ms=None)) == {"AA-I2"}
    assert _rules(dataclasses.replace(approved, claimed_at_ms=T0 + 1)) == {"AA-I2"}
    assert _rules(dataclasses.replace(starting, claimed_at_ms=None)) == {"AA-I2"}
    assert _rules(dataclasses.replace(starting, finished_at_ms=T0 + 2)) == {"AA-I3"}
    assert _rules(dataclasses.replace(failed, code=None)) == {"AA-I3"}
    assert _rules(dataclasses.replace(started.action, code="X"), started.run) == {"AA-I3"}
    assert _rules(dataclasses.replace(approved, decided_at_ms=T0 - 1)) == {"AA-I4"}
    assert _rules(dataclasses.replace(starting, updated_at_ms=T0)) == {"AA-I4"}
    # AA-I5: a started action's Run is there and is its own.
    assert _rules(started.action, None) == {"AA-I5"}
    assert _rules(started.action, foreign_run(started.action)) == {"AA-I5"}
    assert _rules(started.action, started.run) == set()
    # without the Run, AA-I5 is not judged
    assert check_action_invariants(started.action) == []


def test_the_step_check_catches_a_forged_outcome() -> None:
    starting = reach(S.STARTING)
    good = apply_action(starting, ResolveAction(starting.action.action_id), T0 + 5)
    assert isinstance(good, ActionApplied)
    command = ResolveAction(starting.action.action_id)
    assert action_step_violations(starting, command, good, T0 + 5) == []
    # The reconciler admitting a Run: caught.
    forged = dataclasses.replace(
        good,
        action=dataclasses.replace(good.action, status=S.STARTED, code=None),
        run=own_run(starting.action),
    )
    rules = {v.invariant for v in action_step_violations(starting, command, forged, T0 + 5)}
    assert "EFFECTS" in rules  # the effects say `failed`
    # A row outside the table: a claim landing on `started`.
    approved = reach(S.APPROVED)
    claim = ClaimAction(approved.action.action_id)
    claimed = apply_action(approved, claim, T0 + 5)
    assert isinstance(claimed, ActionApplied)
    jumped = dataclasses.replace(
        claimed,
        action=dataclasses.replace(claimed.action, status=S.STARTED, finished_at_ms=T0 + 5),
    )
    rules = {v.invariant for v in action_step_violations(approved, claim, jumped, T0 + 5)}
    assert "TABLE" in rules
    # An Event at another time.
    late = dataclasses.replace(
        claimed,
        effects=(
            claimed.effects[0],
            AppendActionEvent(dataclasses.replace(claimed.events[0], at_ms=T0 + 6)),
        ),
    )
    rules = {v.invariant for v in action_step_violations(approved, claim, late, T0 + 5)}
    assert "V-3" in rules
    # A non-applied outcome has nothing to check.
    assert action_step_violations(approved, claim, Raced(Code.NOT_ELIGIBLE), T0 + 5) == []


# -- rules: what the ports do with an item -------------------------------------------------------
def _counters(counters: DispatchCounters | RecoveryCounters) -> dict[str, int]:
    return {k: v for k, v in counters.as_dict().items() if v}


def test_after_claim_starts_only_behind_a_committed_barrier() -> None:
    approved = reach(S.APPROVED)
    claim = ClaimAction(approved.action.action_id)
    claimed = apply_action(approved, claim, T0 + 5)
    assert after_claim(claim, claimed) == StartAction(claim.action_id)
    for missed in (
        Raced(Code.NOT_ELIGIBLE),
        Raced(Code.CAS_CONFLICT),
        Rejected(Code.CLOCK_REGRESSION),
        Rejected(Code.ACTION_NOT_FOUND),
    ):
        assert after_claim(claim, missed) is None


def test_dispatch_tally_counts_each_item_once() -> None:
    starting = reach(S.STARTING)
    claimed = apply_action(reach(S.APPROVED), ClaimAction(starting.action.action_id), T0 + 2)
    started = apply_action(starting, StartAction(starting.action.action_id), T0 + 3)
    found = apply_action(
        dataclasses.replace(starting, run=own_run(starting.action)),
        StartAction(starting.action.action_id),
        T0 + 3,
    )
    mismatch = apply_action(
        dataclasses.replace(starting, run=foreign_run(starting.action)),
        StartAction(starting.action.action_id),
        T0 + 3,
    )
    raced, cas = Raced(Code.NOT_ELIGIBLE), Raced(Code.CAS_CONFLICT)
    rejected = Rejected(Code.CLOCK_REGRESSION)
    cases: list[tuple[ActionOutcome, ActionOutcome | None, dict[str, int]]] = [
        (claimed, started, {"scanned": 1, "claimed": 1, "started": 1}),
        (claimed, found, {"scanned": 1, "claimed": 1, "started": 1}),
        (claimed, mismatch, {"scanned": 1, "claimed": 1, "recovery_required": 1}),
        (claimed, raced, {"scanned": 1, "claimed": 1, "recovery_required": 1}),
        (claimed, cas, {"scanned": 1, "claimed": 1, "deferred": 1}),
        (claimed, rejected, {"scanned": 1, "claimed": 1, "unavailable": 1}),
        (claimed, None, {"scanned": 1, "claimed": 1}),
        (raced, None, {"scanned": 1, "already_terminal": 1}),
        (cas, None, {"scanned": 1, "deferred": 1}),
        (rejected, None, {"scanned": 1, "unavailable": 1}),
    ]
    for claim, start, expected in cases:
        assert _counters(dispatch_tally(claim, start)) == expected, (claim, start)
    total = DispatchCounters.zero()
    for claim, start, _ in cases:
        total += dispatch_tally(claim, start)
    assert total.scanned == len(cases)


def test_recovery_tally_counts_each_item_once() -> None:
    starting = reach(S.STARTING)
    key = starting.action.action_id
    failed = apply_action(starting, ResolveAction(key), T0 + 3)
    verified = apply_action(
        dataclasses.replace(starting, run=own_run(starting.action)), ResolveAction(key), T0 + 3
    )
    manual = apply_action(
        dataclasses.replace(starting, run=foreign_run(starting.action)), ResolveAction(key), T0 + 3
    )
    cases: list[tuple[ActionOutcome, dict[str, int]]] = [
        (failed, {"scanned": 1, "verified_failed": 1}),
        (verified, {"scanned": 1, "verified_succeeded": 1}),
        (manual, {"scanned": 1, "manual_required": 1}),
        (Raced(Code.NOT_ELIGIBLE), {"scanned": 1, "already_resolved": 1}),
        (Raced(Code.CAS_CONFLICT), {"scanned": 1, "deferred": 1}),
        (Rejected(Code.CLOCK_REGRESSION), {"scanned": 1, "unavailable": 1}),
    ]
    for outcome, expected in cases:
        assert _counters(recovery_tally(outcome)) == expected, outcome
    # The counters this domain never uses stay 0 (rules.py's docstring).
    for outcome, _ in cases:
        tally = recovery_tally(outcome)
        assert tally.claimed == tally.execution_active == 0


# -- selection: the due indexes ------------------------------------------------------------------
def _at(status: ActionStatus, n: int, decided: int, claimed: int | None = None) -> ApprovedAction:
    """A stored row in `status` with the given decision and barrier times (invariants kept)."""
    base = reach(status, n).action
    changes: dict[str, Any] = {}
    if base.decided_at_ms is not None:
        changes["decided_at_ms"] = decided
    if base.claimed_at_ms is not None:
        changes["claimed_at_ms"] = decided if claimed is None else claimed
    row = dataclasses.replace(base, **changes)
    stamps = [t for t in (row.decided_at_ms, row.claimed_at_ms, row.finished_at_ms) if t]
    top = max([row.updated_at_ms, *stamps])
    row = dataclasses.replace(
        row, updated_at_ms=top, finished_at_ms=top if row.finished_at_ms is not None else None
    )
    assert check_action_invariants(row) == []
    return row


def test_action_key_names_only_due_rows() -> None:
    for status in S:
        row = reach(status).action
        dispatch = action_key(row, ActionSource.DISPATCH)
        recovery = action_key(row, ActionSource.RECOVERY)
        assert (dispatch is not None) == (status is S.APPROVED), status
        assert (recovery is not None) == (status is S.STARTING), status
        if dispatch is not None:
            assert dispatch == ActionCursor(row.decided_at_ms or 0, row.action_id)
        if recovery is not None:
            assert recovery == ActionCursor(row.claimed_at_ms or 0, row.action_id)


def test_due_page_is_keyset_ordered_strictly_after_the_cursor_and_truncated() -> None:
    rows = [
        _at(S.APPROVED, 1, T0 + 30),
        _at(S.APPROVED, 2, T0 + 10),
        _at(S.APPROVED, 3, T0 + 10),
        _at(S.APPROVED, 4, T0 + 20),
        _at(S.STARTING, 5, T0 + 5, T0 + 15),
        _at(S.PENDING, 6, T0),
        _at(S.DENIED, 7, T0 + 1),
        _at(S.STARTED, 8, T0 + 2),
    ]
    order = [
        ActionCursor(T0 + 10, min(action_id(2), action_id(3))),
        ActionCursor(T0 + 10, max(action_id(2), action_id(3))),
        ActionCursor(T0 + 20, action_id(4)),
        ActionCursor(T0 + 30, action_id(1)),
    ]
    whole = due_page(rows, ActionSource.DISPATCH, None, DUE_PAGE_HARD_CAP)
    assert list(whole.keys) == order
    assert not whole.truncated
    first = due_page(rows, ActionSource.DISPATCH, None, 2)
    assert list(first.keys) == order[:2]
    assert first.truncated
    assert first.next_cursor == order[1]
    second = due_page(rows, ActionSource.DISPATCH, first.next_cursor, 2)
    assert list(second.keys) == order[2:]
    assert not second.truncated
    # strictly after: the cursor's own key is never returned again
    same = due_page(rows, ActionSource.DISPATCH, order[0], 64)
    assert order[0] not in same.keys
    assert list(same.keys) == order[1:]
    # exactly `limit` left: not truncated
    assert not due_page(rows, ActionSource.DISPATCH, order[1], 2).truncated
    # past the end: empty, no cursor
    empty = due_page(rows, ActionSource.DISPATCH, order[-1], 5)
    assert empty.keys == ()
    assert not empty.truncated
    assert empty.next_cursor is None
    # recovery pages over `starting` only, in barrier time
    recovery = due_page(rows, ActionSource.RECOVERY, None, 5)
    assert list(recovery.keys) == [ActionCursor(T0 + 15, action_id(5))]


def test_due_page_pages_visit_every_due_row_exactly_once() -> None:
    rows = [_at(S.APPROVED, n, T0 + n % 3) for n in range(1, 12)]
    seen: list[ActionCursor] = []
    cursor: ActionCursor | None = None
    while True:
        page = due_page(rows, ActionSource.DISPATCH, cursor, 3)
        seen.extend(page.keys)
        cursor = page.next_cursor
        if not page.truncated:
            break
    assert seen == sorted(seen)
    assert {k.action_id for k in seen} == {r.action_id for r in rows}
    assert len(seen) == len(rows)


@pytest.mark.parametrize("limit", [0, -1, DUE_PAGE_HARD_CAP + 1, True, 2.0])
def test_due_page_refuses_a_limit_outside_the_cap(limit: Any) -> None:
    with pytest.raises(ValueError, match="limit"):
        due_page([], ActionSource.DISPATCH, None, limit)


# -- properties ----------------------------------------------------------------------------------
PEOPLE = ("ann", "bob")
N_ACTIONS = 3


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[str, int, str, int]]:
    """(command, action n, person or evidence, clock step) tuples."""
    kinds = st.sampled_from(
        ["request", "request_other", "approve", "deny", "claim", "start", "resolve"]
    )
    extra = st.sampled_from([*PEOPLE, "none", "own", "foreign"])
    return draw(
        st.lists(
            st.tuples(kinds, st.integers(1, N_ACTIONS), extra, st.integers(-2, 3)),
            min_size=1,
            max_size=30,
        )
    )


def _command(kind: str, n: int, extra: str) -> ActionCommand:
    person = extra if extra in PEOPLE else "ann"
    key = action_id(n)
    if kind == "request":
        return request(n, by=person)
    if kind == "request_other":
        return RequestApproval(key, admission(n, task_revision=2), person)
    by_kind: dict[str, ActionCommand] = {
        "approve": ApproveAction(key, person),
        "deny": DenyAction(key, person),
        "claim": ClaimAction(key),
        "start": StartAction(key),
        "resolve": ResolveAction(key),
    }
    return by_kind[kind]


def _evidence(agg: ActionAggregate, extra: str, now: int) -> ActionAggregate:
    """The Run a store could hold under the action's id: what it holds (`none`: as stored),
    or, only while no start admitted one, another writer's Run (its own or a foreign one: an
    admission that reused the id). Not tried on a `pending` action: a decision there drops the
    Run (`test_a_decision_keeps_the_run_loaded_under_the_action_id` reproduces it)."""
    if agg.run is not None or extra not in ("own", "foreign"):
        return agg
    run = own_run(agg.action, now) if extra == "own" else foreign_run(agg.action, now)
    return dataclasses.replace(agg, run=run)


def _walk(script: Sequence[tuple[str, int, str, int]]) -> list[tuple[Any, ActionOutcome]]:
    store: dict[str, ActionAggregate] = {}
    now = T0
    seen: list[tuple[Any, ActionOutcome]] = []
    for kind, n, extra, step in script:
        now = max(0, now + step)
        command = _command(kind, n, extra)
        before = store.get(command.action_id)
        if before is not None:
            before = _evidence(before, extra, now)
        outcome = apply_action(before, command, now)  # never raises (the property)
        assert action_step_violations(before, command, outcome, now) == []
        if isinstance(outcome, ActionApplied):
            source = None if before is None else before.action.status
            assert ACTION_TABLE.allows(
                source, ActionCommandName(command.name), outcome.action.status
            ), (source, command.name, outcome.action.status)
            assert check_action_invariants(outcome.action, outcome.run, with_run=True) == []
            store[command.action_id] = ActionAggregate(outcome.action, outcome.run)
        else:
            assert isinstance(outcome, Rejected | Replayed | Raced)
        seen.append((source_of(before), outcome))
    return seen


def source_of(agg: ActionAggregate | None) -> ActionStatus | None:
    return None if agg is None else agg.action.status


@pytest.mark.spec("RUN-05")
@given(steps())
def test_apply_action_is_total_and_every_applied_outcome_is_a_row(
    script: list[tuple[str, int, str, int]],
) -> None:
    seen = _walk(script)
    assert len(seen) == len(script)


@given(steps())
def test_only_a_start_from_starting_ever_brings_a_new_run(
    script: list[tuple[str, int, str, int]],
) -> None:
    """The at-most-once rule in the kernel: across any sequence, an applied outcome carries a
    Run it did not load only when it is a start from `starting` with no Run loaded."""
    store: dict[str, ActionAggregate] = {}
    now = T0
    for kind, n, extra, step in script:
        now = max(0, now + step)
        command = _command(kind, n, extra)
        before = store.get(command.action_id)
        if before is not None:
            before = _evidence(before, extra, now)
        outcome = apply_action(before, command, now)
        if not isinstance(outcome, ActionApplied):
            continue
        loaded = None if before is None else before.run
        if outcome.run is not loaded:
            assert isinstance(command, StartAction)
            assert before is not None
            assert before.action.status is S.STARTING
            assert loaded is None
            assert outcome.action.status is S.STARTED
        if outcome.action.status is S.DENIED:
            assert outcome.run is loaded  # a denial never brings a Run
        store[command.action_id] = ActionAggregate(outcome.action, outcome.run)
