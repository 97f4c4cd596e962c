"""The Workflow tables and sources on both runners (SPEC §4.1, §4.3; issue 18 item 3): one
scripted Workflow run through `execute_workflow` on the edge file store, the cluster store and the
reference store in lockstep gives the same outcomes at every step and the same canonical
projection, read by each runner's backdoor reader; after every step each runner's Workflow
sources (phase 1 cancellation, frontier, Task admission, Task dispatch, Task recovery) answer
exactly what the kernel's selection oracle answers, page by page."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance.run.reference import ReferenceStore
from kernel.specs.cycles import ClusterStep
from kernel.workflow import AdmitWorkflow, PinnedStep
from runners.cluster.lifecycle import ClusterScheduler
from runners.cluster.runtime import ClusterRuntime
from runners.cluster.store import ClusterStore
from runners.cluster.tasks import ClusterTaskStore
from runners.edge.store import EdgeStore
from runners.engine import execute_workflow
from runners.workflow_phases import WorkflowPhaseReport
from tests.support.workflow_drive import LOCAL, PLAN_DIGEST, drive


def _all_pages(source: Callable[..., Any], *args: object, limit: int) -> list[Any]:
    """Every page of a source, following its cursor: (items, has_more) per page."""
    pages: list[Any] = []
    after = None
    while True:
        page = source(*args, limit=limit, after=after)
        pages.append((page.items, page.has_more))
        if not page.has_more:
            return pages
        after = page.cursor


def _sources(store: Any, now: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for limit in (1, 64):
        out[f"cancel/{limit}"] = _all_pages(store.workflow_cancel_candidates, limit=limit)
        out[f"frontier/{limit}"] = _all_pages(store.workflow_frontier_candidates, limit=limit)
        out[f"admission/{limit}"] = _all_pages(store.task_admission_candidates, now, limit=limit)
        out[f"dispatch/{limit}"] = _all_pages(store.task_dispatch_candidates, LOCAL, limit=limit)
        out[f"recovery/{limit}"] = _all_pages(store.task_recovery_candidates, limit=limit)
    return out


@pytest.mark.spec("WF-14")
def test_every_store_runs_the_scripted_workflow_to_the_reference_state(
    cluster_on_schema: tuple[str, str, ClusterStore], tmp_path: Path
) -> None:
    reference = ReferenceStore()
    edge = EdgeStore(tmp_path / "edge.sqlite3")
    _, _, cluster = cluster_on_schema
    compared: list[int] = []

    def same_sources(now: int) -> None:
        want = _sources(reference, now)
        assert _sources(edge, now) == want
        assert _sources(cluster, now) == want
        compared.append(sum(len(items) for pages in want.values() for items, _ in pages))

    try:
        seen = drive(reference, edge, cluster, after_step=same_sources)
        want = reference.project()
        assert edge.project() == want
    finally:
        edge.close()
    assert cluster.project() == want
    assert {r["status"] for r in want["runs"]} == {"succeeded", "cancelled"}
    assert len(want["task_admissions"]) == 4  # build, test twice (a retry epoch), only
    # Each replay answered without a write: the admission's (§4.3), a second prepare (one
    # spawn), a completion's and the convergence's lost responses (WF-18).
    assert seen.count("admit_task:replayed:existing") == 3
    assert seen.count("prepare_task:raced:NOT_ELIGIBLE") == 3
    assert seen.count("complete_task:replayed:already_terminal") == 3
    assert "converge_workflow_cancel:rejected:LIVE_EXECUTION" in seen
    assert seen[-1] == "converge_workflow_cancel:replayed:already_terminal"
    # The sources were compared after every step, and they did select things.
    assert len(compared) == len(seen)
    assert sum(compared) > 0


@pytest.mark.spec("WF-01")
def test_a_cluster_replica_cycle_runs_the_frontier_and_task_admission(
    cluster_on_schema: tuple[str, str, ClusterStore],
) -> None:
    """O-5 phases 4-5 on a replica (decision WF-8 budgets): one cycle promotes the Workflow's
    first step and admits its Task Attempt, at database time; the second step waits for it."""
    _, _, cluster = cluster_on_schema
    plan = (
        PinnedStep("build", "sr-c-build", "task-build", 1, LOCAL),
        PinnedStep("test", "sr-c-test", "task-test", 1, LOCAL, ("build",)),
    )
    admit = AdmitWorkflow("wf-cluster", "project", "plan", PLAN_DIGEST, plan)
    assert execute_workflow(cluster, admit, 1_000).kind.value == "applied"
    scheduler = ClusterScheduler(ClusterRuntime(cluster), ClusterTaskStore(cluster))
    result = scheduler.cycle.run_once()
    assert result.failed is None, result.code
    done = dict(result.completed)
    frontier, admission = done[ClusterStep.WORKFLOW_FRONTIER], done[ClusterStep.TASK_ADMISSION]
    assert isinstance(frontier, WorkflowPhaseReport)
    assert isinstance(admission, WorkflowPhaseReport)
    assert frontier.outcomes == [("wf-cluster", "applied", "applied")]
    assert admission.outcomes == [("sr-c-build", "applied", "admitted")]
    state = cluster.project()
    assert {s["step_key"]: s["status"] for s in state["step_runs"]} == {
        "build": "ready",
        "test": "pending",
    }
    assert [e["step_run_id"] for e in state["task_admissions"]] == ["sr-c-build"]
