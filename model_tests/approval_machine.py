"""A Hypothesis model of the approval domain on a real edge SQLite file: at most one start across
crashes (issue 19 item 4, second half; decision AA-D1; `kernel/specs/approved_action.py`).

The system under model is the real edge store (`runners.edge.store.EdgeStore`, migration 0004)
on a file in a temporary directory made per machine run, driven the way the application drives
it: approval requests through `runners.local.schedule.submit` for a task that requires approval,
decisions through `runners.engine.execute_action`, and the two ports through
`runners.local.approvals.EdgeApprovalPorts` (one call, or a whole supervisor cycle through the
real `ApprovedActionRuntimeSupervisor` with the edge profile's budgets). A fake clock moves only
when a rule says so, so ties in the due indexes' keys are common.

Setup: the file, two tasks that require approval, and one to four requests, some approved.
Rules: request (a new request, or the exact replay of the last one), approve and deny (by one
of two people; also after the decision), a dispatch page (page size 1-4, from the start or
from the last page's cursor), a dispatch page that crashes behind the barrier (the `between`
hook raises `Crash`, a `BaseException` like `SystemExit`, at one committed claim of the page,
so the rest of the page is abandoned; then the process "restarts": the store is closed and a
new `EdgeStore` opened on the file), a reconcile page, a supervisor cycle, and a clock step
that may restart the process (a new store and a new supervisor: the resume cursors start
empty).

A reference model (`Ref` per action: status, decision, barrier time, code) is kept from the SPEC
text, not from the kernel: a dispatch page claims and starts the due `approved` actions in
`(decided_at_ms, action_id)` order strictly after its cursor, a reconcile page fails the due
`starting` ones in `(claimed_at_ms, action_id)` order (no Run in this model is admitted but by
a start, so the evidence always says "never started": START_INTERRUPTED).

Invariants after every step; a `ModelViolation` message names what broke:
- the store's actions are the reference's (status, who decided, code), and each keeps
  `check_action_invariants` with the Run under its id (AA-I1..AA-I5);
- a Run exists iff its action is `started` (the backdoor projection; `manual_required` never
  happens here), and each Run is the action's own admission;
- at most one Run per action and each Run admitted once: exactly one `run.queued` Event;
- at most one `action.claimed` and one `action.started` Event per action (the barrier is passed
  once), and an action's Events are numbered 1..version;
- a denied action never has a Run;
- an action that crashed behind the barrier is never started: it stays `starting` until a
  reconcile page or cycle resolves it `failed` with START_INTERRUPTED, and no later dispatch
  page touches it.

Running it: `ApprovalMachine.TestCase` with `approval_settings()` (budgets per Hypothesis
profile in `APPROVAL_BUDGETS`). No trace is recorded: like the Workflow and supervisor models,
the system under model is not the conformance reference store.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kernel.approved_action import (
    ActionApplied,
    ActionCursor,
    ApproveAction,
    DenyAction,
    DispatchPage,
    RecoveryPage,
    check_action_invariants,
    local_primary_resource_policy,
    run_matches,
)
from kernel.outcomes import Rejected, Replayed
from kernel.specs.approved_action import ActionEventType, ActionStatus
from kernel.specs.codes import Code
from kernel.task import TaskDefinition, define_task
from model_tests.harness import STATS, ModelViolation, require
from model_tests.machines import Budget, budget_settings
from runners.approved_action import ApprovedActionRuntimeSupervisor
from runners.edge.store import EdgeStore
from runners.edge.tasks import EdgeTaskStore, TaskWrite
from runners.engine import execute_action
from runners.local.approvals import EdgeApprovalPorts
from runners.local.schedule import submit

__all__ = [
    "APPROVAL_BUDGETS",
    "NAME",
    "REACHED",
    "ApprovalMachine",
    "Crash",
    "ModelViolation",
    "approval_settings",
]

NAME: Final = "approval"
T0: Final = 1_700_000_000_000
TASKS: Final = ("gated-a", "gated-b")
PEOPLE: Final = ("ann", "bob")
PROFILE: Final = "edge"
#: At most this many requests per machine run (each costs a few fsyncs on the real file).
MAX_REQUESTS: Final = 10

APPROVAL_BUDGETS: Final[Mapping[str, Budget]] = {
    # ci: deterministic (derandomized); a real SQLite file per run, a few ms per step.
    "ci": Budget(60, 30),
    "dev": Budget(60, 30),
    "deep": Budget(1_000, 60),
}

#: What the machine runs of this process reached (the figures test requires each to be > 0).
REACHED: Counter[str] = Counter()


def approval_settings(profile: str | None = None) -> settings:
    """The active Hypothesis profile's settings with this machine's budget."""
    name = profile if profile is not None else settings.get_current_profile_name()
    return budget_settings(APPROVAL_BUDGETS.get(name, APPROVAL_BUDGETS["ci"]), profile)


class Crash(BaseException):
    """The process dies here (raised by the `between` hook, like `SystemExit`: no `except
    Exception` in the runner swallows it)."""


@dataclass
class Ref:
    """The reference model of one action (written from the SPEC text, not the kernel)."""

    action_id: str
    run_id: str
    attempt_id: str
    task: str
    requested_by: str
    status: ActionStatus = ActionStatus.PENDING
    decided_by: str | None = None
    decided_at_ms: int | None = None
    claimed_at_ms: int | None = None
    code: str | None = None
    crashed: bool = False  # a crash left it behind the barrier


def _keys(
    refs: Mapping[str, Ref], status: ActionStatus, after: ActionCursor | None
) -> list[tuple[int, str]]:
    """The due keys of `status` strictly after `after`, in keyset order (the reference)."""
    out: list[tuple[int, str]] = []
    for ref in refs.values():
        if ref.status is not status:
            continue
        at = ref.decided_at_ms if status is ActionStatus.APPROVED else ref.claimed_at_ms
        assert at is not None
        key = (at, ref.action_id)
        if after is None or key > (after.at_ms, after.action_id):
            out.append(key)
    return sorted(out)


class ApprovalMachine(RuleBasedStateMachine):
    """See the module docstring. `PORTS` is the ports class (the planted-bug test replaces it:
    `ApprovalMachine.configured(PORTS=...)`)."""

    PORTS: ClassVar[type[EdgeApprovalPorts]] = EdgeApprovalPorts

    def __init__(self) -> None:
        super().__init__()
        self.ready = False
        self.now = T0
        self.refs: dict[str, Ref] = {}
        self.serial = 0
        self._tmp: Path | None = None
        self.db = Path()
        self.store: EdgeStore | None = None
        self.tasks: EdgeTaskStore | None = None
        self.supervisor: ApprovedActionRuntimeSupervisor | None = None
        self.dispatch_cursor: ActionCursor | None = None
        self.counts = STATS.of(NAME)
        self.counts.instances += 1

    @classmethod
    def configured(cls, **knobs: object) -> type[ApprovalMachine]:
        unknown = sorted(k for k in knobs if not k.isupper() or not hasattr(cls, k))
        if unknown:
            raise TypeError(f"{cls.__name__} has no knob(s) {unknown}")
        return type(f"{cls.__name__}Configured", (cls,), dict(knobs))

    # -- the process ----------------------------------------------------------------------------
    @initialize(decisions=st.lists(st.sampled_from([None, *PEOPLE]), min_size=1, max_size=4))
    def setup(self, decisions: list[str | None]) -> None:
        """The file, the tasks that require approval, and a first few requests, each approved by
        the person drawn (None: left pending), so that the rules have material at once."""
        self._tmp = Path(tempfile.mkdtemp(prefix="ql3-approval-model-"))
        self.db = self._tmp / "ql3.db"
        self.ready = True
        self._open()
        assert self.tasks is not None
        for name in TASKS:
            definition = define_task(name, ["true"], requires_approval=True)
            assert isinstance(definition, TaskDefinition), definition
            assert isinstance(self.tasks.add(definition, self.now), TaskWrite)
        for i, person in enumerate(decisions):
            self.request(TASKS[i % len(TASKS)], PEOPLE[i % len(PEOPLE)], replay=False)
            if person is not None:
                self.decide(len(self.refs) - 1, person, approve=True)

    def _open(self) -> None:
        """A new process on the file: a new store, and a new supervisor (empty cursors)."""
        self.store = EdgeStore(self.db)
        self.tasks = EdgeTaskStore(self.store)
        config = local_primary_resource_policy(PROFILE).to_config()
        ports = self._ports()
        self.supervisor = ApprovedActionRuntimeSupervisor(ports, ports, config)
        self.dispatch_cursor = None

    def _close(self) -> None:
        if self.store is not None:
            self.store.close()
        self.store = self.tasks = self.supervisor = None

    def _ports(self, between: Callable[[str], None] | None = None) -> EdgeApprovalPorts:
        assert self.store is not None
        return self.PORTS(self.store, lambda: self.now, between=between)

    def _step(self) -> None:
        self.counts.steps += 1

    # -- rules ------------------------------------------------------------------------------------
    @precondition(lambda self: self.ready)
    @rule(task=st.sampled_from(TASKS), person=st.sampled_from(PEOPLE), replay=st.booleans())
    def request(self, task: str, person: str, replay: bool) -> None:
        """A submission of a task that requires approval: a `pending` request; with `replay`
        (or once `MAX_REQUESTS` were made), the last submission again, same ids and person:
        `Replayed`, nothing written."""
        assert self.store is not None
        assert self.tasks is not None
        self._step()
        self.counts.commands += 1
        if self.refs and (replay or len(self.refs) >= MAX_REQUESTS):
            ref = list(self.refs.values())[-1]
            again = submit(
                self.store, self.tasks, ref.task, now_ms=self.now, run_id=ref.run_id,
                attempt_id=ref.attempt_id, requested_by=ref.requested_by,
            )  # fmt: skip
            require(again == Replayed(Code.EXISTING), "request", f"replay gave {again}")
            REACHED["replayed_request"] += 1
            return
        self.serial += 1
        run_id, attempt_id = f"run-{self.serial:032x}", f"att-{self.serial:032x}"
        outcome = submit(
            self.store, self.tasks, task, now_ms=self.now, run_id=run_id,
            attempt_id=attempt_id, requested_by=person,
        )  # fmt: skip
        require(isinstance(outcome, ActionApplied), "request", f"not applied: {outcome}")
        assert isinstance(outcome, ActionApplied)
        action_id = outcome.action.action_id
        require(action_id not in self.refs, "request", "an action id was reused")
        self.refs[action_id] = Ref(action_id, run_id, attempt_id, task, person)
        REACHED["request"] += 1

    @precondition(lambda self: self.ready and bool(self.refs))
    @rule(pick=st.integers(0, MAX_REQUESTS - 1), person=st.sampled_from(PEOPLE),
          approve=st.booleans())  # fmt: skip
    def decide(self, pick: int, person: str, approve: bool) -> None:
        """A person approves or denies (`qlk approve` / `qlk deny`), in any status."""
        assert self.store is not None
        self._step()
        ref = self._pick(pick)
        command = (ApproveAction if approve else DenyAction)(ref.action_id, person)
        outcome = execute_action(self.store, command, self.now)
        self.counts.commands += 1
        target = ActionStatus.APPROVED if approve else ActionStatus.DENIED
        if ref.status is ActionStatus.PENDING:
            require(isinstance(outcome, ActionApplied), "decide", f"{command}: {outcome}")
            ref.status, ref.decided_by, ref.decided_at_ms = target, person, self.now
            REACHED["approved" if approve else "denied"] += 1
            return
        # After the decision: the same decision by the same person is a replay (also past the
        # barrier for an approval); anything else is refused. Nothing is written either way.
        same = ref.decided_by == person and (
            ref.status is target or (approve and ref.claimed_at_ms is not None)
        )
        expected = Replayed(Code.ALREADY_APPLIED) if same else Rejected(Code.ACTION_NOT_PENDING)
        require(outcome == expected, "decide", f"{command} on {ref.status}: {outcome}")
        REACHED["decision_replayed" if same else "decision_refused"] += 1

    @precondition(lambda self: self.ready)
    @rule(page_size=st.integers(1, 4), resume=st.booleans())
    def dispatch(self, page_size: int, resume: bool) -> None:
        """One dispatch page (`dispatch_batch`): claim, then start, each due `approved` one."""
        self._step()
        cursor = self.dispatch_cursor if resume else None
        due = _keys(self.refs, ActionStatus.APPROVED, cursor)
        page = self._ports().dispatch_batch(cursor, page_size)
        self._check_dispatch(page, due, page_size)
        for _at, action_id in due[:page_size]:
            self._started(action_id)
        self.dispatch_cursor = page.next_cursor if page.truncated else None
        if any(r.crashed for r in self.refs.values()):
            REACHED["dispatch_after_crash"] += 1

    @precondition(
        lambda self: (
            self.ready and any(r.status is ActionStatus.APPROVED for r in self.refs.values())
        )
    )
    @rule(page_size=st.integers(1, 4), k=st.integers(1, 4))
    def crash_behind_barrier(self, page_size: int, k: int) -> None:
        """A dispatch page whose process dies after one of its committed claims (the k-th,
        counted round the page), before that start; then the process restarts on the file."""
        self._step()
        due = _keys(self.refs, ActionStatus.APPROVED, None)[:page_size]
        k = (k - 1) % len(due) + 1
        calls: list[str] = []

        def between(action_id: str) -> None:
            calls.append(action_id)
            if len(calls) == k:
                raise Crash(action_id)

        crashed: str | None = None
        try:
            self._ports(between).dispatch_batch(None, page_size)
        except Crash as crash:
            crashed = str(crash.args[0])
        require(calls == [a for _at, a in due[: len(calls)]], "dispatch", f"order {calls}")
        for _at, action_id in due[: len(calls)]:
            if action_id == crashed:
                ref = self.refs[action_id]
                ref.status, ref.claimed_at_ms, ref.crashed = ActionStatus.STARTING, self.now, True
                REACHED["crashed_behind_barrier"] += 1
            else:
                self._started(action_id)
        require(crashed == due[k - 1][1], "crash", f"{crashed} for {len(due)} due, k={k}")
        self._close()
        self._open()

    @precondition(lambda self: self.ready)
    @rule(page_size=st.integers(1, 4))
    def reconcile(self, page_size: int) -> None:
        """One recovery page (`reconcile_batch`): resolve each `starting` one from evidence."""
        self._step()
        due = _keys(self.refs, ActionStatus.STARTING, None)
        page = self._ports().reconcile_batch(None, page_size)
        self._check_recovery(page, due, page_size)
        for _at, action_id in due[:page_size]:
            self._interrupted(action_id)

    @precondition(lambda self: self.ready)
    @rule(tick=st.booleans())
    def supervisor_cycle(self, tick: bool) -> None:
        """One cycle of the real supervisor (recovery, then dispatch) with its resume cursors,
        `tick`: a millisecond later than the last step."""
        assert self.supervisor is not None
        self._step()
        self.now += int(tick)
        config = self.supervisor.config
        cursors = self.supervisor.cursors
        recovered = self._phase_keys(ActionStatus.STARTING, cursors.recovery, config.recovery)
        for action_id in recovered:
            self._interrupted(action_id)
        started = self._phase_keys(ActionStatus.APPROVED, cursors.dispatch, config.dispatch)
        summary = self.supervisor.run_cycle()
        for action_id in started:
            self._started(action_id)
        require(
            summary.recovery.counters.verified_failed == len(recovered),
            "cycle", f"recovery {summary.recovery} for {len(recovered)}",
        )  # fmt: skip
        require(
            summary.dispatch.counters.started == len(started),
            "cycle", f"dispatch {summary.dispatch} for {len(started)}",
        )  # fmt: skip
        REACHED["supervisor_cycle"] += 1

    @precondition(lambda self: self.ready)
    @rule(ms=st.sampled_from([0, 1, 7]), restart=st.booleans())
    def advance_clock(self, ms: int, restart: bool) -> None:
        """Time passes; with `restart`, the process stops and starts again on the same file (a
        new store and supervisor)."""
        self._step()
        self.now += ms
        if restart:
            self._close()
            self._open()
            REACHED["restart"] += 1

    # -- expectations -----------------------------------------------------------------------------
    def _pick(self, pick: int) -> Ref:
        refs = list(self.refs.values())
        return refs[pick % len(refs)]

    def _phase_keys(
        self, status: ActionStatus, resume: ActionCursor | None, budget: Any
    ) -> list[str]:
        """The ids one phase of a cycle resolves: pages of `page_size` from the resume cursor
        while truncated, at most `max_pages` (§5.3, read from the SPEC)."""
        out: list[str] = []
        cursor = resume
        for _ in range(budget.max_pages):
            due = _keys(self.refs, status, cursor)
            page = due[: budget.page_size]
            out += [action_id for _at, action_id in page]
            if len(due) <= budget.page_size or not page:
                break
            cursor = ActionCursor(*page[-1])
        return out

    def _check_dispatch(
        self, page: DispatchPage, due: list[tuple[int, str]], page_size: int
    ) -> None:
        taken = due[:page_size]
        n = len(taken)
        c = page.counters
        require(
            (c.scanned, c.claimed, c.started) == (n, n, n),
            "dispatch", f"{c} for {n} due",
        )  # fmt: skip
        require(page.truncated == (len(due) > page_size), "dispatch", f"truncated {page}")
        expected = ActionCursor(*taken[-1]) if taken else None
        require(page.next_cursor == expected, "dispatch", f"cursor {page.next_cursor}")
        REACHED["dispatched"] += n

    def _check_recovery(
        self, page: RecoveryPage, due: list[tuple[int, str]], page_size: int
    ) -> None:
        n = min(len(due), page_size)
        c = page.counters
        require((c.scanned, c.verified_failed) == (n, n), "reconcile", f"{c} for {n} due")
        require(page.truncated == (len(due) > page_size), "reconcile", f"truncated {page}")

    def _started(self, action_id: str) -> None:
        ref = self.refs[action_id]
        require(not ref.crashed, "at-most-once", f"{action_id} crashed behind the barrier")
        ref.status, ref.claimed_at_ms = ActionStatus.STARTED, self.now
        REACHED["started"] += 1

    def _interrupted(self, action_id: str) -> None:
        ref = self.refs[action_id]
        ref.status, ref.code = ActionStatus.FAILED, Code.START_INTERRUPTED.value
        REACHED["interrupted_failed"] += 1

    # -- invariants -------------------------------------------------------------------------------
    @precondition(lambda self: self.ready)
    @invariant()
    def the_store_is_the_reference_and_keeps_the_invariants(self) -> None:
        assert self.store is not None
        for ref in self.refs.values():
            self.counts.invariant_checks += 1
            with self.store.transaction() as tx:
                loaded = tx.load_action(ref.action_id)
            require(loaded is not None, "store", f"{ref.action_id} is missing")
            assert loaded is not None
            action = loaded.action
            got = (action.status, action.decided_by, action.code)
            want = (ref.status, ref.decided_by, ref.code)
            require(got == want, "reference", f"{ref.action_id}: store {got}, model {want}")
            if ref.claimed_at_ms is not None:
                require(action.claimed_at_ms == ref.claimed_at_ms, "reference", "barrier time")
            violations = check_action_invariants(action, loaded.run, with_run=True)
            require(not violations, "AA-I", f"{[str(v) for v in violations]}")
            if loaded.run is not None:
                require(run_matches(action, loaded.run), "run", "the Run is another Run")

    @precondition(lambda self: self.ready)
    @invariant()
    def a_run_exists_iff_started_and_was_admitted_once(self) -> None:
        assert self.store is not None
        self.counts.invariant_checks += 1
        projection = self.store.project()
        runs = {row["run_id"]: row for row in projection["runs"]}
        queued = Counter(e["run_id"] for e in projection["events"] if e["type"] == "run.queued")
        by_action: dict[str, list[dict[str, Any]]] = {}
        for event in projection.get("action_events", []):
            by_action.setdefault(str(event["action_id"]), []).append(event)
        for ref in self.refs.values():
            has_run = ref.run_id in runs
            started = ref.status is ActionStatus.STARTED
            require(
                has_run == started, "at-most-once", f"{ref.action_id} {ref.status} run {has_run}"
            )
            if ref.status is ActionStatus.DENIED:
                require(not has_run, "at-most-once", "a denied action has a Run")
            if ref.crashed:
                require(
                    ref.status in (ActionStatus.STARTING, ActionStatus.FAILED) and not has_run,
                    "at-most-once", f"{ref.action_id} crashed, then {ref.status}",
                )  # fmt: skip
            if has_run:
                require(queued[ref.run_id] == 1, "at-most-once", f"{queued[ref.run_id]} queued")
                row = runs[ref.run_id]
                require(row["task_id"] == ref.task, "run", "the Run of another task")
            events = sorted(by_action.get(ref.action_id, []), key=lambda e: int(e["seq"]))
            types = Counter(str(e["type"]) for e in events)
            require(types[ActionEventType.CLAIMED.value] <= 1, "barrier", "claimed twice")
            require(types[ActionEventType.STARTED.value] <= 1, "barrier", "started twice")
            require(
                [int(e["seq"]) for e in events] == list(range(1, len(events) + 1)),
                "events", f"{ref.action_id} seqs",
            )  # fmt: skip
            decided = [e for e in events if e["type"] in ("action.approved", "action.denied")]
            require(
                [e["by"] for e in decided] == ([ref.decided_by] if ref.decided_by else []),
                "events", f"{ref.action_id} decided by {decided}",
            )  # fmt: skip
        require(set(runs) <= {r.run_id for r in self.refs.values()}, "run", "a stray Run")
        require(all(n == 1 for n in queued.values()), "at-most-once", "a Run queued twice")

    def teardown(self) -> None:
        if not self.ready:
            return
        self.ready = False
        with contextlib.suppress(Exception):
            self._close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
