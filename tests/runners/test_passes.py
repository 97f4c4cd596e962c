"""Lost-retry pages through the engine on the reference store (RETRY-13, RETRY-14, RETRY-17)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from conformance.reference import ReferenceStore, ReferenceTransaction
from kernel import (
    AcknowledgeStarting,
    AdmitRun,
    ExpireWithLease,
    Fence,
    GrantLease,
    PolicyDefinition,
    Profile,
    RunStatus,
    Safety,
)
from kernel.selection import lost_retry_candidates
from runners.engine import execute
from runners.passes import LostRetryUnavailable, lost_retry_page
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
