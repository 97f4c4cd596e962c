"""The schedule phase's decisions (TK-6, TK-9..TK-13), driven against an in-memory world.

The world below plays the runner: it keeps the bookkeeping rows, iterates "every k minutes" cron
expressions by arithmetic (the real runner asks croniter), claims with a compare-and-set on the
row's version, admits through the kernel's own `admit_run` (an existing Run id is an exact
replay), and records the outcome. Hypothesis interleaves cycles at random times and budgets,
crashes between the steps of a fire, edits, removals and stale plans (a second scheduler), and
checks: never a fire twice, only the latest missed fire, never a fire from before the schedule,
at most the budget per cycle, and in the end every schedule's latest fire admitted."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import Applied, Outcome, Raced, Rejected, Replayed, admit_run
from kernel.specs import BUDGETS, Code, Profile
from kernel.task import (
    FireKind,
    FirePlan,
    FireRecord,
    FireState,
    ScheduleCandidate,
    ScheduleState,
    TaskDefinition,
    TaskRemoved,
    TaskRevision,
    TaskState,
    TaskUnchanged,
    claim_fire,
    decide_fires,
    define_task,
    fire_attempt_id,
    fire_command,
    fire_run_id,
    refreshed_schedule,
    remove_task,
    resolve_fire,
    resolved_schedule,
    revise_task,
    schedule_after_removal,
    schedule_after_revision,
)

MIN = 60_000
T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z, a whole hour


def cron_every(k: int) -> str:
    return "* * * * *" if k == 1 else f"*/{k} * * * *"


def period_ms(cron: str) -> int:
    head = cron.split(maxsplit=1)[0]
    return MIN if head == "*" else int(head[2:]) * MIN


def latest(cron: str, now: int) -> int:
    return now // period_ms(cron) * period_ms(cron)


def first_after(cron: str, t: int) -> int:
    return (t // period_ms(cron) + 1) * period_ms(cron)


def definition(name: str, k: int | None, variant: int = 0) -> TaskDefinition:
    made = define_task(name, ["/bin/true", str(variant)], cron=None if k is None else cron_every(k))
    assert isinstance(made, TaskDefinition)
    return made


@dataclass
class World:
    now: int = T0
    tasks: dict[str, TaskState] = field(default_factory=dict)
    revisions: dict[tuple[str, int], TaskRevision] = field(default_factory=dict)
    schedules: dict[str, ScheduleState] = field(default_factory=dict)
    runs: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    created: Counter[tuple[str, int]] = field(default_factory=Counter)  # (task, fire) -> Runs

    # -- qlk task add / remove ------------------------------------------------------------
    def add(self, d: TaskDefinition) -> None:
        decision = revise_task(self.tasks.get(d.name), d, self.now)
        if isinstance(decision, TaskUnchanged):
            return
        self.tasks[d.name] = decision.state
        self.revisions[(d.name, decision.revision.revision)] = decision.revision
        first = None if d.cron is None else first_after(d.cron, self.now)
        new = schedule_after_revision(self.schedules.get(d.name), decision, first)
        if new is not None:
            self.schedules[d.name] = new

    def remove(self, name: str) -> None:
        decision = remove_task(self.tasks.get(name), self.now)
        if isinstance(decision, TaskRemoved):
            self.tasks[name] = decision.state
            new = schedule_after_removal(self.schedules.get(name))
            if new is not None:
                self.schedules[name] = new

    # -- the store ------------------------------------------------------------------------
    def cas(self, new: ScheduleState, expected_version: int) -> bool:
        if self.schedules[new.task].version != expected_version:
            return False
        self.schedules[new.task] = new
        return True

    def admit(self, fire: FirePlan) -> Outcome:
        """The engine's admission: the kernel's `admit_run`; an existing Run id is an exact
        replay (as `admit_run` answers for the same identity)."""
        command = fire_command(fire, self.revisions[(fire.task, fire.revision)])
        identity = (fire.task, fire.revision, fire.fire_at_ms)
        if fire.run_id in self.runs:
            assert self.runs[fire.run_id] == identity
            return Replayed(Code.EXISTING)
        outcome = admit_run(None, command, self.now)
        assert isinstance(outcome, Applied)
        self.runs[fire.run_id] = identity
        self.created[(fire.task, fire.fire_at_ms)] += 1
        return outcome

    # -- one cycle --------------------------------------------------------------------------
    def cycle(
        self,
        budget: int,
        crash: tuple[int, str] | None = None,
        between: Callable[[], None] | None = None,
    ) -> int:
        due = sorted(
            (s for s in self.schedules.values() if s.next_due_ms is not None),
            key=lambda s: (s.next_due_ms, s.task),
        )
        due = [s for s in due if s.next_due_ms is not None and s.next_due_ms <= self.now][:budget]
        candidates = [
            ScheduleCandidate(
                s,
                self.tasks[s.task].current.revision,
                None if s.cron is None else latest(s.cron, self.now),
            )
            for s in due
        ]
        plan = decide_fires(candidates, budget)
        assert len(plan.fires) + len(plan.refreshes) <= budget
        by_task = {s.task: s for s in due}
        for fire in plan.fires:
            state = by_task[fire.task]
            if fire.kind is FireKind.NEW:
                # Only the latest cron time <= now, after the anchor, with the current revision.
                assert state.cron is not None
                assert fire.fire_at_ms == latest(state.cron, self.now)
                assert fire.fire_at_ms > state.anchor_ms >= state.since_ms
                assert fire.revision == self.tasks[fire.task].current.revision
        if between is not None:
            between()  # a concurrent edit: this plan is now stale
        for index, fire in enumerate(plan.fires):
            state = by_task[fire.task]
            claimed = state
            if fire.kind is FireKind.NEW:
                claimed = claim_fire(state, fire)
                if not self.cas(claimed, fire.expected_version):
                    continue  # lost the claim: skip
            if crash == (index, "claimed"):
                return len(plan.fires)
            outcome = self.admit(fire)
            if crash == (index, "admitted"):
                return len(plan.fires)
            resolution = resolve_fire(fire, claimed.since_ms, outcome)
            assert resolution is not None
            cron = claimed.cron
            next_due = None if cron is None else first_after(cron, resolution.anchor_ms)
            self.cas(resolved_schedule(claimed, resolution, next_due), resolution.expected_version)
        for item in plan.refreshes:
            state = by_task[item.task]
            next_due = None if state.cron is None else first_after(state.cron, item.anchor_ms)
            self.cas(refreshed_schedule(state, item, next_due), item.expected_version)
        return len(plan.fires)


NAMES = ("a", "b", "c")
# Crashes first: Hypothesis leans to the first choices, and the crash windows are the point.
CRASH = st.sampled_from([(0, "admitted"), (0, "claimed"), (1, "admitted"), (1, "claimed"), None])
# Time steps: mostly around a minute, so that cycles meet fresh fires, sometimes an outage.
STEPS = st.sampled_from([0, 1, 30_000, MIN, MIN + 1, 2 * MIN, 3 * MIN, 61 * MIN]) | st.integers(
    0, 7 * MIN
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("cycle"), STEPS, st.integers(1, 4), CRASH),
        # k = 0: keep the task's own cron (a new revision of the same schedule, TK-11)
        st.tuples(
            st.just("edit"),
            st.sampled_from(NAMES),
            st.none() | st.integers(0, 3),
            st.integers(0, 3),
        ),
        st.tuples(st.just("remove"), st.sampled_from(NAMES)),
        st.tuples(st.just("stale"), STEPS, st.sampled_from(NAMES)),
    ),
    min_size=5,
    max_size=60,
)


@given(ops=OPS, start=st.integers(0, 10 * MIN))
def test_fires_are_admitted_once_latest_only_never_before_their_schedule(
    ops: list[tuple[Any, ...]], start: int
) -> None:
    world = World(now=T0 + start)
    for index, name in enumerate(NAMES):
        world.add(definition(name, index + 1))
    for op in ops:
        kind = op[0]
        if kind == "cycle":
            _, dt, budget, crash = op
            world.now += dt
            world.cycle(budget, crash)
        elif kind == "edit":
            _, name, k, variant = op
            world.now += 1
            world.add(definition(name, 1 + NAMES.index(name) if k == 0 else k, variant))
        elif kind == "remove":
            world.now += 1
            world.remove(op[1])
        else:
            _, dt, name = op
            world.now += dt
            k = 1 + NAMES.index(name)

            def edit(name: str = name, k: int = k) -> None:
                world.add(definition(name, 1 + k % 3, variant=7))

            world.cycle(2, between=edit)
        # Never a fire twice, across revisions and crashes.
        assert all(count == 1 for count in world.created.values()), world.created
    # Every fire is after its schedule started (TK-9): no Run of a fire at or before the
    # first revision of its task.
    first_added = {name: world.revisions[(name, 1)].created_at_ms for name in NAMES}
    for task, _revision, fire in world.runs.values():
        assert fire > first_added[task]
    # Liveness: once cycles run without crashes at one time, nothing stays claimed and each
    # active schedule's latest fire after its start has a Run.
    for _ in range(len(NAMES) + 1):
        world.cycle(len(NAMES))
    for name, state in world.schedules.items():
        if state.next_due_ms is None:
            continue
        assert state.cron is not None
        assert state.next_due_ms > world.now
        assert state.last_fire is None or state.last_fire.state is not FireState.CLAIMED
        fire = latest(state.cron, world.now)
        if fire > state.since_ms:
            assert (name, fire) in world.created


def test_the_first_cycle_after_add_never_fires_before_the_task_existed() -> None:
    """TK-9: added one millisecond after a fire time, the task's first fire is the next one;
    added exactly on a fire time, that fire is not after the add either."""
    for added in (T0 + 1, T0):
        world = World(now=added)
        world.add(definition("a", 1))
        assert world.schedules["a"].next_due_ms == T0 + MIN
        world.now = T0 + MIN - 1
        assert world.cycle(4) == 0
        world.now = T0 + MIN
        assert world.cycle(4) == 1
        assert set(world.created) == {("a", T0 + MIN)}


def test_after_downtime_only_the_latest_missed_fire_is_admitted() -> None:
    """TK-10: the process was down for an hour; one fire, the latest, and none of the others."""
    world = World(now=T0 - 1)
    world.add(definition("a", 1))
    world.now = T0 + 60 * MIN + 30_000
    assert world.cycle(4) == 1
    assert set(world.created) == {("a", T0 + 60 * MIN)}
    assert world.cycle(4) == 0  # and not again
    world.now += MIN
    assert world.cycle(4) == 1


def test_a_crash_after_admission_is_resumed_as_an_exact_replay() -> None:
    world = World(now=T0 - 1)
    world.add(definition("a", 1))
    world.now = T0 + 1
    world.cycle(4, crash=(0, "admitted"))
    assert world.schedules["a"].last_fire == FireRecord(T0, 1, FireState.CLAIMED)
    assert world.schedules["a"].next_due_ms == T0  # still due: the claim is resumed
    world.add(definition("a", 1, variant=1))  # an edit while "down": revision 2, same cron
    world.now = T0 + MIN + 1  # a newer fire is due too, but the claim goes first
    due = world.schedules["a"]
    plan = decide_fires([ScheduleCandidate(due, 2, T0 + MIN)], 4)
    assert [(f.kind, f.revision, f.fire_at_ms) for f in plan.fires] == [(FireKind.RESUME, 1, T0)]
    world.cycle(4)
    assert world.schedules["a"].last_fire == FireRecord(T0, 1, FireState.ADMITTED)
    world.cycle(4)  # the next fire, with the new revision
    assert world.created == Counter({("a", T0): 1, ("a", T0 + MIN): 1})
    assert world.runs[fire_run_id("a", 2, T0 + MIN)] == ("a", 2, T0 + MIN)


def test_outcomes_are_recorded_by_kind() -> None:
    plan = decide_fires(
        [ScheduleCandidate(ScheduleState("a", "* * * * *", 0, MIN, None, 4), 2, 5 * MIN)], 1
    ).fires[0]
    assert plan.kind is FireKind.NEW
    assert plan.expected_version == 4
    assert (plan.run_id, plan.attempt_id) == (
        fire_run_id("a", 2, 5 * MIN),
        fire_attempt_id("a", 2, 5 * MIN),
    )
    expected: dict[Outcome, FireRecord] = {
        Replayed(Code.EXISTING): FireRecord(5 * MIN, 2, FireState.ADMITTED),
        Rejected(Code.RUN_ID_CONFLICT): FireRecord(
            5 * MIN, 2, FireState.REFUSED, Code.RUN_ID_CONFLICT
        ),
    }
    for outcome, record in expected.items():
        resolution = resolve_fire(plan, 0, outcome)
        assert resolution is not None
        assert (resolution.record, resolution.expected_version, resolution.anchor_ms) == (
            record,
            5,  # the claim's version
            5 * MIN,
        )
    assert resolve_fire(plan, 0, Raced(Code.CAS_CONFLICT)) is None  # stays claimed


def test_edits_and_removal_of_a_schedule() -> None:
    """TK-11, TK-12: the same cron keeps the anchor (missed fires still caught up), a new cron
    restarts at the edit, no cron or removal abandons a claimed fire and stops the schedule, a
    re-add starts afresh."""
    world = World(now=T0 - 1)
    world.add(definition("a", 1))
    kept = world.schedules["a"]
    world.now = T0 + 10 * MIN
    world.add(definition("a", 1, variant=1))
    assert world.schedules["a"] == kept  # same cron: unchanged bookkeeping
    world.add(definition("a", 2, variant=1))
    changed = world.schedules["a"]
    assert (changed.since_ms, changed.next_due_ms) == (world.now, T0 + 12 * MIN)
    assert changed.version == kept.version + 1
    world.now = T0 + 12 * MIN
    world.cycle(4, crash=(0, "claimed"))
    world.remove("a")
    removed = world.schedules["a"]
    assert removed.next_due_ms is None
    assert removed.last_fire == FireRecord(T0 + 12 * MIN, 3, FireState.ABANDONED)
    world.now = T0 + 30 * MIN
    assert world.cycle(4) == 0
    world.add(definition("a", 2, variant=1))  # a re-add: revision 4, afresh
    assert world.tasks["a"].current.revision == 4
    assert world.schedules["a"].since_ms == world.now
    assert world.schedules["a"].next_due_ms == T0 + 32 * MIN
    world.add(definition("a", None, variant=1))  # the cron dropped
    dropped = world.schedules["a"]
    assert dropped.next_due_ms is None
    assert world.created == Counter()


def test_a_task_without_a_cron_has_no_schedule() -> None:
    world = World()
    world.add(definition("a", None))
    assert world.schedules == {}


@given(
    rows=st.lists(
        st.tuples(st.integers(0, 5), st.booleans(), st.integers(0, 5)), min_size=0, max_size=12
    ),
    budget=st.integers(1, 6),
    seed=st.randoms(use_true_random=False),
)
def test_the_plan_is_a_stable_order_whatever_the_input_order(
    rows: list[tuple[int, bool, int]], budget: int, seed: object
) -> None:
    candidates = []
    for i, (fire, claimed, anchor) in enumerate(rows):
        last = FireRecord(fire * MIN, 1, FireState.CLAIMED) if claimed else None
        state = ScheduleState(f"t{i}", "* * * * *", anchor * MIN, 0, last, 1)
        candidates.append(ScheduleCandidate(state, 1, fire * MIN))
    plan = decide_fires(candidates, budget)
    shuffled = list(candidates)
    seed.shuffle(shuffled)  # type: ignore[attr-defined]
    assert decide_fires(shuffled, budget) == plan
    kinds = [f.kind for f in plan.fires]
    assert kinds == sorted(kinds, key=lambda k: k is FireKind.NEW)  # resumed fires first


@pytest.mark.spec("CAD-12")
@given(backlog=st.integers(0, 300), profile=st.sampled_from([Profile.EDGE, Profile.STANDALONE]))
def test_one_cycle_admits_at_most_the_trigger_schedule_budget(
    backlog: int, profile: Profile
) -> None:
    """CAD-12 for the trigger-schedule row (TK-13): whatever the number of due schedules, one
    cycle's plan holds at most `page size x pages` items, and the fires it drops stay due."""
    paging = BUDGETS[profile].scheduler_trigger_schedule
    assert paging is not None
    candidates = [
        ScheduleCandidate(ScheduleState(f"t{i:04}", "* * * * *", 0, MIN, None, 1), 1, MIN)
        for i in range(backlog)
    ]
    plan = decide_fires(candidates, paging.max_items)
    assert len(plan.fires) + len(plan.refreshes) <= paging.max_items
    assert len(plan.fires) == min(backlog, paging.max_items)
    assert [f.task for f in plan.fires] == [f"t{i:04}" for i in range(len(plan.fires))]


def test_a_stale_claim_changes_nothing() -> None:
    state = ScheduleState("a", "* * * * *", 0, MIN, None, 3)
    plan = decide_fires([ScheduleCandidate(state, 1, MIN)], 1).fires[0]
    claimed = claim_fire(state, plan)
    assert claimed == replace(
        state, last_fire=FireRecord(MIN, 1, FireState.CLAIMED), next_due_ms=MIN, version=4
    )


def test_a_fire_already_admitted_is_not_planned_again() -> None:
    """TK-10: the latest cron time equals the last admitted fire (a stale due read): no fire, a
    refresh of the due time; the same for a fire at or before the schedule's start (TK-9)."""
    admitted = FireRecord(5 * MIN, 1, FireState.ADMITTED)
    for state in (
        ScheduleState("a", "* * * * *", 0, 5 * MIN, admitted, 2),
        ScheduleState("a", "* * * * *", 5 * MIN, 5 * MIN, None, 2),
        ScheduleState("a", "* * * * *", 5 * MIN + 1, 5 * MIN, None, 2),
    ):
        plan = decide_fires([ScheduleCandidate(state, 1, 5 * MIN)], 4)
        assert plan.fires == ()
        assert [(r.task, r.anchor_ms) for r in plan.refreshes] == [("a", state.anchor_ms)]
    refused = FireRecord(5 * MIN, 1, FireState.REFUSED, Code.RUN_ID_CONFLICT)
    state = ScheduleState("a", "* * * * *", 0, 5 * MIN, refused, 2)
    assert decide_fires([ScheduleCandidate(state, 1, 5 * MIN)], 4).fires == ()  # not retried
