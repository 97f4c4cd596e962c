"""Workflow candidate selection as pure functions over Workflow aggregates (SPEC §4.2-§4.5,
D-15, P-rules): the oracle each runner's Workflow source SQL is compared with, as
`kernel.selection` is for Runs. Same eligibility (the `rules` predicates the transitions
re-check), same total order, `limit + 1` for `has_more`, one observation time per call.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from kernel.selection import Candidate, Page, _page_from
from kernel.specs.states import AttemptStatus
from kernel.workflow.entities import WorkflowAggregate
from kernel.workflow.rules import admission_due, dispatchable, frontier_due, needs_convergence

__all__ = [
    "page_advances",
    "task_admission_candidates",
    "task_dispatch_candidates",
    "task_recovery_candidates",
    "workflow_cancel_candidates",
    "workflow_frontier_candidates",
]

_STARTED = frozenset({AttemptStatus.STARTING, AttemptStatus.RUNNING})
K = TypeVar("K", bound=tuple[object, ...])


def workflow_cancel_candidates(
    workflows: Iterable[WorkflowAggregate], limit: int, after: tuple[int, str] | None = None
) -> Page[tuple[int, str]]:
    """Phase 1 (§4.4): Workflows not terminal with a cancellation intent; key
    `(cancel_requested_at_ms, run_id)`."""
    chosen = [
        Candidate(wf.run.run_id, None, (wf.run.cancel_requested_at_ms or 0, wf.run.run_id))
        for wf in workflows
        if needs_convergence(wf)
    ]
    return _page_from(chosen, limit, after)


def workflow_frontier_candidates(
    workflows: Iterable[WorkflowAggregate], limit: int, after: tuple[int, str] | None = None
) -> Page[tuple[int, str]]:
    """Phase 3 (§4.4): open Workflows with a `pending` StepRun to promote or cancel, or with
    every StepRun final; key `(created_at_ms, run_id)`."""
    chosen = [
        Candidate(wf.run.run_id, None, (wf.run.created_at_ms, wf.run.run_id))
        for wf in workflows
        if frontier_due(wf)
    ]
    return _page_from(chosen, limit, after)


def task_admission_candidates(
    workflows: Iterable[WorkflowAggregate],
    observed_at_ms: int,
    limit: int,
    after: tuple[int, str, int] | None = None,
) -> Page[tuple[int, str, int]]:
    """Phase 4 (§4.3): `ready` StepRuns due at `observed_at_ms` with no admission at their
    epoch; key `(ready_at_ms, step_run_id, version)` (the epoch rides along: the admission is
    keyed by it)."""
    chosen = [
        Candidate(wf.run.run_id, None, (step.ready_at_ms or 0, step.step_run_id, step.version))
        for wf in workflows
        for step in wf.step_runs
        if admission_due(wf, step, observed_at_ms)
    ]
    return _page_from(chosen, limit, after)


def task_dispatch_candidates(
    workflows: Iterable[WorkflowAggregate],
    local_executor_type: str,
    limit: int,
    after: tuple[int, str] | None = None,
) -> Page[tuple[int, str]]:
    """Phase 5, the Task half of D-15: dispatchable `claimed` Task Attempts of the local executor
    type (ledger entry, StepRun exactly `ready` at its epoch, parent `running` without intent);
    key `(admitted_at_ms, attempt_id)`."""
    chosen = []
    for wf in workflows:
        for entry in wf.ledger:
            attempt = wf.attempt(entry.attempt_id)
            if (
                attempt is not None
                and attempt.executor_type == local_executor_type
                and dispatchable(wf, attempt)
            ):
                key = (entry.admitted_at_ms, attempt.attempt_id)
                chosen.append(Candidate(wf.run.run_id, attempt.attempt_id, key))
    return _page_from(chosen, limit, after)


def task_recovery_candidates(
    workflows: Iterable[WorkflowAggregate], limit: int, after: tuple[str] | None = None
) -> Page[tuple[str]]:
    """§4.5: the started Task Attempts (`starting`/`running`) of every Workflow; key
    `(attempt_id,)`."""
    chosen = [
        Candidate(wf.run.run_id, a.attempt_id, (a.attempt_id,))
        for wf in workflows
        for a in wf.attempts
        if a.status in _STARTED
    ]
    return _page_from(chosen, limit, after)


def page_advances(previous: K | None, page: Page[K], limit: int) -> bool:
    """P-rules for a Workflow phase page (§4.2): at most `limit` items, each key strictly after
    the previous cursor and after each other. A page that breaks this fails the phase (and so
    ends the cycle, B-61): a broken source can never make a phase loop or exceed its budget."""
    if len(page.items) > limit:
        return False
    last = previous
    for item in page.items:
        if last is not None and not item.key > last:
            return False
        last = item.key
    return True
