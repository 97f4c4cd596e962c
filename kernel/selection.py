"""Candidate selection as pure functions over a collection of aggregates (SPEC §1.8.2, §2.2,
§2.3, §1.9, §3.16, P-rules). These are the oracle each runner's SQL is compared with: the same
eligibility, the same total order, `limit + 1` for `has_more`, one observation time per call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from kernel.entities import RunAggregate
from kernel.specs.limits import PAGE_SIZE_MAX, PAGE_SIZE_MIN, STARTUP_RECOVERY_TOTAL_MAX
from kernel.specs.states import AttemptStatus, LeaseStatus, RunKind, RunOwner, RunStatus
from kernel.transitions.run_cancellation import has_no_live_execution
from kernel.transitions.run_lost_retry import is_lost_retry_eligible
from kernel.transitions.run_recovery import (
    is_local_startup_candidate,
    is_orphaned_created,
    is_runtime_recovery_candidate,
)

K = TypeVar("K", bound=tuple[object, ...])


class PageError(ValueError):
    """A page request outside the P-rules (bad limit, a cursor that does not advance)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field


@dataclass(frozen=True, slots=True)
class Candidate(Generic[K]):
    """One selected item: the Run, the Attempt it concerns (if any) and its keyset key."""

    run_id: str
    attempt_id: str | None
    key: K


@dataclass(frozen=True, slots=True)
class Page(Generic[K]):
    items: tuple[Candidate[K], ...]
    has_more: bool

    @property
    def cursor(self) -> K | None:
        """P-3: the key of the last item returned."""
        return self.items[-1].key if self.items else None


def check_limit(limit: int) -> int:
    """P-1: a page size is an integer 1..64."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise PageError("limit", "must be an integer")
    if not PAGE_SIZE_MIN <= limit <= PAGE_SIZE_MAX:
        raise PageError("limit", f"must be {PAGE_SIZE_MIN}..{PAGE_SIZE_MAX}")
    return limit


def _page(
    aggregates: Iterable[RunAggregate],
    select: Callable[[RunAggregate], Candidate[K] | None],
    limit: int,
    after: K | None = None,
) -> Page[K]:
    """P-2/P-3: order by the total key, keep items strictly after the cursor, read `limit + 1`
    to decide `has_more`, return at most `limit`."""
    chosen = [c for c in (select(agg) for agg in aggregates) if c is not None]
    return _page_from(chosen, limit, after)


def lost_retry_candidates(
    aggregates: Iterable[RunAggregate], observed_at_ms: int, limit: int
) -> Page[tuple[int, int, int, str]]:
    """§1.8.2 (B-25, RETRY-07, RETRY-12, RETRY-15): `lost` Runs by
    `(latest.finished_at_ms, run_id)`, then due `retry_wait` Runs by
    `(next_attempt_at_ms, run_id)`; a not-yet-due `retry_wait` Run is never returned (P-6).
    The key's first element (0 = lost, 1 = retry_wait) puts every `lost` first (O-9)."""

    def select(agg: RunAggregate) -> Candidate[tuple[int, int, int, str]] | None:
        if not is_lost_retry_eligible(agg):
            return None
        latest = agg.latest_attempt
        assert latest is not None
        run_id = agg.run.run_id
        if agg.run.status is RunStatus.LOST:
            finished = latest.finished_at_ms if latest.finished_at_ms is not None else 0
            return Candidate(run_id, latest.attempt_id, (0, finished, 0, run_id))
        due = agg.policy.next_attempt_at_ms if agg.policy is not None else None
        if due is None or due > observed_at_ms:
            return None
        return Candidate(run_id, latest.attempt_id, (1, due, 0, run_id))

    return _page(aggregates, select, limit)


def runtime_recovery_candidates(
    aggregates: Iterable[RunAggregate], observed_at_ms: int, limit: int
) -> Page[tuple[int, int, str]]:
    """§2.3 (REC-01, REC-02, REC-07, B-35): order `(lease.expires_at_ms nulls first,
    attempt_id)`; no cursor between cycles."""

    def select(agg: RunAggregate) -> Candidate[tuple[int, int, str]] | None:
        if not is_runtime_recovery_candidate(agg, observed_at_ms):
            return None
        latest = agg.latest_attempt
        assert latest is not None
        leased = agg.leased_lease(latest.attempt_id)
        key = (
            (0, 0, latest.attempt_id)
            if leased is None
            else (1, leased.expires_at_ms, latest.attempt_id)
        )
        return Candidate(agg.run.run_id, latest.attempt_id, key)

    return _page(aggregates, select, limit)


def lease_expiry_candidates(
    aggregates: Iterable[RunAggregate],
    observed_at_ms: int,
    limit: int,
    after: tuple[int, str] | None = None,
) -> Page[tuple[int, str]]:
    """§3.16 / ADR-0021 §5.4: `leased` leases of runtime Runs with
    `expires_at_ms <= observed_at_ms`, keyset `(expires_at_ms, attempt_id)`, the order of index
    `(status, expires_at_ms, attempt_id)`."""
    rows: list[Candidate[tuple[int, str]]] = []
    for agg in aggregates:
        if agg.run.owner is not RunOwner.RUNTIME:
            continue  # §3.16: runtime-owned Runs only
        for lease in agg.leases:
            if lease.status is LeaseStatus.LEASED and lease.expires_at_ms <= observed_at_ms:
                key = (lease.expires_at_ms, lease.attempt_id)
                rows.append(Candidate(agg.run.run_id, lease.attempt_id, key))
    by_key = {c.key: c for c in rows}
    return _page_from(list(by_key.values()), limit, after)


def _page_from(rows: Sequence[Candidate[K]], limit: int, after: K | None) -> Page[K]:
    check_limit(limit)
    ordered = sorted(rows, key=lambda c: c.key)
    if after is not None:
        ordered = [c for c in ordered if c.key > after]
    window = ordered[: limit + 1]
    return Page(items=tuple(window[:limit]), has_more=len(window) > limit)


def local_startup_candidates(
    aggregates: Iterable[RunAggregate], limit: int, after: tuple[str] | None = None
) -> Page[tuple[str]]:
    """§2.2 (REC-07): local-executor `starting|running` latest Attempts of ordinary runtime
    Runs, keyset `(attempt_id)` so that `unknown` candidates left in place are paged past."""

    def select(agg: RunAggregate) -> Candidate[tuple[str]] | None:
        if not is_local_startup_candidate(agg):
            return None
        latest = agg.latest_attempt
        assert latest is not None
        return Candidate(agg.run.run_id, latest.attempt_id, (latest.attempt_id,))

    return _page(aggregates, select, limit, after)


def local_startup_backlog_exceeds(aggregates: Iterable[RunAggregate]) -> bool:
    """D-11: count candidates with `LIMIT 1025` before any write; more than 1024 refuses
    startup with no side effect (`STARTUP_RECOVERY_BUDGET_EXHAUSTED`)."""
    count = 0
    for agg in aggregates:
        if is_local_startup_candidate(agg):
            count += 1
            if count > STARTUP_RECOVERY_TOTAL_MAX:
                return True
    return False


def orphaned_created_candidates(
    aggregates: Iterable[RunAggregate],
    process_started_at_ms: int,
    limit: int,
    after: tuple[int, str] | None = None,
) -> Page[tuple[int, str]]:
    """§2.2 (B-30): runtime `created` Runs created before this process started, keyset
    `(created_at_ms, run_id)`. Local startup only; the cluster source never selects them."""

    def select(agg: RunAggregate) -> Candidate[tuple[int, str]] | None:
        run = agg.run
        if is_orphaned_created(agg, process_started_at_ms):
            return Candidate(run.run_id, None, (run.created_at_ms, run.run_id))
        return None

    return _page(aggregates, select, limit, after)


def cancel_convergence_candidates(
    aggregates: Iterable[RunAggregate], limit: int
) -> Page[tuple[int, str]]:
    """§1.9 (D-6): runtime-owned ordinary Runs with an intent and no live execution (including
    Appendix E-1: a started remote Attempt whose lease T9 released), in
    `(cancel_requested_at_ms, run_id)` order. Workflow Runs are not selected."""

    def select(agg: RunAggregate) -> Candidate[tuple[int, str]] | None:
        run = agg.run
        if (
            run.owner is RunOwner.RUNTIME
            and run.kind is RunKind.ORDINARY
            and run.cancel_requested_at_ms is not None
            and not run.status.terminal
            and has_no_live_execution(agg)
        ):
            return Candidate(run.run_id, None, (run.cancel_requested_at_ms, run.run_id))
        return None

    return _page(aggregates, select, limit)


def local_dispatch_candidates(
    aggregates: Iterable[RunAggregate],
    local_executor_type: str,
    limit: int,
    after: tuple[int, int, str] | None = None,
) -> Page[tuple[int, int, str]]:
    """§1.8.3 (D-13): latest `claimed` Attempts of uncancelled runtime `queued` Runs with the
    local executor type, keyset `(queued_at_ms, attempt_created_at_ms, attempt_id)`."""

    def select(agg: RunAggregate) -> Candidate[tuple[int, int, str]] | None:
        run = agg.run
        latest = agg.latest_attempt
        if (
            run.owner is RunOwner.RUNTIME
            and run.status is RunStatus.QUEUED
            and not run.has_cancel_intent
            and latest is not None
            and latest.status is AttemptStatus.CLAIMED
            and latest.executor_type == local_executor_type
        ):
            queued = run.queued_at_ms if run.queued_at_ms is not None else run.created_at_ms
            key = (queued, latest.created_at_ms, latest.attempt_id)
            return Candidate(run.run_id, latest.attempt_id, key)
        return None

    return _page(aggregates, select, limit, after)


#: The same oracle under its profile-neutral name (one definition, ADR-0380 §1): on cluster it is
#: exactly the T1 candidate source, a granted Attempt's Run is `dispatching` and leaves it (D-13).
dispatch_candidates = local_dispatch_candidates
