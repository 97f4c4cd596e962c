"""The approval-domain traces (SPEC §5, §7 component `approved_action`; issue 19, decision AA-D1).

ADR-0036's checklist (AA-01..AA-15) is about the supervisor and its lifecycle; the approval
domain behind its two ports has no SPEC ids of its own, so every named trace here is
`AA-D1-<what it shows>` after the decision that records the domain. Each is recorded through
the reference store by `ApprovalScenario` and checks its own expectations while recording (as
`model_tests.corpus.dsl` does for Runs): the happy path admits the Run exactly once, a denied
action never runs, replays and conflicts, the crash window behind the start barrier resolved
from evidence only, the two due indexes paged with keyset cursors, and an admission the Run
kernel refuses at request time. A few seeded random traces (`generated/`) mix the commands with
lost responses, reopens and duplicates. Every trace needs the `approved_action` capability: an
adapter whose store has no approval domain (the cluster runner, §5.4) reports it not
applicable, never passed. `python -m model_tests.corpus` regenerates
`conformance/traces/approved_action/`.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator
from typing import Any

from conformance.run.faults import Fault, FaultKind
from conformance.run.pages import SourceQuery
from conformance.run.projection import Projection
from conformance.run.trace import Trace
from kernel import AdmitRun, PolicyDefinition, Safety
from kernel.approved_action import (
    ActionApplied,
    ActionCommand,
    ApproveAction,
    ApprovedAction,
    ClaimAction,
    DenyAction,
    RequestApproval,
    ResolveAction,
    StartAction,
    apply_action,
)
from kernel.specs.states import Profile
from model_tests.corpus.dsl import Scenario, ScenarioError

Builder = Callable[[], Trace]
APPROVAL_SCENARIOS: dict[str, Builder] = {}

EXECUTOR = "local.posix"
RETRY = PolicyDefinition(3, True, Safety.IDEMPOTENT, 1_000, 60_000)
CRASH_AFTER = Fault(FaultKind.CRASH_AFTER_COMMIT)
CRASH_BEFORE = Fault(FaultKind.CRASH_BEFORE_COMMIT)
DUPLICATE = Fault(FaultKind.DUPLICATE_DELIVERY)
DISPATCH = "approval_dispatch"
RECOVERY = "approval_recovery"
#: The seeded random traces of `generated/` (a few dozen steps each).
GENERATED_SEEDS = tuple(range(5_000, 5_006))


def admission(run_id: str, policy: PolicyDefinition | None = None, **changes: Any) -> AdmitRun:
    """The Run admission an action for `run_id` holds (its first Attempt `<run_id>-a1`)."""
    command = AdmitRun(run_id, f"{run_id}-a1", "project", "task", 1, EXECUTOR, policy)
    return dataclasses.replace(command, **changes)


class ApprovalScenario(Scenario):
    """A named approval-domain trace being recorded (component `approved_action`)."""

    def __init__(self, name: str, description: str) -> None:
        super().__init__(name, description, profile=Profile.EDGE, component="approved_action")

    # -- state ---------------------------------------------------------------------------------
    def action(self, action_id: str) -> ApprovedAction:
        for found in self.recorder.adapter.store.actions():
            if found.action_id == action_id:
                return found
        raise ScenarioError(f"{self.recorder.header.name}: no action {action_id}")

    def projection(self) -> Projection:
        return self.recorder.adapter.project()

    def expect_status(self, action_id: str, status: str, code: str | None = None) -> None:
        found = self.action(action_id)
        if (found.status.value, found.code) != (status, code):
            raise ScenarioError(
                f"{self.recorder.header.name}: {action_id} is {found.status.value} "
                f"({found.code}), expected {status} ({code})"
            )

    def runs(self) -> list[str]:
        return sorted(agg.run.run_id for agg in self.recorder.adapter.store.aggregates())

    def expect_runs(self, *run_ids: str) -> None:
        if self.runs() != sorted(run_ids):
            raise ScenarioError(
                f"{self.recorder.header.name}: Runs {self.runs()}, expected {sorted(run_ids)}"
            )

    def action_effects(self, command: ActionCommand) -> int:
        """How many statements (kernel effects) `command` would write now (D-3)."""
        store = self.recorder.adapter.store
        with store.transaction() as tx:
            outcome = apply_action(tx.load_action(command.action_id), command, self.now)
        if not isinstance(outcome, ActionApplied):
            raise ScenarioError(f"{command.name} would not apply now: {outcome.code}")
        return len(outcome.effects)

    def action_faults(self, command: ActionCommand) -> None:
        """A crash before commit, then an I/O error at every statement: nothing changes."""
        before = self.projection()
        self.do(command, "crashed", fault=CRASH_BEFORE)
        for k in range(1, self.action_effects(command) + 1):
            self.do(command, "error", fault=Fault(FaultKind.IO_ERROR, at_effect=k))
        if self.projection() != before:
            raise ScenarioError(f"{self.recorder.header.name}: a fault of {command.name} wrote")

    # -- the protocol --------------------------------------------------------------------------
    def request(
        self,
        action_id: str,
        run_id: str,
        *,
        by: str = "alice",
        policy: PolicyDefinition | None = None,
        expect: str | None = "applied:requested",
    ) -> RequestApproval:
        command = RequestApproval(action_id, admission(run_id, policy), by)
        self.do(command, expect)
        return command

    def approved(self, action_id: str, run_id: str, *, by: str = "bob") -> None:
        """Requested, then approved a little later."""
        self.request(action_id, run_id)
        self.tick(10)
        self.do(ApproveAction(action_id, by), "applied:approved")

    def due(
        self,
        source: str,
        expect_items: list[str],
        *,
        has_more: bool = False,
        limit: int = 8,
        after: tuple[int, str] | None = None,
    ) -> tuple[int, str] | None:
        """One page of a due index: exactly `expect_items`, in keyset order; its cursor."""
        result = self.recorder.page(SourceQuery(source, limit, after), self.now)
        page = result.page
        assert page is not None
        if page["items"] != expect_items or page["has_more"] != has_more:
            raise ScenarioError(
                f"{self.recorder.header.name} step {len(self.recorder.steps)}: {source} gave "
                f"{page['items']} has_more={page['has_more']}, expected {expect_items} "
                f"has_more={has_more}"
            )
        cursor = page["cursor"]
        return None if cursor is None else (int(cursor[0]), str(cursor[1]))


def approval_scenario(
    name: str, description: str
) -> Callable[[Callable[[ApprovalScenario], None]], Builder]:
    """Register `body` as the builder of the approval trace `name`."""

    def register(body: Callable[[ApprovalScenario], None]) -> Builder:
        def build() -> Trace:
            s = ApprovalScenario(name, description)
            body(s)
            return s.trace()

        APPROVAL_SCENARIOS[name] = build
        return build

    return register


# -- the named traces --------------------------------------------------------------------------
@approval_scenario(
    "AA-D1-request-approve-claim-start-admits-the-run-once",
    "AA-D1: a request approved by a person is due for dispatch; the dispatcher claims it (the "
    "start barrier, due for recovery only) and starts it, admitting exactly its Run with the "
    "action's ids in the same transaction; a fault at any statement of the start writes "
    "nothing, a lost start response replayed is raced, never a second admission; every Event "
    "names who and when.",
)
def happy_path(s: ApprovalScenario) -> None:
    s.due(DISPATCH, [])
    s.request("apr-1", "run-1", policy=RETRY)
    s.due(DISPATCH, [])  # pending: not due until a person approves
    s.tick(100)
    s.do(ApproveAction("apr-1", "bob"), "applied:approved")
    s.due(DISPATCH, ["apr-1"])
    s.due(RECOVERY, [])
    s.tick(50)
    s.action_faults(ClaimAction("apr-1"))
    s.do(ClaimAction("apr-1"), "applied:claimed")
    s.due(DISPATCH, [])
    s.due(RECOVERY, ["apr-1"])
    s.expect_runs()
    s.tick(5)
    start = StartAction("apr-1")
    s.action_faults(start)
    s.expect_runs()
    s.do(start, "applied:started", fault=CRASH_AFTER)
    s.expect_runs("run-1")
    s.do(start, "raced:NOT_ELIGIBLE")  # the lost response replayed: no second admission
    s.reopen()
    s.do(start, "raced:NOT_ELIGIBLE")
    s.do(ClaimAction("apr-1"), "raced:NOT_ELIGIBLE")
    s.do(ResolveAction("apr-1"), "raced:NOT_ELIGIBLE")
    s.do(ApproveAction("apr-1", "bob"), "replayed:already_applied")
    s.due(DISPATCH, [])
    s.due(RECOVERY, [])
    s.expect_status("apr-1", "started")
    s.expect_runs("run-1")
    agg = s.agg("run-1")
    if [a.attempt_id for a in agg.attempts] != ["run-1-a1"] or agg.policy is None:
        raise ScenarioError("the start did not admit exactly the action's Run and policy")
    events = s.projection()["action_events"]
    who = [(e["type"], e["actor"], e["by"]) for e in events]
    if who != [
        ("action.requested", "user", "alice"),
        ("action.approved", "user", "bob"),
        ("action.claimed", "scheduler", None),
        ("action.started", "scheduler", None),
    ]:
        raise ScenarioError(f"unexpected Events {who}")


@approval_scenario(
    "AA-D1-request-deny-never-runs",
    "AA-D1: a denied request is final: it is never due, a claim, a start or a resolution is "
    "raced, an approval after the denial is refused, the same denial replayed is already "
    "applied, and no Run ever exists.",
)
def denied(s: ApprovalScenario) -> None:
    s.request("apr-1", "run-1")
    s.tick(100)
    deny = DenyAction("apr-1", "carol")
    s.action_faults(deny)
    s.do(deny, "applied:denied")
    s.due(DISPATCH, [])
    s.due(RECOVERY, [])
    s.tick(10)
    s.do(ClaimAction("apr-1"), "raced:NOT_ELIGIBLE")
    s.do(StartAction("apr-1"), "raced:NOT_ELIGIBLE")
    s.do(ResolveAction("apr-1"), "raced:NOT_ELIGIBLE")
    s.do(ApproveAction("apr-1", "carol"), "rejected:ACTION_NOT_PENDING")
    s.do(ApproveAction("apr-1", "bob"), "rejected:ACTION_NOT_PENDING")
    s.do(deny, "replayed:already_applied")
    s.do(DenyAction("apr-1", "bob"), "rejected:ACTION_NOT_PENDING")
    s.reopen()
    s.do(ClaimAction("apr-1"), "raced:NOT_ELIGIBLE")
    s.expect_status("apr-1", "denied")
    s.expect_runs()


@approval_scenario(
    "AA-D1-request-replay-existing-and-id-conflict",
    "AA-D1: a request replayed with the same admission and requester (also after a lost "
    "response or a duplicate delivery) is the existing action; the same id with another "
    "admission or requester is a conflict; another id for a Run an action already holds is "
    "raced by the store's key; an unknown id is not found.",
)
def replays(s: ApprovalScenario) -> None:
    command = RequestApproval("apr-1", admission("run-1"), "alice")
    s.action_faults(command)
    s.do(command, "applied:requested", fault=CRASH_AFTER)
    s.do(command, "replayed:existing")
    s.reopen()
    s.tick(10)
    s.do(command, "replayed:existing", fault=DUPLICATE)
    s.do(RequestApproval("apr-1", admission("run-1"), "mallory"), "rejected:ACTION_ID_CONFLICT")
    s.do(
        RequestApproval("apr-1", admission("run-1", RETRY), "alice"), "rejected:ACTION_ID_CONFLICT"
    )
    s.do(RequestApproval("apr-1", admission("run-2"), "alice"), "rejected:ACTION_ID_CONFLICT")
    # The Run id is the action's: a second action for the same Run is refused by the key.
    s.do(RequestApproval("apr-2", admission("run-1"), "alice"), "raced:CAS_CONFLICT")
    for other in (ApproveAction("apr-9", "bob"), ClaimAction("apr-9"), ResolveAction("apr-9")):
        s.do(other, "rejected:ACTION_NOT_FOUND")
    s.expect_status("apr-1", "pending")
    if len(s.recorder.adapter.store.actions()) != 1:
        raise ScenarioError("a refused request wrote an action")


@approval_scenario(
    "AA-D1-decisions-replayed-or-refused-once-decided",
    "AA-D1: the same approval replayed is already applied (also after the claim), a second "
    "person's approval or a denial after it is refused as not pending, and a decision is "
    "never moved back by a clock that regressed.",
)
def decisions(s: ApprovalScenario) -> None:
    s.request("apr-1", "run-1")
    s.tick(100)
    approve = ApproveAction("apr-1", "bob")
    s.action_faults(approve)
    s.do(approve, "applied:approved", fault=CRASH_AFTER)
    s.do(approve, "replayed:already_applied")
    s.do(approve, "replayed:already_applied", fault=DUPLICATE)
    s.do(ApproveAction("apr-1", "carol"), "rejected:ACTION_NOT_PENDING")
    s.do(DenyAction("apr-1", "bob"), "rejected:ACTION_NOT_PENDING")
    s.do(DenyAction("apr-1", "carol"), "rejected:ACTION_NOT_PENDING")
    s.do(ClaimAction("apr-1"), "rejected:CLOCK_REGRESSION", at=s.now - 1)
    s.tick(10)
    s.do(ClaimAction("apr-1"), "applied:claimed")
    s.do(approve, "replayed:already_applied")  # the approval stands once claimed
    s.do(DenyAction("apr-1", "bob"), "rejected:ACTION_NOT_PENDING")
    s.expect_status("apr-1", "starting")
    s.expect_runs()


@approval_scenario(
    "AA-D1-crash-after-the-barrier-resolves-failed-never-starts",
    "AA-D1: the dispatcher passed the start barrier and died (its claim's response lost); the "
    "action is due for recovery only; the reconciler finds no Run under its id, the evidence "
    "that it never started, and ends it failed (START_INTERRUPTED) without starting it; a late "
    "start is raced and never admits the Run.",
)
def crash_window(s: ApprovalScenario) -> None:
    s.approved("apr-1", "run-1")
    s.tick(100)
    s.do(ClaimAction("apr-1"), "applied:claimed", fault=CRASH_AFTER)
    s.reopen()
    s.due(DISPATCH, [])
    s.due(RECOVERY, ["apr-1"])
    s.tick(1_000)
    resolve = ResolveAction("apr-1")
    s.action_faults(resolve)
    s.do(resolve, "applied:verified_not_started", fault=CRASH_AFTER)
    s.do(resolve, "raced:NOT_ELIGIBLE")
    s.expect_status("apr-1", "failed", "START_INTERRUPTED")
    s.due(RECOVERY, [])
    s.tick(5)
    s.do(StartAction("apr-1"), "raced:NOT_ELIGIBLE")
    s.do(ClaimAction("apr-1"), "raced:NOT_ELIGIBLE")
    s.reopen()
    s.do(StartAction("apr-1"), "raced:NOT_ELIGIBLE")
    s.expect_runs()


@approval_scenario(
    "AA-D1-resolution-from-the-runs-facts-only",
    "AA-D1: a started action is not the reconciler's (resolve raced); an action behind the "
    "barrier whose Run exists with its ids is verified started without a second admission "
    "(by the reconciler, or by the dispatcher's start); one whose Run id holds another Run "
    "needs a person (manual_required, ACTION_RUN_MISMATCH).",
)
def evidence(s: ApprovalScenario) -> None:
    # Claim, start, then resolve: the start ended the barrier, nothing is left to resolve.
    s.approved("apr-1", "run-1")
    s.tick(10)
    s.do(ClaimAction("apr-1"), "applied:claimed")
    s.do(StartAction("apr-1"), "applied:started")
    s.tick(10)
    s.do(ResolveAction("apr-1"), "raced:NOT_ELIGIBLE")
    s.expect_status("apr-1", "started")
    # The Run under the action's id exists with its ids (admitted by the action's own
    # admission, as a start whose action write was lost would have left it).
    s.approved("apr-2", "run-2")
    s.tick(10)
    s.do(ClaimAction("apr-2"), "applied:claimed")
    s.do(admission("run-2"), "applied")
    s.tick(10)
    resolve = ResolveAction("apr-2")
    s.action_faults(resolve)
    s.do(resolve, "applied:verified_started")
    s.expect_status("apr-2", "started")
    # The dispatcher's start finds the Run too: verified, never admitted twice.
    s.approved("apr-3", "run-3")
    s.tick(10)
    s.do(ClaimAction("apr-3"), "applied:claimed")
    s.do(admission("run-3"), "applied")
    s.tick(10)
    s.do(StartAction("apr-3"), "applied:verified_started")
    s.expect_status("apr-3", "started")
    # Another Run under the action's Run id: a contradiction a person resolves.
    s.approved("apr-4", "run-4")
    s.tick(10)
    s.do(ClaimAction("apr-4"), "applied:claimed")
    s.do(admission("run-4", task_id="another"), "applied")
    s.tick(10)
    s.do(ResolveAction("apr-4"), "applied:evidence_contradicted")
    s.expect_status("apr-4", "manual_required", "ACTION_RUN_MISMATCH")
    s.approved("apr-5", "run-5")
    s.tick(10)
    s.do(ClaimAction("apr-5"), "applied:claimed")
    s.do(admission("run-5", attempt_id="run-5-other"), "applied")
    s.tick(10)
    s.do(StartAction("apr-5"), "applied:evidence_contradicted")
    s.expect_status("apr-5", "manual_required", "ACTION_RUN_MISMATCH")
    s.due(RECOVERY, [])
    s.expect_runs("run-1", "run-2", "run-3", "run-4", "run-5")
    if any(len(s.agg(r).attempts) != 1 for r in s.runs()):
        raise ScenarioError("an action admitted a second Attempt")


@approval_scenario(
    "AA-D1-due-pages-keyset-cursor-and-truncation",
    "AA-D1 (SPEC §5.1, §5.3): both due indexes page in keyset order (time, then action id) "
    "strictly after the cursor, at most `limit` items with has_more while more are due; a "
    "pending, denied, claimed or started action is never due for dispatch, and only claimed "
    "ones are due for recovery.",
)
def due_pages(s: ApprovalScenario) -> None:
    for i in range(1, 8):
        s.request(f"apr-{i}", f"run-{i}")
        s.tick(1)
    s.tick(100)
    decided = s.now
    # Two decisions at the same time: the action id breaks the tie.
    for i in (3, 1, 5, 6, 7):
        s.do(ApproveAction(f"apr-{i}", "bob"), "applied:approved")
        if i != 3:
            s.tick(10)
    s.do(DenyAction("apr-2", "bob"), "applied:denied")  # apr-4 stays pending
    cursor = s.due(DISPATCH, ["apr-1", "apr-3"], has_more=True, limit=2)
    if cursor != (decided, "apr-3"):
        raise ScenarioError(f"the cursor is the last key, got {cursor}")
    cursor = s.due(DISPATCH, ["apr-5", "apr-6"], has_more=True, limit=2, after=cursor)
    last = s.due(DISPATCH, ["apr-7"], limit=2, after=cursor)
    s.due(DISPATCH, [], limit=2, after=last)
    s.due(DISPATCH, ["apr-1", "apr-3", "apr-5", "apr-6", "apr-7"], limit=5)
    s.due(DISPATCH, ["apr-3", "apr-5"], has_more=True, limit=2, after=(decided, "apr-1"))
    # Claims move actions from the dispatch index to the recovery index; a start leaves both.
    s.tick(100)
    claimed = s.now
    for i in (6, 1, 7):
        s.do(ClaimAction(f"apr-{i}"), "applied:claimed")
    s.tick(10)
    s.do(ClaimAction("apr-3"), "applied:claimed")
    s.do(StartAction("apr-7"), "applied:started")
    s.due(DISPATCH, ["apr-5"])
    cursor = s.due(RECOVERY, ["apr-1"], has_more=True, limit=1)
    cursor = s.due(RECOVERY, ["apr-6"], has_more=True, limit=1, after=cursor)
    s.due(RECOVERY, ["apr-3"], limit=1, after=cursor)
    s.due(RECOVERY, ["apr-1", "apr-6", "apr-3"])
    s.due(RECOVERY, ["apr-3"], after=(claimed, "apr-6"))
    s.tick(1_000)
    s.do(ResolveAction("apr-1"), "applied:verified_not_started")
    s.do(StartAction("apr-6"), "applied:started")
    s.due(RECOVERY, ["apr-3"])
    s.due(DISPATCH, ["apr-5"])
    s.expect_runs("run-6", "run-7")


@approval_scenario(
    "AA-D1-refused-admission-at-request-is-rejected",
    "AA-D1 (A-1..A-5 at request time): a request whose admission the Run kernel refuses is "
    "rejected with the Run kernel's code and writes nothing, so an approved action can always "
    "be admitted; a policy brought inside the admission's own arguments is refused by strict "
    "decoding (A-1) before any store sees it.",
)
def refused(s: ApprovalScenario) -> None:
    bad = PolicyDefinition(0, True, Safety.IDEMPOTENT, 1_000, 60_000)
    s.request("apr-1", "run-1", policy=bad, expect="rejected:INVALID_RUN_RETRY_POLICY")
    unsafe = PolicyDefinition(3, True, Safety.UNKNOWN, 1_000, 60_000)
    s.request("apr-2", "run-2", policy=unsafe, expect="rejected:RUN_RETRY_POLICY_UNSAFE")
    args = {
        "action_id": "apr-3",
        "requested_by": "alice",
        "admission": {
            "run_id": "run-3",
            "attempt_id": "run-3-a1",
            "project_id": "project",
            "task_id": "task",
            "task_revision": 1,
            "executor_type": EXECUTOR,
            "max_attempts": 3,
        },
    }
    s.raw("request_approval", args, "rejected:RUN_RETRY_POLICY_NOT_ADMISSIBLE")
    if s.recorder.adapter.store.actions():
        raise ScenarioError("a refused request wrote an action")
    s.request("apr-4", "run-4", policy=RETRY)
    s.expect_status("apr-4", "pending")


# -- seeded random traces ----------------------------------------------------------------------
def random_approvals(seed: int) -> Trace:
    """2..4 actions driven by random commands (each eligible or not), with random lost
    responses, reopens, duplicates and due pages, until every action is final (or 60 steps)."""
    rng = random.Random(seed)
    count = rng.randint(2, 4)
    name = f"random-{seed}"
    s = ApprovalScenario(name, f"AA-D1: {count} random approval requests, seed {seed}")
    s.recorder.header = dataclasses.replace(s.recorder.header, seed=seed)
    ids = [f"apr-{i}" for i in range(1, count + 1)]
    for action_id in ids:
        s.request(action_id, action_id.replace("apr-", "run-"), expect=None)
        s.tick(rng.choice((1, 10)))
    for _ in range(60):
        s.tick(rng.choice((1, 10, 100)))
        live = [a for a in s.recorder.adapter.store.actions() if not a.status.final]
        if not live:
            break
        roll = rng.random()
        if roll < 0.15:
            source = rng.choice((DISPATCH, RECOVERY))
            s.recorder.page(SourceQuery(source, rng.randint(1, 3)), s.now)
            continue
        target = rng.choice(live).action_id
        person = rng.choice(("bob", "carol"))
        menu: list[ActionCommand] = [
            ApproveAction(target, person),
            ApproveAction(target, person),
            DenyAction(target, person),
            ClaimAction(target),
            StartAction(target),
            StartAction(target),
            ResolveAction(target),
        ]
        command = rng.choice(menu)
        if roll < 0.22:
            s.reopen()
        fault = None
        if roll > 0.85:
            fault = rng.choice((CRASH_AFTER, CRASH_BEFORE, DUPLICATE))
        s.do(command, None, fault=fault)
    # At most one Run per action, each admitted with the action's own ids.
    for action in s.recorder.adapter.store.actions():
        if action.run_id in s.runs() and len(s.agg(action.run_id).attempts) != 1:
            raise ScenarioError(f"{name}: {action.run_id} admitted twice")
    return s.trace()


def generated() -> Iterator[tuple[str, Trace]]:
    for seed in GENERATED_SEEDS:
        yield f"generated/random-{seed}.jsonl.gz", random_approvals(seed)


def named() -> Iterator[tuple[str, Trace]]:
    for name, build in APPROVAL_SCENARIOS.items():
        yield f"{name}.jsonl", build()
