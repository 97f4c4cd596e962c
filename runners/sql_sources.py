"""The seven candidate sources answered by named SQL statements, for every SQL store (SPEC
§1.8.2, §1.8.3, §1.9, §2.2, §2.3, §3.16, P-rules).

`SqlSources` implements the source port (`runners.sources.Sources`) once, in terms of one method
a store provides, `_source_rows(name, params)`: run the named statement of its own
`sources.sql` with named parameters and return the rows. Each call is one statement with one
observation time (P-5) that reads `limit + 1` rows (P-2); a cursor selects the `_after`
variant of the statement, which keeps only keys strictly after it (P-3). The limit is checked as
the oracle checks it (P-1), and the keys are the ones `kernel.selection` documents, so a cursor
recorded in a trace means the same thing to every store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from kernel import Candidate, Page, check_limit

K = TypeVar("K", bound=tuple[object, ...])


class SqlSources:
    """Mixin: the source port over a store's named source statements."""

    def _source_rows(self, name: str, params: Mapping[str, Any]) -> Sequence[Sequence[Any]]:
        raise NotImplementedError  # each store runs its own statement text

    def _page(
        self,
        name: str,
        params: Mapping[str, Any],
        limit: int,
        build: Callable[[tuple[Any, ...]], Candidate[K]],
    ) -> Page[K]:
        check_limit(limit)
        rows = self._source_rows(name, {**params, "limit": limit})
        items = tuple(build(tuple(row)) for row in rows[:limit])
        return Page(items=items, has_more=len(rows) > limit)

    def lost_retry_candidates(
        self, observed_at_ms: int, limit: int
    ) -> Page[tuple[int, int, int, str]]:
        def build(row: tuple[Any, ...]) -> Candidate[tuple[int, int, int, str]]:
            run_id, attempt_id, k0, k1 = row
            return Candidate(run_id, attempt_id, (k0, k1, 0, run_id))

        params = {"observed_at_ms": observed_at_ms}
        return self._page("lost_retry_candidates", params, limit, build)

    def runtime_recovery_candidates(
        self, observed_at_ms: int, limit: int
    ) -> Page[tuple[int, int, str]]:
        def build(row: tuple[Any, ...]) -> Candidate[tuple[int, int, str]]:
            run_id, attempt_id, k0, k1 = row
            return Candidate(run_id, attempt_id, (k0, k1, attempt_id))

        params = {"observed_at_ms": observed_at_ms}
        return self._page("runtime_recovery_candidates", params, limit, build)

    def lease_expiry_candidates(
        self, observed_at_ms: int, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]:
        def build(row: tuple[Any, ...]) -> Candidate[tuple[int, str]]:
            run_id, attempt_id, k0 = row
            return Candidate(run_id, attempt_id, (k0, attempt_id))

        params: dict[str, Any] = {"observed_at_ms": observed_at_ms}
        if after is None:
            return self._page("lease_expiry_candidates", params, limit, build)
        params |= {"after_expires_at_ms": after[0], "after_attempt_id": after[1]}
        return self._page("lease_expiry_candidates_after", params, limit, build)

    def local_startup_candidates(
        self, limit: int, after: tuple[str] | None = None
    ) -> Page[tuple[str]]:
        def build(row: tuple[Any, ...]) -> Candidate[tuple[str]]:
            run_id, attempt_id = row
            return Candidate(run_id, attempt_id, (attempt_id,))

        if after is None:
            return self._page("local_startup_candidates", {}, limit, build)
        params = {"after_attempt_id": after[0]}
        return self._page("local_startup_candidates_after", params, limit, build)

    def orphaned_created_candidates(
        self, process_started_at_ms: int, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]:
        def build(row: tuple[Any, ...]) -> Candidate[tuple[int, str]]:
            run_id, k0 = row
            return Candidate(run_id, None, (k0, run_id))

        params: dict[str, Any] = {"process_started_at_ms": process_started_at_ms}
        if after is None:
            return self._page("orphaned_created_candidates", params, limit, build)
        params |= {"after_created_at_ms": after[0], "after_run_id": after[1]}
        return self._page("orphaned_created_candidates_after", params, limit, build)

    def cancel_convergence_candidates(self, limit: int) -> Page[tuple[int, str]]:
        def build(row: tuple[Any, ...]) -> Candidate[tuple[int, str]]:
            run_id, k0 = row
            return Candidate(run_id, None, (k0, run_id))

        return self._page("cancel_convergence_candidates", {}, limit, build)

    def local_dispatch_candidates(
        self, local_executor_type: str, limit: int, after: tuple[int, int, str] | None = None
    ) -> Page[tuple[int, int, str]]:
        def build(row: tuple[Any, ...]) -> Candidate[tuple[int, int, str]]:
            run_id, attempt_id, k0, k1 = row
            return Candidate(run_id, attempt_id, (k0, k1, attempt_id))

        params: dict[str, Any] = {"local_executor_type": local_executor_type}
        if after is None:
            return self._page("local_dispatch_candidates", params, limit, build)
        params |= {
            "after_queued_at_ms": after[0],
            "after_created_at_ms": after[1],
            "after_attempt_id": after[2],
        }
        return self._page("local_dispatch_candidates_after", params, limit, build)

    # -- Workflow sources (SPEC §4; kernel/workflow/selection.py is their oracle) -----------
    # One statement each: the first page passes a cursor below every key (keys are
    # non-negative times and non-empty ids), so the statement has no `_after` twin.
    def workflow_cancel_candidates(
        self, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]:
        def build(row: tuple[Any, ...]) -> Candidate[tuple[int, str]]:
            run_id, k0 = row
            return Candidate(run_id, None, (k0, run_id))

        k0, run_id = after if after is not None else (-1, "")
        params = {"after_k0": k0, "after_run_id": run_id}
        return self._page("workflow_cancel_candidates", params, limit, build)

    def workflow_frontier_candidates(
        self, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]:
        def build(row: tuple[Any, ...]) -> Candidate[tuple[int, str]]:
            run_id, k0 = row
            return Candidate(run_id, None, (k0, run_id))

        k0, run_id = after if after is not None else (-1, "")
        params = {"after_k0": k0, "after_run_id": run_id}
        return self._page("workflow_frontier_candidates", params, limit, build)

    def task_admission_candidates(
        self, observed_at_ms: int, limit: int, after: tuple[int, str, int] | None = None
    ) -> Page[tuple[int, str, int]]:
        def build(row: tuple[Any, ...]) -> Candidate[tuple[int, str, int]]:
            run_id, k0, step_run_id, version = row
            return Candidate(run_id, None, (k0, step_run_id, version))

        k0, step_run_id, version = after if after is not None else (-1, "", 0)
        params = {
            "observed_at_ms": observed_at_ms,
            "after_k0": k0,
            "after_step_run_id": step_run_id,
            "after_version": version,
        }
        return self._page("task_admission_candidates", params, limit, build)

    def task_dispatch_candidates(
        self, local_executor_type: str, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]:
        def build(row: tuple[Any, ...]) -> Candidate[tuple[int, str]]:
            run_id, attempt_id, k0 = row
            return Candidate(run_id, attempt_id, (k0, attempt_id))

        k0, attempt_id = after if after is not None else (-1, "")
        params = {
            "local_executor_type": local_executor_type,
            "after_k0": k0,
            "after_attempt_id": attempt_id,
        }
        return self._page("task_dispatch_candidates", params, limit, build)

    def task_recovery_candidates(
        self, limit: int, after: tuple[str] | None = None
    ) -> Page[tuple[str]]:
        def build(row: tuple[Any, ...]) -> Candidate[tuple[str]]:
            run_id, attempt_id = row
            return Candidate(run_id, attempt_id, (attempt_id,))

        params = {"after_attempt_id": after[0] if after is not None else ""}
        return self._page("task_recovery_candidates", params, limit, build)
