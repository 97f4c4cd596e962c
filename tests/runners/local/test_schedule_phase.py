"""The trigger-schedule phase and submissions on a real SQLite file (issue 15 item 3;
runners/local/schedule.py): each due fire admitted once with its deterministic ids, across a
crash between any two steps and with two schedulers on one file; manual and ad-hoc submits."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kernel import Applied, PolicyDefinition, Rejected, Replayed, Safety
from kernel.specs import BUDGETS, Code, OutcomeKind, Paging, Profile
from kernel.task import (
    LOCAL_EXECUTOR_TYPE,
    FireKind,
    FireState,
    TaskDefinition,
    TaskRefused,
    define_task,
    fire_attempt_id,
    fire_run_id,
)
from runners.edge.store import EdgeStore
from runners.edge.tasks import EdgeTaskStore, TaskWrite
from runners.local.schedule import (
    admit,
    claim,
    plan_cycle,
    record,
    schedule_phase,
    submit,
    submit_command,
)

MIN = 60_000
T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z


def _edge_budget() -> Paging:
    paging = BUDGETS[Profile.EDGE].scheduler_trigger_schedule
    assert paging is not None
    return paging


EDGE = _edge_budget()  # 4 x 1 (TK-13)


def task(name: str, cron: str | None = "* * * * *", variant: str = "") -> TaskDefinition:
    made = define_task(name, ["/bin/echo", name, variant], cron=cron)
    assert isinstance(made, TaskDefinition)
    return made


def add(tasks: EdgeTaskStore, definition: TaskDefinition, now_ms: int) -> None:
    assert isinstance(tasks.add(definition, now_ms), TaskWrite)


def runs(store: EdgeStore) -> dict[str, tuple[str, int]]:
    return {r["run_id"]: (r["task_id"], r["task_revision"]) for r in store.project()["runs"]}


@pytest.fixture
def store(tmp_path: Path) -> EdgeStore:
    return EdgeStore(tmp_path / "local.sqlite3")


@pytest.fixture
def tasks(store: EdgeStore) -> EdgeTaskStore:
    return EdgeTaskStore(store)


def test_a_cron_task_fires_once_per_due_minute(store: EdgeStore, tasks: EdgeTaskStore) -> None:
    add(tasks, task("a"), T0 - 1)
    for minute in range(5):
        for offset in (0, 20_000, 59_999):  # three cycles in each minute
            report = schedule_phase(store, tasks, T0 + minute * MIN + offset, EDGE)
            assert len(report.admitted) == (1 if offset == 0 else 0)
    assert set(runs(store)) == {fire_run_id("a", 1, T0 + m * MIN) for m in range(5)}
    run = store.project()["runs"][0]
    assert (run["project_id"], run["executor_type"], run["status"]) == (
        "local",
        LOCAL_EXECUTOR_TYPE,
        "queued",
    )
    attempts = {a["attempt_id"] for a in store.project()["attempts"]}
    assert attempts == {fire_attempt_id("a", 1, T0 + m * MIN) for m in range(5)}
    events = store.project()["events"]
    assert {e["actor"] for e in events} == {"trigger"}


def test_after_downtime_only_the_latest_missed_fire_is_admitted(
    store: EdgeStore, tasks: EdgeTaskStore
) -> None:
    add(tasks, task("a"), T0 - 1)
    schedule_phase(store, tasks, T0, EDGE)
    report = schedule_phase(store, tasks, T0 + 90 * MIN + 5, EDGE)  # down for 90 minutes
    assert [f.plan.fire_at_ms for f in report.admitted] == [T0 + 90 * MIN]
    assert set(runs(store)) == {fire_run_id("a", 1, T0), fire_run_id("a", 1, T0 + 90 * MIN)}


def test_one_cycle_admits_at_most_its_budget(store: EdgeStore, tasks: EdgeTaskStore) -> None:
    for i in range(10):
        add(tasks, task(f"t{i}"), T0 - 1)
    budget = Paging(2, 2)
    counts = []
    for _ in range(4):
        report = schedule_phase(store, tasks, T0, budget)
        assert report.due <= budget.max_items
        counts.append(len(report.admitted))
    assert counts == [4, 4, 2, 0]
    assert len(runs(store)) == 10


def test_a_crash_between_admission_and_bookkeeping_is_a_replay(
    store: EdgeStore, tasks: EdgeTaskStore
) -> None:
    add(tasks, task("a"), T0 - 1)
    cycle = plan_cycle(tasks, T0, EDGE)
    (fire,) = cycle.plan.fires
    claimed = claim(tasks, cycle, fire)
    assert claimed is not None
    assert isinstance(admit(store, tasks, fire, T0), Applied)
    # ... the process dies here: the bookkeeping still says `claimed`.
    store.reopen()
    schedule = tasks.schedule("a")
    assert schedule is not None
    assert schedule.last_fire is not None
    assert schedule.last_fire.state is FireState.CLAIMED
    report = schedule_phase(store, tasks, T0 + 1_000, EDGE)
    assert [(f.plan.kind, f.outcome.kind if f.outcome else None) for f in report.fires] == [
        (FireKind.RESUME, OutcomeKind.REPLAYED)
    ]
    assert report.fires[0].recorded
    assert set(runs(store)) == {fire.run_id}
    schedule = tasks.schedule("a")
    assert schedule is not None
    assert schedule.last_fire is not None
    assert schedule.last_fire.state is FireState.ADMITTED
    assert schedule.next_due_ms == T0 + MIN
    assert schedule_phase(store, tasks, T0 + 2_000, EDGE).fires == ()


def test_a_crash_between_claim_and_admission_admits_the_claim(
    store: EdgeStore, tasks: EdgeTaskStore
) -> None:
    add(tasks, task("a"), T0 - 1)
    cycle = plan_cycle(tasks, T0, EDGE)
    (fire,) = cycle.plan.fires
    assert claim(tasks, cycle, fire) is not None
    # An edit while the process is down: the claimed fire keeps its revision.
    add(tasks, task("a", variant="v2"), T0 + 1)
    report = schedule_phase(store, tasks, T0 + MIN + 1, EDGE)
    assert [(f.plan.kind, f.plan.revision) for f in report.admitted] == [(FireKind.RESUME, 1)]
    report = schedule_phase(store, tasks, T0 + MIN + 2, EDGE)
    assert [(f.plan.kind, f.plan.revision) for f in report.admitted] == [(FireKind.NEW, 2)]
    assert runs(store) == {
        fire_run_id("a", 1, T0): ("a", 1),
        fire_run_id("a", 2, T0 + MIN): ("a", 2),  # Runs keep their revision
    }


def test_record_after_a_stale_claim_writes_nothing(store: EdgeStore, tasks: EdgeTaskStore) -> None:
    add(tasks, task("a"), T0 - 1)
    cycle = plan_cycle(tasks, T0, EDGE)
    (fire,) = cycle.plan.fires
    claimed = claim(tasks, cycle, fire)
    assert claimed is not None
    outcome = admit(store, tasks, fire, T0)
    assert isinstance(tasks.remove("a", T0 + 1), TaskWrite)  # removed before the record
    assert not record(tasks, claimed, fire, outcome)
    schedule = tasks.schedule("a")
    assert schedule is not None
    assert schedule.next_due_ms is None
    assert schedule.last_fire is not None
    assert schedule.last_fire.state is FireState.ABANDONED
    assert schedule_phase(store, tasks, T0 + 5 * MIN, EDGE).fires == ()


def test_two_schedulers_on_one_file_admit_each_fire_once(tmp_path: Path) -> None:
    """Two processes' stores (two connections) on one file, interleaved step by step."""
    path = tmp_path / "shared.sqlite3"
    one, two = EdgeStore(path), EdgeStore(path)
    tasks_one, tasks_two = EdgeTaskStore(one), EdgeTaskStore(two)
    add(tasks_one, task("a"), T0 - 1)
    add(tasks_one, task("b"), T0 - 1)
    for minute in range(3):
        now = T0 + minute * MIN
        cycle_one = plan_cycle(tasks_one, now, EDGE)
        cycle_two = plan_cycle(tasks_two, now, EDGE)
        assert [f.run_id for f in cycle_one.plan.fires] == [f.run_id for f in cycle_two.plan.fires]
        first = cycle_one.plan.fires[0]
        assert claim(tasks_one, cycle_one, first) is not None
        assert claim(tasks_two, cycle_two, first) is None  # lost the claim: skipped
        report = schedule_phase(two, tasks_two, now, EDGE)  # resumes one's claim, and b
        assert {f.plan.task for f in report.fires if f.recorded} == {"a", "b"}
        assert isinstance(admit(one, tasks_one, first, now), Replayed)
        assert schedule_phase(one, tasks_one, now, EDGE).fires == ()
    assert len(runs(one)) == 6


def test_two_scheduler_threads_on_one_file_race_and_admit_each_fire_once(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    stores = [EdgeStore(path, busy_timeout_ms=60_000) for _ in range(2)]
    setup = EdgeTaskStore(stores[0])
    for name in ("a", "b", "c"):
        add(setup, task(name), T0 - 1)
    barrier = threading.Barrier(2, timeout=60)
    errors: list[BaseException] = []

    def scheduler(store: EdgeStore) -> None:
        tasks = EdgeTaskStore(store)
        try:
            for minute in range(8):
                barrier.wait()
                for offset in (0, 1, 2):
                    schedule_phase(store, tasks, T0 + minute * MIN + offset, Paging(1, 2))
        except BaseException as exc:  # reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=scheduler, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
        assert not thread.is_alive()
    assert errors == []
    expected = {fire_run_id(n, 1, T0 + m * MIN) for n in ("a", "b", "c") for m in range(8)}
    assert set(runs(stores[0])) == expected


def test_runs_keep_the_revision_they_were_admitted_with(
    store: EdgeStore, tasks: EdgeTaskStore
) -> None:
    add(tasks, task("a"), T0 - 1)
    schedule_phase(store, tasks, T0, EDGE)
    add(tasks, task("a", variant="2"), T0 + 1)  # same cron: the schedule goes on (TK-11)
    schedule_phase(store, tasks, T0 + MIN, EDGE)
    add(tasks, task("a", cron="*/5 * * * *", variant="2"), T0 + MIN + 1)  # restarts (TK-11)
    schedule_phase(store, tasks, T0 + 4 * MIN, EDGE)
    schedule_phase(store, tasks, T0 + 5 * MIN, EDGE)
    assert sorted(runs(store).values()) == [("a", 1), ("a", 2), ("a", 3)]


def test_the_retry_policy_of_the_revision_is_the_provider_policy(
    store: EdgeStore, tasks: EdgeTaskStore
) -> None:
    policy = PolicyDefinition(3, True, Safety.IDEMPOTENT, 0, 0)
    definition = define_task("a", ["/bin/true"], cron="* * * * *", retry_policy=policy)
    assert isinstance(definition, TaskDefinition)
    add(tasks, definition, T0 - 1)
    schedule_phase(store, tasks, T0, EDGE)
    (stored,) = store.project()["policies"]
    assert (stored["max_attempts"], stored["retry_on_lost"], stored["safety"]) == (
        3,
        True,
        "idempotent",
    )


def test_manual_submissions(store: EdgeStore, tasks: EdgeTaskStore) -> None:
    add(tasks, task("a"), T0 - 1)
    outcome = submit(store, tasks, "a", now_ms=T0 + 5, run_id="r-1", attempt_id="a-1")
    assert isinstance(outcome, Applied)
    assert outcome.aggregate.run.task_revision == 1
    again = submit(store, tasks, "a", now_ms=T0 + 6, run_id="r-1", attempt_id="a-1")
    assert again == Replayed(Code.EXISTING)
    clash = submit(store, tasks, "a", now_ms=T0 + 6, run_id="r-1", attempt_id="a-2")
    assert clash == Rejected(Code.RUN_ID_CONFLICT)
    assert submit(store, tasks, "zz", now_ms=T0, run_id="r-2", attempt_id="a-2") == TaskRefused(
        Code.TASK_NOT_FOUND, "name"
    )
    schedule = tasks.schedule("a")
    assert schedule is not None
    assert schedule.last_fire is None  # TK-8: a manual Run is not a fire
    assert isinstance(tasks.remove("a", T0 + 7), TaskWrite)
    assert submit(store, tasks, "a", now_ms=T0, run_id="r-3", attempt_id="a-3") == TaskRefused(
        Code.TASK_REMOVED, "name"
    )
    assert {e["actor"] for e in store.project()["events"]} == {"user"}


def test_an_adhoc_command_runs_as_its_implicit_task(store: EdgeStore, tasks: EdgeTaskStore) -> None:
    first = submit_command(
        store, tasks, ["/bin/echo", "hi"], now_ms=T0, run_id="r-1", attempt_id="a-1"
    )
    second = submit_command(
        store, tasks, ("/bin/echo", "hi"), now_ms=T0 + 1, run_id="r-2", attempt_id="a-2"
    )
    assert isinstance(first, Applied)
    assert isinstance(second, Applied)
    assert first.aggregate.run.task_id == second.aggregate.run.task_id
    assert first.aggregate.run.task_id.startswith("adhoc:")
    assert (first.aggregate.run.task_revision, second.aggregate.run.task_revision) == (1, 1)
    execution = tasks.execution(first.aggregate.run.task_id, 1)
    assert execution is not None
    assert execution.argv == ("/bin/echo", "hi")
    assert tasks.list().items == ()  # implicit tasks stay out of `qlk task list`
    refused = submit_command(store, tasks, [], now_ms=T0, run_id="r-3", attempt_id="a-3")
    assert refused == TaskRefused(Code.TASK_ARGV_INVALID, "argv")
