"""The source port: the bounded, read-only candidate queries every store answers (SPEC §1.8.2,
§1.8.3, §1.9, §2.2, §2.3, §3.16, P-rules).

A runner answers each with one SQL query (`limit + 1` rows for `has_more`, one observation time
per call, keyset cursors where the source pages); the reference store answers with the pure
functions of `kernel.selection`, which are the oracle the runners' queries are compared with in
conformance (`query` trace steps). The key types are the ones `kernel.selection` documents, so a
cursor recorded in a trace means the same thing to every store.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from kernel import Page, RunAggregate, selection
from kernel import workflow as workflow_selection
from kernel.workflow import WorkflowAggregate


class Sources(Protocol):
    def lost_retry_candidates(
        self, observed_at_ms: int, limit: int
    ) -> Page[tuple[int, int, int, str]]:
        """§1.8.2: `lost` Runs, then due `retry_wait` Runs (RETRY-07, RETRY-12, RETRY-15)."""
        ...

    def runtime_recovery_candidates(
        self, observed_at_ms: int, limit: int
    ) -> Page[tuple[int, int, str]]:
        """§2.3, the cluster runtime recovery source (REC-01, REC-02, REC-07); no cursor."""
        ...

    def lease_expiry_candidates(
        self, observed_at_ms: int, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]:
        """§3.16: expired `leased` leases of runtime Runs, keyset `(expires_at_ms, attempt_id)`."""
        ...

    def local_startup_candidates(
        self, limit: int, after: tuple[str] | None = None
    ) -> Page[tuple[str]]:
        """§2.2: local-executor started latest Attempts of ordinary runtime Runs (REC-07)."""
        ...

    def orphaned_created_candidates(
        self, process_started_at_ms: int, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]:
        """§2.2 (B-30, REC-12): runtime `created` Runs older than this process."""
        ...

    def cancel_convergence_candidates(self, limit: int) -> Page[tuple[int, str]]:
        """§1.9 (D-6): Runs with a cancellation intent and no live execution."""
        ...

    def local_dispatch_candidates(
        self, local_executor_type: str, limit: int, after: tuple[int, int, str] | None = None
    ) -> Page[tuple[int, int, str]]:
        """§1.8.3 (D-13): latest `claimed` Attempts of uncancelled queued local Runs."""
        ...


class SelectionSources:
    """The source port answered by the oracle itself: every source is the matching
    `kernel.selection` function over every stored aggregate (`aggregates()`), so the eligibility,
    order, keys, `limit + 1` and cursors are the oracle's by construction. For the reference
    store and for a store without a query language (docs/adapter-guide.md §8); a scan of the
    whole store per call, so it suits small stores. A SQL runner writes its own queries."""

    def aggregates(self) -> Iterable[RunAggregate]:
        """Every stored aggregate, read once per call."""
        raise NotImplementedError

    def lost_retry_candidates(
        self, observed_at_ms: int, limit: int
    ) -> Page[tuple[int, int, int, str]]:
        return selection.lost_retry_candidates(list(self.aggregates()), observed_at_ms, limit)

    def runtime_recovery_candidates(
        self, observed_at_ms: int, limit: int
    ) -> Page[tuple[int, int, str]]:
        return selection.runtime_recovery_candidates(list(self.aggregates()), observed_at_ms, limit)

    def lease_expiry_candidates(
        self, observed_at_ms: int, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]:
        return selection.lease_expiry_candidates(
            list(self.aggregates()), observed_at_ms, limit, after
        )

    def local_startup_candidates(
        self, limit: int, after: tuple[str] | None = None
    ) -> Page[tuple[str]]:
        return selection.local_startup_candidates(list(self.aggregates()), limit, after)

    def orphaned_created_candidates(
        self, process_started_at_ms: int, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]:
        return selection.orphaned_created_candidates(
            list(self.aggregates()), process_started_at_ms, limit, after
        )

    def cancel_convergence_candidates(self, limit: int) -> Page[tuple[int, str]]:
        return selection.cancel_convergence_candidates(list(self.aggregates()), limit)

    def local_dispatch_candidates(
        self, local_executor_type: str, limit: int, after: tuple[int, int, str] | None = None
    ) -> Page[tuple[int, int, str]]:
        return selection.local_dispatch_candidates(
            list(self.aggregates()), local_executor_type, limit, after
        )


class WorkflowSelectionSources:
    """The Workflow sources answered by the oracle (`kernel.workflow.selection`) over every
    stored Workflow (`workflows()`): the reference store's, as `SelectionSources` for Runs."""

    def workflows(self) -> Iterable[WorkflowAggregate]:
        raise NotImplementedError

    def workflow_cancel_candidates(
        self, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]:
        return workflow_selection.workflow_cancel_candidates(list(self.workflows()), limit, after)

    def workflow_frontier_candidates(
        self, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]:
        return workflow_selection.workflow_frontier_candidates(list(self.workflows()), limit, after)

    def task_admission_candidates(
        self, observed_at_ms: int, limit: int, after: tuple[int, str, int] | None = None
    ) -> Page[tuple[int, str, int]]:
        return workflow_selection.task_admission_candidates(
            list(self.workflows()), observed_at_ms, limit, after
        )

    def task_dispatch_candidates(
        self, local_executor_type: str, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]:
        return workflow_selection.task_dispatch_candidates(
            list(self.workflows()), local_executor_type, limit, after
        )

    def task_recovery_candidates(
        self, limit: int, after: tuple[str] | None = None
    ) -> Page[tuple[str]]:
        return workflow_selection.task_recovery_candidates(list(self.workflows()), limit, after)
