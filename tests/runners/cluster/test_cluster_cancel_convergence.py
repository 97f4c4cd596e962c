"""Cluster cancellation convergence in the O-5 cycle (SPEC Appendix D-6, §1.9, E-1 on cluster),
on the real PostgreSQL: one page of `converge_cancel` after lost retry and before the trigger
schedule, sized by the kernel's cluster budget, failing closed as the kernel's page
classification says; the phase order is read from the cycle's own report, and planted changes
of the kernel's table or budget are caught."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from kernel import (
    Actor,
    CancelReason,
    ExpireWithLease,
    NotRunningEvidence,
    Profile,
    RequestCancel,
)
from kernel.specs import BUDGETS, ClusterPhase, ClusterStep, budget_for, cycles
from runners.cluster.cycle import ClusterCycle, cluster_cycle
from runners.cluster.runtime import ClusterRuntime
from runners.cluster.store import ClusterStore
from tests.support.cluster_fixtures import applied, past, policy, running


@pytest.fixture
def store(pg_dsn: str, pg_schema: tuple[psycopg.Connection[Any], str]) -> Iterator[ClusterStore]:
    s = ClusterStore(pg_dsn, pg_schema[1])
    try:
        yield s
    finally:
        s.close()


def _cycle(rt: ClusterRuntime, calls: list[str], evidence: Any = None) -> ClusterCycle:
    def port(candidate: Any) -> Any:
        return NotRunningEvidence() if evidence is None else evidence(candidate)

    return cluster_cycle(
        rt,
        evidence=port,
        new_attempt_id=lambda run_id: f"{run_id}-a2",
        trigger_schedule=lambda: calls.append("trigger_schedule"),
        workflow_frontier=lambda: calls.append("workflow_frontier"),
        task_admission=lambda: calls.append("task_admission"),
        dispatch=lambda: calls.append("dispatch"),
    )


def _lost_with_intent(store: ClusterStore, run_id: str = "r1") -> None:
    """A cluster `lost` Run with a user intent: cancel while running, the lease expires, and
    §2.3 recovery (not running) makes it `lost`; lost retry never selects it (RETRY-12)."""
    rt = past(store)
    attempt = running(rt, run_id, lease_ms=5_000, policy=policy(0))
    applied(rt.execute(RequestCancel(run_id, CancelReason.USER, Actor.USER)))
    page = ClusterRuntime(store).runtime_recovery_page(16, lambda c: NotRunningEvidence())
    assert page.outcomes == ((attempt, "applied", "lost"),)
    run = store.project()["runs"][0]
    assert (run["status"], run["cancel_reason"]) == ("lost", "user")


def _run(store: ClusterStore, run_id: str = "r1") -> dict[str, Any]:
    return next(r for r in store.project()["runs"] if r["run_id"] == run_id)


@pytest.mark.spec("E-1")
def test_a_lost_run_with_intent_ends_cancelled_after_one_cycle(store: ClusterStore) -> None:
    """D-6: before, the `lost` Run with an intent stayed `lost` forever (lost retry skips it,
    nothing converged it on cluster). One cycle now ends it `cancelled`, in the convergence
    step, which the report shows after lost retry and before the trigger schedule."""
    _lost_with_intent(store)
    calls: list[str] = []
    result = _cycle(ClusterRuntime(store), calls).run_once()
    assert result.failed is None
    assert result.steps == (
        ClusterStep.RUNTIME_RECOVERY,
        ClusterStep.LOST_RETRY,
        ClusterStep.CANCELLATION_CONVERGENCE,
        ClusterStep.TRIGGER_SCHEDULE,
        ClusterStep.WORKFLOW_FRONTIER,
        ClusterStep.TASK_ADMISSION,
        ClusterStep.DISPATCH,
    )
    # No sixth phase: the five O-5 phases, convergence inside phase 3.
    assert result.phases == tuple(ClusterPhase)
    assert calls == ["trigger_schedule", "workflow_frontier", "task_admission", "dispatch"]
    assert result.result(ClusterStep.LOST_RETRY).scanned == 0  # type: ignore[attr-defined]
    page = result.result(ClusterStep.CANCELLATION_CONVERGENCE)
    assert page.outcomes == (("r1", "applied", "converged"),)  # type: ignore[attr-defined]
    assert page.count("converged") == 1  # type: ignore[attr-defined]
    projection = store.project()
    assert _run(store)["status"] == "cancelled"
    assert [a["status"] for a in projection["attempts"]] == ["lost"]  # no new Attempt
    assert projection["events"][-1]["type"] == "run.cancelled"
    # The next cycle finds nothing to converge.
    again = _cycle(ClusterRuntime(store), []).run_once()
    assert again.result(ClusterStep.CANCELLATION_CONVERGENCE).scanned == 0  # type: ignore[attr-defined]


@pytest.mark.spec("E-1")
def test_a_revoked_running_attempt_with_intent_ends_cancelled_stop_unverified(
    store: ClusterStore,
) -> None:
    """E-1 on cluster: cancel while running; the lease expires and T9 releases it
    `lease_expired`; recovery has no evidence for the remote Attempt and leaves it
    (`evidence_required`); the convergence step of the same cycle ends Attempt and Run
    `cancelled` with `stop_unverified: true`, and no Attempt is created."""
    rt = past(store)
    attempt = running(rt, "r1", lease_ms=5_000, policy=policy(0))
    applied(rt.execute(RequestCancel("r1", CancelReason.USER, Actor.USER)))
    now = ClusterRuntime(store)
    applied(now.execute(ExpireWithLease("r1", attempt, 1, Profile.CLUSTER)))  # T9
    lease = store.project()["leases"][0]
    assert (lease["status"], lease["release_reason"]) == ("released", "lease_expired")
    assert _run(store)["status"] == "running"

    result = _cycle(now, [], evidence=lambda c: None).run_once()
    assert result.failed is None, result.code
    recovery = result.result(ClusterStep.RUNTIME_RECOVERY)
    assert recovery.outcomes == ((attempt, "replayed", "evidence_required"),)  # type: ignore[attr-defined]
    page = result.result(ClusterStep.CANCELLATION_CONVERGENCE)
    assert page.outcomes == (("r1", "applied", "converged"),)  # type: ignore[attr-defined]
    projection = store.project()
    assert _run(store)["status"] == "cancelled"
    assert [a["status"] for a in projection["attempts"]] == ["cancelled"]
    cancelled = [e for e in projection["events"] if e["type"] == "run.cancelled"]
    assert len(cancelled) == 1
    assert cancelled[0]["payload"] == {"stop_unverified": True}


@pytest.mark.spec("E-1")
def test_a_failing_candidate_stops_the_page_and_the_cycle_before_the_schedule(
    store: ClusterStore, pg_dsn: str
) -> None:
    """E-5's rule on the convergence page: a candidate whose Run row another session holds
    past the lock timeout stops the page closed (CANCEL_CONVERGENCE_UNAVAILABLE); the later
    candidate is not touched and the trigger schedule does not run in that cycle. The next
    cycle converges both."""
    _lost_with_intent(store, "r1")
    rt = past(store)
    running(rt, "r2", lease_ms=5_000, policy=policy(0))
    applied(rt.execute(RequestCancel("r2", CancelReason.USER, Actor.USER)))
    ClusterRuntime(store).runtime_recovery_page(16, lambda c: NotRunningEvidence())
    assert [r["status"] for r in store.project()["runs"]] == ["lost", "lost"]
    before = store.project()
    store._open().execute("SET lock_timeout = '200ms'")
    blocker = psycopg.connect(pg_dsn)
    calls: list[str] = []
    try:
        blocker.execute("SELECT set_config('search_path', %(s)s, false)", {"s": store.schema})
        blocker.execute("SELECT 1 FROM runs WHERE run_id = 'r1' FOR UPDATE")
        result = _cycle(ClusterRuntime(store), calls).run_once()
    finally:
        blocker.rollback()
        blocker.close()
    assert result.failed is ClusterPhase.TRIGGER_SCHEDULE
    assert result.failed_step is ClusterStep.CANCELLATION_CONVERGENCE
    assert result.code == "CANCEL_CONVERGENCE_UNAVAILABLE"
    assert result.steps == (ClusterStep.RUNTIME_RECOVERY, ClusterStep.LOST_RETRY)
    assert calls == []
    assert store.project() == before  # r2, after the broken head, was not converged

    store._open().execute("SET lock_timeout = 0")
    result = _cycle(ClusterRuntime(store), calls).run_once()
    assert result.failed is None
    assert [r["status"] for r in store.project()["runs"]] == ["cancelled", "cancelled"]


def test_one_page_of_the_kernel_budget_per_cycle(
    store: ClusterStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page size is the cluster budget's (16 by default): with it planted at 1, one cycle
    converges the first candidate in `(cancel_requested_at_ms, run_id)` order and reports
    `has_more`; the next cycle converges the second."""
    assert budget_for(Profile.CLUSTER).cluster_cancellation_convergence_page_size == 16
    _lost_with_intent(store, "r1")
    rt = past(store)
    running(rt, "r2", lease_ms=5_000, policy=policy(0))
    applied(rt.execute(RequestCancel("r2", CancelReason.USER, Actor.USER)))
    planted = dict(BUDGETS)
    planted[Profile.CLUSTER] = dataclasses.replace(
        BUDGETS[Profile.CLUSTER], cluster_cancellation_convergence_page_size=1
    )
    monkeypatch.setattr("kernel.specs.budgets.BUDGETS", planted)
    cycle = _cycle(ClusterRuntime(store), [])
    first = cycle.run_once().result(ClusterStep.CANCELLATION_CONVERGENCE)
    assert first.outcomes == (("r1", "applied", "converged"),)  # type: ignore[attr-defined]
    assert first.has_more  # type: ignore[attr-defined]
    assert _run(store, "r2")["status"] == "lost"
    second = cycle.run_once().result(ClusterStep.CANCELLATION_CONVERGENCE)
    assert second.outcomes == (("r2", "applied", "converged"),)  # type: ignore[attr-defined]
    assert _run(store, "r2")["status"] == "cancelled"


# -- planted changes of the kernel's table and budget must fail the runtime ----------------------
def test_planted_budget_zero_stops_the_cycle(
    store: ClusterStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel budget the runner obeys: with the cluster convergence page planted at 0 the
    step refuses its page (P-1) and the lost Run stays `lost`; with 1, one Run per cycle."""
    _lost_with_intent(store, "r1")
    planted = dict(BUDGETS)
    planted[Profile.CLUSTER] = dataclasses.replace(
        BUDGETS[Profile.CLUSTER], cluster_cancellation_convergence_page_size=0
    )
    monkeypatch.setattr("kernel.specs.budgets.BUDGETS", planted)
    result = _cycle(ClusterRuntime(store), []).run_once()
    assert result.failed_step is ClusterStep.CANCELLATION_CONVERGENCE
    assert _run(store)["status"] == "lost"


def test_planted_table_without_the_step_leaves_the_lost_run_lost(
    store: ClusterStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step list is the kernel's: a table whose phase 3 has only the trigger schedule
    makes the coordinator refuse the convergence callable (so every test above fails), and
    the lost Run stays `lost`."""
    _lost_with_intent(store, "r1")
    table = dict(cycles.CLUSTER_PHASE_STEPS)
    table[ClusterPhase.TRIGGER_SCHEDULE] = (ClusterStep.TRIGGER_SCHEDULE,)
    monkeypatch.setattr(cycles, "CLUSTER_PHASE_STEPS", table)
    with pytest.raises(ValueError, match="unknown"):
        _cycle(ClusterRuntime(store), [])
    assert _run(store)["status"] == "lost"


def test_planted_order_is_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The coordinator reads the order from the kernel every cycle: convergence moved after
    the trigger schedule in the table is called after it."""
    table = dict(cycles.CLUSTER_PHASE_STEPS)
    table[ClusterPhase.TRIGGER_SCHEDULE] = (
        ClusterStep.TRIGGER_SCHEDULE,
        ClusterStep.CANCELLATION_CONVERGENCE,
    )
    monkeypatch.setattr(cycles, "CLUSTER_PHASE_STEPS", table)
    calls: list[str] = []
    steps = {
        step: (lambda step=step: calls.append(step.value))
        for _, step in cycles.cluster_cycle_steps()
    }
    ClusterCycle(steps).run_once()
    assert calls.index("trigger_schedule") < calls.index("cancellation_convergence")
