"""The cluster application and its scheduler lifecycle on PostgreSQL (issue 17 item 1; SPEC §6.1
`ClusterSchedulerLifecycle`, O-5; runners/cluster/app.py, runners/cluster/lifecycle.py): the
cycle's steps in the kernel's order with dispatch last, on the cluster cadence; a gating failure
schedules and dispatches nothing; stop drains then closes, once; replicas that start together on
a fresh schema migrate it once."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from kernel import NotRunningEvidence
from kernel.specs import ClusterPhase, ClusterStep, Profile, budget_for, cluster_cycle_steps
from kernel.task import TaskDefinition, define_task, fire_run_id
from runners.cluster.app import ClusterApplication
from runners.cluster.clock import InjectedClock
from runners.cluster.cycle import CycleResult
from runners.cluster.migrate import migrations
from runners.lifecycle import CycleReport, CycleSucceeded, SteppedScheduler
from tests.support.cluster_fixtures import db_now, past, policy, running

MIN = 60_000
T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z
STEPS = tuple(step for _, step in cluster_cycle_steps())


def task(name: str, cron: str | None = "* * * * *") -> TaskDefinition:
    made = define_task(name, ["/bin/true"], cron=cron)
    assert isinstance(made, TaskDefinition)
    return made


class Recorder:
    """The on_cycle callback and a dispatch step that counts its calls."""

    def __init__(self) -> None:
        self.reports: list[CycleReport[CycleResult]] = []
        self.dispatches = 0

    def on_cycle(self, report: CycleReport[CycleResult]) -> None:
        self.reports.append(report)

    def dispatch(self) -> str:
        self.dispatches += 1
        return "granted nothing"

    def last(self) -> CycleResult:
        result = self.reports[-1].result
        assert isinstance(result, CycleSucceeded), result
        value: CycleResult = result.value
        return value


@pytest.fixture
def schema(pg_schema: tuple[psycopg.Connection[Any], str]) -> str:
    return pg_schema[1]


def _runs(app: ClusterApplication) -> list[str]:
    return sorted(r["run_id"] for r in app.store.project()["runs"])


def test_the_lifecycle_runs_every_step_in_order_at_the_cluster_cadence(
    pg_dsn: str, schema: str
) -> None:
    """Start arms the first cycle at once (initial delay 0), then every 1 s (B-71); each cycle
    runs the kernel's steps in order with dispatch last; the trigger schedule admits the due
    fire at the runtime's time with its deterministic id, once."""
    stepped = SteppedScheduler()
    seen = Recorder()
    app = ClusterApplication(
        pg_dsn,
        schema,
        scheduler=stepped,
        dispatch=seen.dispatch,
        on_cycle=seen.on_cycle,
        clock=InjectedClock(T0 + MIN + 5_000),
    )
    try:
        app.tasks.add(task("tick"), T0)
        app.start()
        assert stepped.advance(0) == 1
        result = seen.last()
        assert result.failed is None
        assert result.steps == STEPS
        assert result.steps[-1] is ClusterStep.DISPATCH
        assert result.result(ClusterStep.DISPATCH) == "granted nothing"
        schedule = result.result(ClusterStep.TRIGGER_SCHEDULE)
        fired = fire_run_id("tick", 1, T0 + MIN)
        assert [f.plan.run_id for f in schedule.admitted] == [fired]  # type: ignore[attr-defined]
        assert _runs(app) == [fired]
        cadence = budget_for(Profile.CLUSTER).cluster_scheduler_cadence_ms
        assert stepped.armed == [0, cadence]
        assert cadence is not None
        assert stepped.advance(cadence) == 1
        assert seen.dispatches == 2
        assert seen.last().result(ClusterStep.TRIGGER_SCHEDULE).fires == ()  # type: ignore[attr-defined]
        assert _runs(app) == [fired]  # the same minute fires once
    finally:
        stopped = app.stop()
    assert stopped.drained


def test_a_gating_failure_schedules_and_dispatches_nothing(pg_dsn: str, schema: str) -> None:
    """CAD-06 through the lifecycle: while runtime recovery fails (its evidence port raises on a
    real candidate), a due fire is not admitted and dispatch is not called; the next cycle,
    with evidence, recovers, admits the fire and dispatches, in that order."""
    stepped = SteppedScheduler()
    seen = Recorder()
    broken = {"evidence": True}

    def evidence(_candidate: Any) -> Any:
        if broken["evidence"]:
            raise OSError("Worker registry unreachable")
        return NotRunningEvidence()

    app = ClusterApplication(
        pg_dsn,
        schema,
        scheduler=stepped,
        evidence=evidence,
        dispatch=seen.dispatch,
        on_cycle=seen.on_cycle,
    )
    try:
        running(past(app.store), "r1", lease_ms=5_000, policy=policy(0))
        with app.store.connection() as conn:
            now = db_now(conn)
        app.tasks.add(task("tick"), now - 5 * MIN)  # due at database time
        app.start()
        stepped.advance(0)
        failed = seen.last()
        assert failed.failed is ClusterPhase.RUNTIME_RECOVERY
        assert failed.code == "RUNTIME_RECOVERY_UNAVAILABLE"
        assert failed.steps == ()
        assert not failed.scheduled
        assert seen.dispatches == 0
        assert _runs(app) == ["r1"]
        broken["evidence"] = False
        stepped.advance(1_000)
        done = seen.last()
        assert done.failed is None
        assert done.steps == STEPS
        assert seen.dispatches == 1
        assert len(_runs(app)) == 2  # r1 and the fire
    finally:
        app.stop()


def test_stop_drains_then_closes_once(pg_dsn: str, schema: str) -> None:
    """Concurrent and repeated stops share one result; the store is closed after; a stopped
    application cannot start again."""
    app = ClusterApplication(pg_dsn, schema, scheduler=SteppedScheduler())
    app.start()
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(app.stop())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    results.append(app.stop())
    assert len(results) == 5
    assert all(r is results[0] for r in results)
    with pytest.raises(psycopg.InterfaceError):
        app.runtime.now_ms()
    with pytest.raises(RuntimeError, match="LIFECYCLE_STOPPED"):
        app.start()
    assert "postgresql" not in repr(app)  # never the DSN


def test_replicas_starting_together_on_a_fresh_schema_migrate_it_once(pg_dsn: str) -> None:
    """Three replicas open one schema that does not exist yet, at once: each succeeds, the
    schema is created once and every migration is recorded once (the migrator's advisory
    lock), and all three then cycle on it."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    barrier = threading.Barrier(3)
    apps: list[ClusterApplication] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            barrier.wait(30)
            apps.append(ClusterApplication(pg_dsn, name, scheduler=SteppedScheduler()))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(3)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert len(apps) == 3
        for app in apps:
            assert app.steps.cycle.run_once().failed is None
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(name)))
            rows = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
        assert [r[0] for r in rows] == [m.version for m in migrations()]
    finally:
        for app in apps:
            app.stop()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def test_the_cluster_scheduler_holds_no_connection_between_cycles(pg_dsn: str, schema: str) -> None:
    """CAD-07 for what the bootstrap adds: the steps object holds the runtime and the task
    store (whose connections are the store's pool), never a connection or cursor of its own."""
    app = ClusterApplication(pg_dsn, schema, scheduler=SteppedScheduler())
    try:
        held: Iterator[object] = iter(vars(app.steps).values())
        assert not any(isinstance(v, psycopg.Connection | psycopg.Cursor) for v in held)
    finally:
        app.stop()
