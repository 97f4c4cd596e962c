"""The cluster task store and the trigger-schedule phase on PostgreSQL (issue 17 item 1;
runners/cluster/tasks.py, runners/task_schedule.py): the same operations give the same results as
the edge store on SQLite, and two replicas scheduling one database concurrently admit every fire
exactly once (TK-6: the fire's Run id is deterministic, the claim a compare-and-set)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from kernel import PolicyDefinition, Safety
from kernel.specs import Code, OutcomeKind, Paging, Profile, budget_for
from kernel.task import (
    TASK_EXECUTOR_TYPE,
    FireState,
    TaskDefinition,
    TaskRefused,
    adhoc_definition,
    define_task,
    fire_run_id,
)
from runners.cluster.store import ClusterStore
from runners.cluster.tasks import ClusterTaskStore
from runners.edge.store import EdgeStore
from runners.edge.tasks import EdgeTaskStore
from runners.task_rows import TaskStore, TaskWrite
from runners.task_schedule import SchedulePhaseReport, schedule_phase, submit, submit_command

MIN = 60_000
T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z


def task(name: str, *argv: str, **fields: object) -> TaskDefinition:
    made = define_task(name, argv or ("/bin/true",), **fields)
    assert isinstance(made, TaskDefinition), made
    return made


@pytest.fixture
def cluster(pg_dsn: str, pg_schema: tuple[psycopg.Connection[Any], str]) -> Iterator[ClusterStore]:
    s = ClusterStore(pg_dsn, pg_schema[1])
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def edge(tmp_path: Path) -> Iterator[EdgeStore]:
    s = EdgeStore(tmp_path / "local.sqlite3")
    try:
        yield s
    finally:
        s.close()


# -- parity ----------------------------------------------------------------------------------------

Op = Callable[[Any], object]


def _script() -> list[tuple[str, Op]]:
    """Operations of the public task-store API, each with a label; the results are compared."""
    policy = PolicyDefinition(3, True, Safety.IDEMPOTENT, 1_000, 10_000)
    backup = task(
        "backup",
        "/usr/bin/backup",
        "--all",
        cwd="/srv",
        env={"HOME": "/root", "A": "é ∂"},
        cron="*/5 * * * *",
        deadline_ms=60_000,
        retry_policy=policy,
    )
    adhoc = adhoc_definition(["/bin/echo", "hi"])
    assert isinstance(adhoc, TaskDefinition)
    ops: list[tuple[str, Op]] = [
        ("add backup", lambda t: t.add(backup, T0)),
        ("re-add identical", lambda t: t.add(backup, T0 + 1)),
        ("revise", lambda t: t.add(task("backup", "/usr/bin/backup", cron="*/5 * * * *"), T0 + 2)),
        ("bad cron", lambda t: t.add(task("never", cron="0 0 31 2 *"), T0)),
        ("odd fields", lambda t: t.add(task("odd", cron="61 * * * *"), T0)),
        ("adhoc", lambda t: t.add(adhoc, T0 + 3)),
    ]
    # Names whose order differs between bytewise and a natural-language collation.
    for i, name in enumerate(["b", "B", "a-1", "a", "Z", "a_2", "a.3", "0x"]):
        cron = None if i % 2 else "* * * * *"
        ops.append((f"add {name}", _adder(task(name, cron=cron), T0 + i)))
    ops += [
        ("remove b", lambda t: t.remove("b", T0 + 10)),
        ("remove b again", lambda t: t.remove("b", T0 + 11)),
        ("remove unknown", lambda t: t.remove("nope", T0 + 11)),
        ("re-add b", lambda t: t.add(task("b", cron="* * * * *"), T0 + 12)),
        ("remove a", lambda t: t.remove("a", T0 + 13)),
        ("state", lambda t: [t.state(n) for n in ("backup", "b", "a", "nope", adhoc.name)]),
        ("get", lambda t: [t.get(n) for n in ("backup", "b", "a", "B", "nope")]),
        ("schedule", lambda t: [t.schedule(n) for n in ("backup", "b", "a", "B", "nope")]),
        ("revision", lambda t: [t.revision("backup", r) for r in (1, 2, 3)]),
        ("execution", lambda t: [t.execution("backup", r) for r in (1, 2)]),
        ("list", lambda t: t.list()),
        ("list all", lambda t: t.list(include_removed=True, include_adhoc=True)),
        ("list pages", _pages),
        ("due early", lambda t: t.due(T0, Paging(16, 4))),
        ("due", lambda t: t.due(T0 + 10 * MIN, Paging(16, 4))),
        ("due paged", lambda t: t.due(T0 + 10 * MIN, Paging(2, 2))),
    ]
    ops += [
        ("cas wins", lambda t: _cas(t, "backup", stale=False)),
        ("cas loses", lambda t: _cas(t, "backup", stale=True)),
        ("after cas", lambda t: t.schedule("backup")),
    ]
    return ops


def _adder(definition: TaskDefinition, at: int) -> Op:
    return lambda t: t.add(definition, at)


def _pages(tasks: Any) -> list[object]:
    pages = []
    after = None
    while True:
        page = tasks.list(after=after, limit=2, include_removed=True, include_adhoc=True)
        pages.append(page)
        if page.next_after is None:
            return pages
        after = page.next_after


def _cas(tasks: Any, name: str, *, stale: bool) -> bool:
    current = tasks.schedule(name)
    assert current is not None
    new = replace(current, next_due_ms=T0 + 7 * MIN, version=current.version + 1)
    return bool(tasks.write_schedule(new, current.version - 1 if stale else current.version))


def test_the_cluster_task_store_answers_as_the_edge_store(
    edge: EdgeStore, cluster: ClusterStore
) -> None:
    """Parity: every operation of the public API, in one script, on a SQLite file and on a
    PostgreSQL schema: the same values (the same classes), in the same order (names sort
    bytewise on both, whatever the database's collation)."""
    on_edge, on_cluster = EdgeTaskStore(edge), ClusterTaskStore(cluster)
    for label, op in _script():
        expected, got = op(on_edge), op(on_cluster)
        assert got == expected, label
    names = [r.state.name for r in on_cluster.list(include_removed=True, include_adhoc=True).items]
    assert names == sorted(names, key=lambda n: n.encode())
    # The script exercised what it claims to: refusals, a reactivation, a lost CAS.
    refused = on_cluster.remove("nope", T0)
    assert isinstance(refused, TaskRefused)
    assert refused.code is Code.TASK_NOT_FOUND


def test_the_schedule_phase_admits_the_same_fires_on_both_runners(
    edge: EdgeStore, cluster: ClusterStore
) -> None:
    """One phase implementation over either store: the same due rows give the same fires, the
    same deterministic Run ids, the same bookkeeping afterwards; submissions too."""
    budget = budget_for(Profile.CLUSTER).cluster_trigger_schedule
    assert budget is not None
    stores: list[tuple[Any, TaskStore]] = [
        (edge, EdgeTaskStore(edge)),
        (cluster, ClusterTaskStore(cluster)),
    ]
    reports: list[list[tuple[str, str | None]]] = []
    schedules = []
    submitted = []
    for storage, tasks in stores:
        for i in range(3):
            tasks.add(task(f"t{i}", cron="* * * * *"), T0)
        seen: list[tuple[str, str | None]] = []
        for minute in (1, 2, 2, 5):
            report = schedule_phase(storage, tasks, T0 + minute * MIN, budget)
            seen += [
                (f.plan.run_id, None if f.outcome is None else f.outcome.kind.value)
                for f in report.fires
            ]
        reports.append(seen)
        schedules.append([tasks.state(f"t{i}") for i in range(3)])
        one = submit(storage, tasks, "t1", now_ms=T0 + 6 * MIN, run_id="run-1", attempt_id="a-1")
        two = submit_command(
            storage,
            tasks,
            ["/bin/echo", "x"],
            now_ms=T0 + 6 * MIN,
            run_id="run-2",
            attempt_id="a-2",
        )
        gone = submit(storage, tasks, "nope", now_ms=T0, run_id="run-3", attempt_id="a-3")
        submitted.append([getattr(o, "kind", o) for o in (one, two, gone)])
    assert reports[0] == reports[1]
    assert len(reports[1]) == 9  # 3 tasks x the fires of minutes 1, 2 and 5 (none twice at 2)
    assert {kind for _, kind in reports[1]} == {OutcomeKind.APPLIED.value}
    assert schedules[0] == schedules[1]
    assert submitted[0] == submitted[1]
    assert submitted[1][:2] == [OutcomeKind.APPLIED, OutcomeKind.APPLIED]
    runs = {r["run_id"]: r for r in cluster.project()["runs"]}
    assert fire_run_id("t0", 1, T0 + 5 * MIN) in runs
    assert {r["executor_type"] for r in runs.values()} == {TASK_EXECUTOR_TYPE}


def test_an_edit_waits_for_nothing_and_a_concurrent_claim_loses(cluster: ClusterStore) -> None:
    """`add` locks the schedule row it rewrites: a scheduler's claim made with the version it
    read before the edit finds the version changed and writes nothing (False), never an error,
    and the edit's bookkeeping stands."""
    tasks = ClusterTaskStore(cluster)
    tasks.add(task("t", cron="* * * * *"), T0)
    before = tasks.schedule("t")
    assert before is not None
    tasks.add(task("t", "/bin/false", cron="*/2 * * * *"), T0 + 1)
    claim = replace(before, version=before.version + 1)
    assert tasks.write_schedule(claim, before.version) is False
    after = tasks.schedule("t")
    assert after is not None
    assert after.cron == "*/2 * * * *"


def test_concurrent_first_adds_of_one_name_write_one_task(cluster: ClusterStore) -> None:
    """Two replicas adding the same new task at once: the name lock orders them, so one
    creates revision 1 and the other finds it (identical: unchanged; different: revision 2),
    never a key collision."""
    stores = [ClusterStore(cluster.dsn, cluster.schema) for _ in range(4)]
    results: list[object] = []
    barrier = threading.Barrier(len(stores))

    def add(store: ClusterStore, argv: str) -> None:
        barrier.wait(30)
        results.append(ClusterTaskStore(store).add(task("same", argv), T0))

    try:
        threads = [
            threading.Thread(target=add, args=(s, "/bin/true" if i % 2 else "/bin/false"))
            for i, s in enumerate(stores)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        for s in stores:
            s.close()
    assert len(results) == 4
    assert all(isinstance(r, TaskWrite) for r in results)
    writes = [r for r in results if isinstance(r, TaskWrite)]
    assert sum(w.created for w in writes) == 1
    state = ClusterTaskStore(cluster).state("same")
    assert state is not None
    assert state.current.revision == sum(w.written for w in writes)


# -- two replicas, exactly once --------------------------------------------------------------------


def test_two_replicas_scheduling_concurrently_admit_every_fire_exactly_once(
    cluster: ClusterStore,
) -> None:
    """Two replicas (two `ClusterStore`s, two connections, two threads) run the phase on one
    schema at the same times, minute after minute, each twice per minute (a claim left by a
    lost race is resumed by the second pass). Every fire becomes exactly one Run, whichever
    replica fired it: Runs == fires == tasks x minutes, each with its deterministic id, and
    the admissions that created a Run (`applied`) add up to the same number."""
    tasks_n, minutes = 24, 20
    setup = ClusterTaskStore(cluster)
    for i in range(tasks_n):
        setup.add(task(f"t{i:02d}", cron="* * * * *"), T0)
    budget = Paging(16, 4)
    replicas = [ClusterStore(cluster.dsn, cluster.schema) for _ in range(2)]
    barrier = threading.Barrier(2)
    reports: list[list[SchedulePhaseReport]] = [[], []]
    errors: list[BaseException] = []

    def replica(index: int) -> None:
        store = replicas[index]
        tasks = ClusterTaskStore(store)
        try:
            for minute in range(1, minutes + 1):
                for _ in range(2):
                    barrier.wait(60)
                    now = T0 + minute * MIN
                    reports[index].append(schedule_phase(store, tasks, now, budget))
        except BaseException as exc:  # reported below, with the other replica stopped
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=replica, args=(i,)) for i in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    finally:
        for s in replicas:
            s.close()
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    fires = {
        fire_run_id(f"t{i:02d}", 1, T0 + m * MIN)
        for i in range(tasks_n)
        for m in range(1, minutes + 1)
    }
    runs = [r["run_id"] for r in cluster.project()["runs"]]
    assert len(runs) == len(fires) == tasks_n * minutes
    assert set(runs) == fires
    created = sum(len(r.admitted) for replica in reports for r in replica)
    assert created == len(fires)
    # Both replicas took part (the claims were really contended), and every schedule ends
    # with its last fire admitted.
    assert all(any(r.fires for r in replica) for replica in reports)
    for i in range(tasks_n):
        schedule = setup.schedule(f"t{i:02d}")
        assert schedule is not None
        assert schedule.last_fire is not None
        assert schedule.last_fire.state is FireState.ADMITTED
        assert schedule.last_fire.fire_at_ms == T0 + minutes * MIN
