"""Page steps of a trace: a read-only source query, one lost-retry page and one page of the lease
expiry scanner (SPEC §1.8.2, §2.2, §2.3, §3.16, §7; docs/trace-format.md).

Source-related checklist items (RETRY-07, RETRY-12, RETRY-13, RETRY-15, RETRY-17, REC-01, REC-02,
REC-07, REC-12) are about what a store's query returns and how a page of candidates is processed,
not about one command. A `query` step asks a store's source (`runners.sources.Sources`) for one
page and expects exactly the oracle's items, in order, and `has_more`; a `pass` step runs one
lost-retry page through the engine (`runners.passes.lost_retry_page`) and expects the kernel's
tally; a `pass lease_expiry_page` step runs one page of the expiry scanner
(`runners.passes.lease_expiry_page`, INBOX-42) and expects each item's outcome, the cursor of the
contiguous successful prefix, `failed` and `has_more`. All give every store the same meaning
through `run_page`, as `run_step` does for commands.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, cast

from conformance.run.faults import Fault, FaultKind, InjectedIOError
from kernel import Effect, LostRetryPageResult, Page, Profile, RunAggregate
from kernel.approved_action import ActionCursor, ActionSource, DuePage
from runners.engine import Storage, StorageTransaction
from runners.passes import (
    ExpiryPageResult,
    LostRetryUnavailable,
    lease_expiry_page,
    lost_retry_page,
)
from runners.sources import Sources

#: The sources a `query` step may name, with the parameters each needs beside `limit`.
SOURCE_PARAMS: dict[str, tuple[str, ...]] = {
    "lost_retry": ("observed_at_ms",),
    "runtime_recovery": ("observed_at_ms",),
    "lease_expiry": ("observed_at_ms", "after"),
    "local_startup": ("after",),
    "orphaned_created": ("process_started_at_ms", "after"),
    "cancel_convergence": (),
    "local_dispatch": ("local_executor_type", "after"),
    # The Workflow sources (SPEC §4.2-§4.5, `runners.sources.WorkflowSelectionSources`).
    "workflow_cancel": ("after",),
    "workflow_frontier": ("after",),
    "task_admission": ("observed_at_ms", "after"),
    "task_dispatch": ("local_executor_type", "after"),
    "task_recovery": ("after",),
    # The approval domain's two due indexes (SPEC §5.1, issue 19): `after` is `[at_ms, action_id]`.
    "approval_dispatch": ("after",),
    "approval_recovery": ("after",),
}

#: The capability of a store with Workflows (`conformance.run.adapter.WORKFLOW`): it also
#: answers the five Workflow sources.
WORKFLOW_SOURCES = "workflow"

#: The capability of a store with the approval domain (`conformance.run.adapter.APPROVED_ACTION`):
#: it also answers the two due indexes of `kernel.approved_action.selection`.
ACTION_SOURCES = "approved_action"

#: The capability an adapter must declare to be asked a source or a page mode.
SOURCE_CAPABILITIES: dict[str, str] = {
    "lost_retry": "sources",
    "runtime_recovery": "cluster_recovery",
    "lease_expiry": "sources",
    "local_startup": "local_recovery",
    "orphaned_created": "local_recovery",
    "cancel_convergence": "sources",
    "local_dispatch": "sources",
    "workflow_cancel": WORKFLOW_SOURCES,
    "workflow_frontier": WORKFLOW_SOURCES,
    "task_admission": WORKFLOW_SOURCES,
    "task_dispatch": WORKFLOW_SOURCES,
    "task_recovery": WORKFLOW_SOURCES,
    "approval_dispatch": ACTION_SOURCES,
    "approval_recovery": ACTION_SOURCES,
}
LOCAL_PAGES = "lost_retry_local"  # RETRY-17 local: errored candidates are counted, page goes on
CLUSTER_PAGES = "lost_retry_cluster"  # RETRY-17 cluster: the first error stops the page closed


@dataclass(frozen=True, slots=True)
class SourceQuery:
    """One page of one source. `after` is the keyset cursor (a key of `kernel.selection`) for
    sources that page; the other parameters are the source's own (see `SOURCE_PARAMS`)."""

    source: str
    limit: int
    after: tuple[Any, ...] | None = None
    process_started_at_ms: int | None = None
    local_executor_type: str | None = None

    @property
    def capability(self) -> str:
        return SOURCE_CAPABILITIES[self.source]


@dataclass(frozen=True, slots=True)
class LostRetryPass:
    """One lost-retry page (§1.8.2). A requeue creates Attempt `<run_id>-<attempt_suffix>`
    (ids are inputs); `fail_closed` selects the cluster semantics of RETRY-17."""

    limit: int
    fail_closed: bool
    attempt_suffix: str

    @property
    def capability(self) -> str:
        return CLUSTER_PAGES if self.fail_closed else LOCAL_PAGES

    def new_attempt_id(self, run_id: str) -> str:
        return f"{run_id}-{self.attempt_suffix}"


@dataclass(frozen=True, slots=True)
class ExpiryPass:
    """One call of the lease expiry scanner (§3.16, INBOX-42): one page of the `lease_expiry`
    source after `after` (an `(expires_at_ms, attempt_id)` key, or None), each item expired
    with `expire_with_lease` under `profile` in its own transaction, stopping at the first
    failure. It needs only the `sources` capability: the writes are the store's own."""

    limit: int
    after: tuple[int, str] | None
    profile: str

    @property
    def capability(self) -> str:
        return SOURCE_CAPABILITIES["lease_expiry"]


PageRequest = SourceQuery | LostRetryPass | ExpiryPass


class ActionSources(Protocol):
    """The due indexes a store with the `approved_action` capability answers (SPEC §5.1; the
    edge and reference stores do): one page of `kernel.approved_action.selection.due_page`."""

    def action_page(
        self, source: ActionSource, after: ActionCursor | None, limit: int
    ) -> DuePage: ...


class WorkflowSources(Protocol):
    """The Workflow sources a store with the `workflow` capability answers (SPEC §4.2-§4.5;
    the edge, cluster and reference stores all do), with the keys of
    `kernel.workflow.selection`."""

    def workflow_cancel_candidates(
        self, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]: ...

    def workflow_frontier_candidates(
        self, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]: ...

    def task_admission_candidates(
        self, observed_at_ms: int, limit: int, after: tuple[int, str, int] | None = None
    ) -> Page[tuple[int, str, int]]: ...

    def task_dispatch_candidates(
        self, local_executor_type: str, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]: ...

    def task_recovery_candidates(
        self, limit: int, after: tuple[str] | None = None
    ) -> Page[tuple[str]]: ...


@dataclass(frozen=True, slots=True)
class PageResult:
    """What a page step returned: `page` (kind `page`) or, for a cluster page stopped closed,
    kind `error` with `LOST_RETRY_UNAVAILABLE` and the counts so far."""

    kind: str
    code: str | None
    page: dict[str, Any]


def page_view(page: Page[Any]) -> dict[str, Any]:
    """The canonical form of a source page: items as `[run_id, attempt_id]` in order, `has_more`
    and the cursor (the last item's key), as a trace stores it."""
    return {
        "items": [[c.run_id, c.attempt_id] for c in page.items],
        "has_more": page.has_more,
        "cursor": None if page.cursor is None else list(page.cursor),
    }


def tally_view(result: LostRetryPageResult) -> dict[str, Any]:
    return {
        "scanned": result.scanned,
        "scheduled": result.scheduled,
        "requeued": result.requeued,
        "failed": result.failed,
        "raced": result.raced,
        "errored": result.errored,
        "has_more": result.has_more,
    }


def expiry_view(result: ExpiryPageResult) -> dict[str, Any]:
    """The canonical form of an expiry scan call: each item's `[attempt_id, kind, code]` in
    order, the next cursor (`[expires_at_ms, attempt_id]` or None), `failed` and `has_more`."""
    return {
        "outcomes": [list(item) for item in result.outcomes],
        "cursor": None if result.cursor is None else list(result.cursor),
        "failed": result.failed,
        "has_more": result.has_more,
    }


def action_page_view(page: DuePage) -> dict[str, Any]:
    """The canonical form of a due page: the action ids in keyset order, `has_more` (the
    port's `truncated`) and the cursor (`[at_ms, action_id]` of the last item, or None)."""
    cursor = page.next_cursor
    return {
        "items": [key.action_id for key in page.keys],
        "has_more": page.truncated,
        "cursor": None if cursor is None else [cursor.at_ms, cursor.action_id],
    }


def query_action_page(sources: ActionSources, query: SourceQuery) -> dict[str, Any]:
    """Ask a store's due index for the page a `query approval_*` step names."""
    after = None if query.after is None else ActionCursor(int(query.after[0]), str(query.after[1]))
    return action_page_view(sources.action_page(ActionSource(query.source), after, query.limit))


def query_page(sources: Sources, query: SourceQuery, observed_at_ms: int) -> Page[Any]:
    """Ask a store's source for the page a `query` step names."""
    after: Any = query.after
    match query.source:
        case "lost_retry":
            return sources.lost_retry_candidates(observed_at_ms, query.limit)
        case "runtime_recovery":
            return sources.runtime_recovery_candidates(observed_at_ms, query.limit)
        case "lease_expiry":
            return sources.lease_expiry_candidates(observed_at_ms, query.limit, after)
        case "local_startup":
            return sources.local_startup_candidates(query.limit, after)
        case "orphaned_created":
            assert query.process_started_at_ms is not None
            return sources.orphaned_created_candidates(
                query.process_started_at_ms, query.limit, after
            )
        case "cancel_convergence":
            return sources.cancel_convergence_candidates(query.limit)
        case "local_dispatch":
            assert query.local_executor_type is not None
            return sources.local_dispatch_candidates(query.local_executor_type, query.limit, after)
    if query.source in WORKFLOW_QUERIES:
        return _workflow_page(cast(WorkflowSources, sources), query, observed_at_ms)
    raise ValueError(f"unknown source {query.source!r}")


WORKFLOW_QUERIES = frozenset(
    name for name, capability in SOURCE_CAPABILITIES.items() if capability == WORKFLOW_SOURCES
)
#: The approval domain's sources (`ActionSources`; their page has action ids for items).
ACTION_QUERIES = frozenset(
    name for name, capability in SOURCE_CAPABILITIES.items() if capability == ACTION_SOURCES
)


def _workflow_page(sources: WorkflowSources, query: SourceQuery, observed_at_ms: int) -> Page[Any]:
    """A Workflow source's page (the trace's `workflow` capability vouches for the store)."""
    after: Any = query.after
    match query.source:
        case "workflow_cancel":
            return sources.workflow_cancel_candidates(query.limit, after)
        case "workflow_frontier":
            return sources.workflow_frontier_candidates(query.limit, after)
        case "task_admission":
            return sources.task_admission_candidates(observed_at_ms, query.limit, after)
        case "task_dispatch":
            assert query.local_executor_type is not None
            return sources.task_dispatch_candidates(query.local_executor_type, query.limit, after)
        case "task_recovery":
            return sources.task_recovery_candidates(query.limit, after)
    raise ValueError(f"unknown source {query.source!r}")


class _FailingTransaction:
    def __init__(self, inner: StorageTransaction) -> None:
        self._inner = inner

    def load_run(self, run_id: str) -> RunAggregate | None:
        return self._inner.load_run(run_id)

    def load_run_of_attempt(self, attempt_id: str) -> RunAggregate | None:
        return self._inner.load_run_of_attempt(attempt_id)

    def execute(self, effect: Effect) -> None:
        raise InjectedIOError("injected I/O error in a page candidate's transaction")


class _CandidateFaultStorage:
    """Fails the first statement of transaction number `at_candidate` (1-based): that candidate's
    transaction rolls back with a storage error, as a lock or disk failure would."""

    def __init__(self, inner: Storage, at_candidate: int) -> None:
        self._inner = inner
        self._at = at_candidate
        self._opened = 0

    @contextmanager
    def transaction(self) -> Iterator[StorageTransaction]:
        self._opened += 1
        with self._inner.transaction() as tx:
            yield _FailingTransaction(tx) if self._opened == self._at else tx


def run_page(
    storage: Storage,
    sources: Sources,
    request: PageRequest,
    observed_at_ms: int,
    fault: Fault | None,
) -> PageResult:
    """Apply one page step to a store. A `pass` may carry `io_error` with `at_candidate`."""
    if isinstance(request, SourceQuery):
        if request.source in ACTION_QUERIES:
            # The trace's `approved_action` capability vouches for the store.
            return PageResult(
                "page", None, query_action_page(cast(ActionSources, sources), request)
            )
        return PageResult("page", None, page_view(query_page(sources, request, observed_at_ms)))
    target: Storage = storage
    if fault is not None and fault.kind is FaultKind.IO_ERROR and fault.at_candidate is not None:
        target = _CandidateFaultStorage(storage, fault.at_candidate)
    if isinstance(request, ExpiryPass):
        scanned = lease_expiry_page(
            target,
            sources,
            observed_at_ms,
            request.limit,
            request.after,
            profile=Profile(request.profile),
        )
        return PageResult("page", None, expiry_view(scanned))
    try:
        result = lost_retry_page(
            target,
            sources,
            observed_at_ms,
            request.limit,
            request.new_attempt_id,
            fail_closed=request.fail_closed,
        )
    except LostRetryUnavailable as stopped:
        return PageResult("error", stopped.code.value, tally_view(stopped.partial))
    return PageResult("page", None, tally_view(result))
