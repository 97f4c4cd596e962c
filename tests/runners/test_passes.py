"""Lost-retry pages through the engine on the reference store (RETRY-13, RETRY-14, RETRY-17)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conformance.run.reference import ReferenceStore, ReferenceTransaction
from kernel import (
    AcknowledgeStarting,
    AdmitRun,
    Effect,
    ExpireWithLease,
    Fence,
    GrantLease,
    PolicyDefinition,
    Profile,
    RunAggregate,
    RunStatus,
    Safety,
)
from kernel.selection import Page, lost_retry_candidates
from runners.edge.store import EdgeStore
from runners.engine import Storage, StorageTransaction, execute
from runners.passes import LostRetryUnavailable, lease_expiry_page, lost_retry_page
from tests.support.sim import Sim, lease_token

POLICY = PolicyDefinition(3, True, Safety.IDEMPOTENT, 1_000, 60_000)


def lost_runs(store: ReferenceStore, count: int, now: int = 1_000_000) -> int:
    """Admit `count` Runs and lose each on edge (T8); returns the time after."""
    worker = Sim().sessions["w1"]
    for i in range(count):
        run_id, attempt_id = f"run-{i:02d}", f"a-{i:02d}"
        policy = POLICY if i % 3 else None  # every third Run fails DISABLED
        token = lease_token(attempt_id, 1)
        for command in (
            AdmitRun(run_id, attempt_id, "p", "t", 1, "shell", policy),
            GrantLease(run_id, attempt_id, worker, token, 30_000),
            AcknowledgeStarting(run_id, attempt_id, Fence("w1", "w1-s1", 1, 1, token, 1), worker),
        ):
            now += 1
            assert execute(store, command, now).kind.value == "applied"
    now += 60_000
    for i in range(count):
        expire = ExpireWithLease(f"run-{i:02d}", f"a-{i:02d}", 1, Profile.EDGE)
        assert execute(store, expire, now).kind.value == "applied"
    return now + 1


def _new_id(run_id: str) -> str:
    return f"{run_id}.2"


@pytest.mark.spec("RETRY-13", "RETRY-14")
def test_a_page_processes_at_most_limit_and_reports_has_more() -> None:
    """One call handles at most `limit` candidates, `has_more` says whether more exist, and the
    counts balance; the next call picks up the rest."""
    store = ReferenceStore()
    now = lost_runs(store, 7)
    first = lost_retry_page(store, store, now, 4, _new_id, fail_closed=False)
    assert (first.scanned, first.has_more) == (4, True)
    assert first.scheduled + first.failed == 4
    second = lost_retry_page(store, store, now, 4, _new_id, fail_closed=False)
    assert (second.scanned, second.has_more) == (3, False)
    statuses = sorted(a.run.status for a in store.aggregates())
    assert statuses.count(RunStatus.FAILED) == 3  # run-00, 03, 06 had no policy
    assert statuses.count(RunStatus.RETRY_WAIT) == 4
    later = now + 1_000  # the 1 s backoff of Attempt 1 has passed (RETRY-07: not before)
    due = lost_retry_page(store, store, later, 16, _new_id, fail_closed=False)
    assert (due.requeued, due.scanned, due.has_more) == (4, 4, False)
    assert lost_retry_candidates(store.aggregates(), later, 16).items == ()


class _FailingStore(ReferenceStore):
    """Fails the transaction of one Run (a storage error on that candidate)."""

    def __init__(self, failing_run: str) -> None:
        super().__init__()
        self.failing_run = failing_run
        self.armed = False

    @contextmanager
    def transaction(self) -> Iterator[ReferenceTransaction]:
        with super().transaction() as tx:
            yield tx
            if self.armed and tx.load_run(self.failing_run) != self._committed(self.failing_run):
                raise OSError("disk full")

    def _committed(self, run_id: str) -> object:
        return next((a for a in self.aggregates() if a.run.run_id == run_id), None)


@pytest.mark.spec("RETRY-17")
def test_local_pages_count_errors_and_go_on_cluster_pages_stop_closed() -> None:
    """Local: the failing candidate is unchanged and counted `errored`, the rest proceed.
    Cluster: the page stops at the failing candidate; later candidates are untouched."""
    local = _FailingStore("run-01")
    now = lost_runs(local, 4)
    local.armed = True
    result = lost_retry_page(local, local, now, 16, _new_id, fail_closed=False)
    assert (result.scanned, result.errored) == (4, 1)
    by_id = {a.run.run_id: a.run.status for a in local.aggregates()}
    assert by_id["run-01"] is RunStatus.LOST
    assert by_id["run-02"] is RunStatus.RETRY_WAIT

    cluster = _FailingStore("run-01")
    now = lost_runs(cluster, 4)
    cluster.armed = True
    order = [c.run_id for c in lost_retry_candidates(cluster.aggregates(), now, 16).items]
    with pytest.raises(LostRetryUnavailable) as stopped:
        lost_retry_page(cluster, cluster, now, 16, _new_id, fail_closed=True)
    done = order.index("run-01")
    assert stopped.value.partial.scanned == done
    after = {a.run.run_id: a.run.status for a in cluster.aggregates()}
    for run_id in order[done:]:
        assert after[run_id] is RunStatus.LOST, run_id
    assert "disk full" not in str(stopped.value)


# -- the lease expiry scanner (§3.16) -----------------------------------------------------------
def _granted(store: Storage, count: int, now: int = 1_000_000) -> int:
    """`count` Runs with a `claimed` Attempt holding a lease that expires at `now + 30_000 + i`."""
    worker = Sim().sessions["w1"]
    for i in range(count):
        run_id, attempt_id = f"run-{i:02d}", f"a-{i:02d}"
        token = lease_token(attempt_id, 1)
        for command in (
            AdmitRun(run_id, attempt_id, "p", "t", 1, "shell", None),
            GrantLease(run_id, attempt_id, worker, token, 30_000),
        ):
            now += 1
            assert execute(store, command, now).kind.value == "applied"
    return now + 60_000


class _FailingLoad:
    """A transaction whose load of one Attempt fails (a lock or disk error)."""

    def __init__(self, inner: StorageTransaction, attempt_id: str) -> None:
        self.inner = inner
        self.attempt_id = attempt_id

    def load_run(self, run_id: str) -> RunAggregate | None:
        return self.inner.load_run(run_id)

    def load_run_of_attempt(self, attempt_id: str) -> RunAggregate | None:
        if attempt_id == self.attempt_id:
            raise OSError("disk full")
        return self.inner.load_run_of_attempt(attempt_id)

    def execute(self, effect: Effect) -> None:
        self.inner.execute(effect)


class _FailOn:
    """Any store, failing the transaction that loads one Attempt."""

    def __init__(self, inner: Storage, attempt_id: str) -> None:
        self.inner = inner
        self.attempt_id = attempt_id

    @contextmanager
    def transaction(self) -> Iterator[StorageTransaction]:
        with self.inner.transaction() as tx:
            yield _FailingLoad(tx, self.attempt_id)


class _Stale:
    def __init__(self, page: Page[tuple[int, str]]) -> None:
        self.page = page

    def lease_expiry_candidates(
        self, observed_at_ms: int, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]:
        return self.page


@pytest.fixture(params=["reference", "edge"])
def expiry_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """The oracle, and the edge runner on a real database file (INBOX-42 is CONF)."""
    if request.param == "reference":
        yield ReferenceStore()
        return
    store = EdgeStore(tmp_path / "edge.sqlite3")
    try:
        yield store
    finally:
        store.close()


@pytest.mark.spec("INBOX-42")
def test_the_expiry_scanner_stops_at_a_failure_and_returns_the_successful_prefix(
    expiry_store: Any,
) -> None:
    """INBOX-42: one page per call in `(expires_at_ms, attempt_id)` order; after a failure the
    cursor is the contiguous successful prefix's, and the failed item is processed next call
    (never skipped); with no failure the whole page is done, at most `limit` items."""
    store = expiry_store
    now = _granted(store, 5)
    failing = _FailOn(store, "a-02")
    first = lease_expiry_page(failing, store, now, 16, None, profile=Profile.CLUSTER)
    assert [a for a, _, _ in first.outcomes] == ["a-00", "a-01"]
    assert all(kind == "applied" for _, kind, _ in first.outcomes)
    assert first.failed
    leased = {x["attempt_id"] for x in store.project()["leases"] if x["status"] == "leased"}
    assert leased == {"a-02", "a-03", "a-04"}  # the failed item untouched, nothing skipped
    second = lease_expiry_page(store, store, now, 2, first.cursor, profile=Profile.CLUSTER)
    assert [a for a, _, _ in second.outcomes] == ["a-02", "a-03"]
    assert second.has_more
    third = lease_expiry_page(store, store, now, 2, second.cursor, profile=Profile.CLUSTER)
    assert [a for a, _, _ in third.outcomes] == ["a-04"]
    assert not third.has_more
    assert not lease_expiry_page(store, store, now, 16, None, profile=Profile.CLUSTER).outcomes


def test_an_item_whose_lease_is_gone_is_skipped_without_a_write() -> None:
    store = ReferenceStore()
    now = _granted(store, 1)
    page = store.lease_expiry_candidates(now, 16)
    assert len(page.items) == 1
    expire = ExpireWithLease("run-00", "a-00", 1, Profile.CLUSTER)
    assert execute(store, expire, now).kind.value == "applied"
    before = store.project()
    stale = _Stale(page)  # the page as read before the lease was released
    result = lease_expiry_page(store, stale, now, 16, None, profile=Profile.CLUSTER)
    assert result.outcomes == (("a-00", "skipped", "not_leased"),)
    assert store.project() == before
