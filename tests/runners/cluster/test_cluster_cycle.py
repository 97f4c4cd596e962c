"""The cluster scheduler cycle (SPEC §6.2 O-5): phase order, fail-closed gating, re-entry and
what the coordinator may hold (CAD-06, CAD-07, REC-13), with the real runtime on PostgreSQL for
the gating phases."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from kernel import NotRunningEvidence
from kernel.specs.cycles import (
    CLUSTER_CYCLE,
    CLUSTER_GATING,
    CLUSTER_PHASE_STEPS,
    ClusterPhase,
    ClusterStep,
    cluster_cycle_steps,
)
from runners.cluster.clock import InjectedClock
from runners.cluster.cycle import ClusterCycle, cluster_cycle
from runners.cluster.runtime import ClusterRuntime
from runners.cluster.store import ClusterStore
from tests.support.cluster_fixtures import past, policy, running


class Boom(Exception):
    code = "BOOM"


STEPS = tuple(step for _, step in cluster_cycle_steps())


def _recording(fail: ClusterStep | None = None) -> tuple[dict[ClusterStep, Any], list[str]]:
    calls: list[str] = []

    def phase(p: ClusterStep) -> Any:
        def run() -> str:
            calls.append(p.value)
            if p is fail:
                raise Boom
            return f"{p.value} done"

        return run

    return {p: phase(p) for p in STEPS}, calls


@pytest.mark.spec("CAD-06")
def test_every_cycle_calls_the_five_phases_in_order() -> None:
    """CAD-06: recovery, lost retry, schedule, frontier, Task admission, in this order, every
    cycle; D-6: phase 3 converges cancellations before its trigger schedule, and phase 5 ends
    with dispatch (T1, issue 17): no sixth phase."""
    phases, calls = _recording()
    cycle = ClusterCycle(phases)
    for _ in range(3):
        result = cycle.run_once()
        assert result.phases == CLUSTER_CYCLE
        assert result.steps == STEPS
        assert result.failed is None
    assert calls == [p.value for p in STEPS] * 3
    assert [p.value for p in CLUSTER_CYCLE] == [
        "runtime_recovery",
        "lost_retry",
        "trigger_schedule",
        "workflow_frontier",
        "task_admission",
    ]
    assert [s.value for s in STEPS] == [
        "runtime_recovery",
        "lost_retry",
        "cancellation_convergence",
        "trigger_schedule",
        "workflow_frontier",
        "task_admission",
        "dispatch",
    ]
    assert CLUSTER_PHASE_STEPS[ClusterPhase.TASK_ADMISSION][-1] is ClusterStep.DISPATCH


@pytest.mark.spec("CAD-06")
@pytest.mark.parametrize("failing", list(STEPS))
def test_a_failing_phase_ends_the_cycle_and_a_gating_failure_schedules_nothing(
    failing: ClusterStep,
) -> None:
    """CAD-06: a failure in recovery or lost retry means convergence, schedule, frontier and
    admission are not called in that cycle; any failure ends the cycle at that step with its
    code, and names the phase the step belongs to."""
    phases, calls = _recording(fail=failing)
    result = ClusterCycle(phases).run_once()
    upto = STEPS.index(failing)
    assert calls == [p.value for p in STEPS[: upto + 1]]
    assert result.failed_step is failing
    assert result.failed is not None
    assert failing in CLUSTER_PHASE_STEPS[result.failed]
    assert result.code == "BOOM"
    if result.failed in CLUSTER_GATING:
        assert not result.scheduled


def test_the_phase_table_must_be_complete() -> None:
    phases, _ = _recording()
    del phases[ClusterStep.TASK_ADMISSION]
    with pytest.raises(ValueError, match="missing"):
        ClusterCycle(phases)


@pytest.fixture
def store(pg_dsn: str, pg_schema: tuple[psycopg.Connection[Any], str]) -> Iterator[ClusterStore]:
    s = ClusterStore(pg_dsn, pg_schema[1])
    try:
        yield s
    finally:
        s.close()


def _scheduler(calls: list[str]) -> dict[str, Any]:
    return {
        "trigger_schedule": lambda: calls.append("trigger_schedule"),
        "workflow_frontier": lambda: calls.append("workflow_frontier"),
        "task_admission": lambda: calls.append("task_admission"),
        "dispatch": lambda: calls.append("dispatch"),
    }


@pytest.mark.spec("REC-13")
def test_a_recovery_error_on_postgresql_means_nothing_is_scheduled(store: ClusterStore) -> None:
    """REC-13: the runtime recovery page fails closed on a real candidate (its evidence read
    fails); the cycle reports RUNTIME_RECOVERY_UNAVAILABLE, runs neither lost retry nor any
    scheduling phase, and writes nothing. The next cycle, with evidence, proceeds."""
    attempt = running(past(store), "r1", lease_ms=5_000, policy=policy(0))
    before = store.project()
    scheduled: list[str] = []
    broken = {"evidence": True}

    def evidence(candidate: Any) -> Any:
        if broken["evidence"]:
            raise OSError("receipt store unreachable")
        return NotRunningEvidence()

    cycle = cluster_cycle(
        ClusterRuntime(store),
        evidence=evidence,
        new_attempt_id=lambda run_id: f"{run_id}-a2",
        **_scheduler(scheduled),
    )
    result = cycle.run_once()
    assert result.failed is ClusterPhase.RUNTIME_RECOVERY
    assert result.code == "RUNTIME_RECOVERY_UNAVAILABLE"
    assert result.phases == ()
    assert scheduled == []
    assert store.project() == before

    broken["evidence"] = False
    result = cycle.run_once()
    assert result.failed is None
    assert scheduled == ["trigger_schedule", "workflow_frontier", "task_admission", "dispatch"]
    recovery = result.result(ClusterStep.RUNTIME_RECOVERY)
    assert recovery.outcomes == ((attempt, "applied", "lost"),)  # type: ignore[attr-defined]
    retry = result.result(ClusterStep.LOST_RETRY)
    assert retry.scheduled == 1  # type: ignore[attr-defined]  # lost -> retry_wait


@pytest.mark.spec("REC-13")
def test_a_lost_retry_lock_failure_on_postgresql_means_nothing_is_scheduled(
    store: ClusterStore, pg_dsn: str
) -> None:
    """A lost-retry candidate whose Run row another session holds past the lock timeout: the
    page fails closed (LOST_RETRY_UNAVAILABLE), the cycle schedules nothing, the Run is left
    as it was."""
    running(past(store), "r1", lease_ms=5_000, policy=policy(0))
    rt = ClusterRuntime(store)
    rt.runtime_recovery_page(16, lambda c: NotRunningEvidence())
    before = store.project()
    assert [r["status"] for r in before["runs"]] == ["lost"]
    store._open().execute("SET lock_timeout = '200ms'")
    blocker = psycopg.connect(pg_dsn)
    try:
        blocker.execute("SELECT set_config('search_path', %(s)s, false)", {"s": store.schema})
        blocker.execute("SELECT 1 FROM runs WHERE run_id = 'r1' FOR UPDATE")
        scheduled: list[str] = []
        cycle = cluster_cycle(
            rt,
            evidence=lambda c: NotRunningEvidence(),
            new_attempt_id=lambda run_id: f"{run_id}-a2",
            **_scheduler(scheduled),
        )
        result = cycle.run_once()
    finally:
        blocker.rollback()
        blocker.close()
    assert result.failed is ClusterPhase.LOST_RETRY
    assert result.code == "LOST_RETRY_UNAVAILABLE"
    assert result.phases == (ClusterPhase.RUNTIME_RECOVERY,)
    assert scheduled == []
    assert store.project() == before


@pytest.mark.spec("CAD-07")
def test_the_coordinator_holds_no_timer_pool_connection_cursor_or_per_run_state(
    store: ClusterStore,
) -> None:
    """CAD-07: the coordinator's own state is its phase table and, between cycles, nothing
    else; no attribute is a timer, thread, pool, connection or cursor, and nothing about a Run
    survives a cycle. (The database belongs to the runtime the phases call.)"""
    running(past(store), "r1", lease_ms=5_000, policy=policy(0))
    scheduled: list[str] = []
    cycle = cluster_cycle(
        ClusterRuntime(store, clock=None),
        evidence=lambda c: NotRunningEvidence(),
        new_attempt_id=lambda run_id: f"{run_id}-a2",
        **_scheduler(scheduled),
    )
    for _ in range(2):
        assert cycle.run_once().failed is None
    assert not hasattr(cycle, "__dict__")
    assert set(ClusterCycle.__slots__) == {"_phases", "_guard", "_flight"}
    forbidden = (
        threading.Timer,
        threading.Thread,
        ConnectionPool,
        psycopg.Connection,
        psycopg.Cursor,
        InjectedClock,
    )
    held = [getattr(cycle, name) for name in ClusterCycle.__slots__]
    assert not any(isinstance(value, forbidden) for value in held)
    assert cycle._flight is None  # no cycle state kept between cycles
    assert set(cycle._phases) == set(STEPS)


def test_overlapping_run_once_calls_share_one_cycle() -> None:
    """O-5: re-entry is coalesced: a caller arriving while a cycle runs gets that cycle's
    result, and the phases run once."""
    entered = threading.Event()
    release = threading.Event()
    calls: list[str] = []

    def recovery() -> str:
        calls.append("runtime_recovery")
        entered.set()
        release.wait(10)
        return "recovered"

    phases: dict[ClusterStep, Any] = {p: (lambda p=p: calls.append(p.value)) for p in STEPS}
    phases[ClusterStep.RUNTIME_RECOVERY] = recovery
    cycle = ClusterCycle(phases)
    results: list[object] = []
    first = threading.Thread(target=lambda: results.append(cycle.run_once()))
    first.start()
    assert entered.wait(10)
    second = threading.Thread(target=lambda: results.append(cycle.run_once()))
    second.start()
    second.join(0.2)
    assert second.is_alive()  # joined the running cycle instead of starting its own
    release.set()
    first.join(10)
    second.join(10)
    assert len(results) == 2
    assert results[0] is results[1]
    assert calls.count("runtime_recovery") == 1
    assert len(calls) == len(STEPS)
