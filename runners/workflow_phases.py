"""The Workflow scheduler phases every store runs the same way (SPEC §4.2; O-3 phases 3-4 on
the local scheduler, O-5 phases 4-5 on a cluster replica): the frontier and generation-bound
Task admission. Each pages its source (checked against `kernel.workflow`'s selection oracle)
within its budget row and runs the kernel's command per candidate in its own short transaction;
a page whose keys do not strictly follow the cursor fails the phase (B-61: the cycle ends, the
next cadence runs it again). No timer, no per-Workflow state, no rule of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from kernel import Candidate, Page
from kernel.specs import Paging
from kernel.workflow import AdmitTask, AdvanceFrontier, page_advances
from runners.engine import WorkflowStorageTransaction, in_transaction

__all__ = [
    "PhaseFailed",
    "WorkflowPhaseReport",
    "WorkflowPhaseStore",
    "frontier_phase",
    "run_pages",
    "task_admission_phase",
]

K = TypeVar("K", bound=tuple[object, ...])


class WorkflowPhaseStore(Protocol):
    """What the phases need of a store: its transactions and two Workflow sources."""

    def transaction(self) -> AbstractContextManager[WorkflowStorageTransaction]: ...

    def workflow_frontier_candidates(
        self, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]: ...

    def task_admission_candidates(
        self, observed_at_ms: int, limit: int, after: tuple[int, str, int] | None = None
    ) -> Page[tuple[int, str, int]]: ...


class PhaseFailed(Exception):
    """A Workflow phase's source broke the P-rules (a page too long, a cursor that did not
    advance): the phase fails and the cycle ends (B-61). Carries the phase name only."""


@dataclass(slots=True)
class WorkflowPhaseReport:
    """What one Workflow phase did: `(run or step, outcome kind, code)` per command, and the
    pages it read."""

    pages: int = 0
    outcomes: list[tuple[str, str, str]] = field(default_factory=list)
    stops: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def run_pages(
    name: str,
    source: Callable[[int, K | None], Page[K]],
    paging: Paging,
    act: Callable[[Candidate[K]], None],
    report: WorkflowPhaseReport,
) -> None:
    """At most `paging.pages` pages of `paging.page_size` (§4.2), the cursor strictly advancing."""
    after: K | None = None
    for _ in range(paging.pages):
        page = source(paging.page_size, after)
        report.pages += 1
        if not page_advances(after, page, paging.page_size):
            raise PhaseFailed(f"{name}: the source broke the page rules")
        for candidate in page.items:
            act(candidate)
        if not page.has_more or page.cursor is None:
            return
        after = page.cursor


def frontier_phase(
    store: WorkflowPhaseStore, paging: Paging, clock: Callable[[], int]
) -> WorkflowPhaseReport:
    """Phase 3 (§4.4, B-62): the frontier of each due Workflow, one transaction each."""
    report = WorkflowPhaseReport()

    def advance(candidate: Candidate[tuple[int, str]]) -> None:
        outcome = in_transaction(store, AdvanceFrontier(candidate.run_id), clock)
        report.outcomes.append((candidate.run_id, outcome.kind.value, outcome.code.value))

    run_pages("frontier", store.workflow_frontier_candidates, paging, advance, report)
    return report


def task_admission_phase(
    store: WorkflowPhaseStore, paging: Paging, clock: Callable[[], int]
) -> WorkflowPhaseReport:
    """Phase 4 (§4.3): generation-bound Task Attempt admission of each due `ready` StepRun at
    the epoch the page read (a StepRun that moved on since is `Raced`, never admitted twice)."""
    report = WorkflowPhaseReport()
    observed_at_ms = clock()  # P-5: one observation time for the phase's pages

    def source(limit: int, after: tuple[int, str, int] | None) -> Page[tuple[int, str, int]]:
        return store.task_admission_candidates(observed_at_ms, limit, after)

    def admit(candidate: Candidate[tuple[int, str, int]]) -> None:
        _, step_run_id, version = candidate.key
        command = AdmitTask(candidate.run_id, step_run_id, version)
        outcome = in_transaction(store, command, clock)
        report.outcomes.append((step_run_id, outcome.kind.value, outcome.code.value))

    run_pages("task admission", source, paging, admit, report)
    return report
