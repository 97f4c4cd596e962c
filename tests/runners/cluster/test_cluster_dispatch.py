"""The cluster dispatch grant with sealed offers on a real PostgreSQL (issue 17 item 1's dispatch
phase; SPEC §1.7 T1, §3.2, Appendix D-13, E-2; LEASE-10).

Runs are admitted through the kernel (`ClusterRuntime.execute(AdmitRun)`); Workers register in the
registry with X25519 key pairs; `dispatch_grants` grants leases in D-13 order within capacity, and
each grant's offer holds the token sealed to the session's key."""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
import pytest
from nacl.public import PrivateKey, SealedBox

from kernel import AdmitRun, Applied, Run, SessionApplied, WorkerSession
from kernel.specs import LEASE_DURATION_DEFAULT_MS
from runners.cluster.dispatch import (
    discard_offer,
    discard_settled_offers,
    dispatch_grants,
    pending_offers,
)
from runners.cluster.registry import WorkerRegistry
from runners.cluster.runtime import ClusterRuntime
from runners.cluster.store import ClusterStore

SPEC = {"argv": ["true"]}


@pytest.fixture
def store(pg_dsn: str, pg_schema: tuple[psycopg.Connection[Any], str]) -> Iterator[ClusterStore]:
    s = ClusterStore(pg_dsn, pg_schema[1])
    try:
        yield s
    finally:
        s.close()


def _admit(store: ClusterStore, count: int, executor_type: str = "shell") -> list[str]:
    runtime = ClusterRuntime(store)
    attempts = []
    for i in range(count):
        attempt_id = f"a{i:03d}"
        outcome = runtime.execute(
            AdmitRun(
                run_id=f"r{i:03d}",
                attempt_id=attempt_id,
                project_id="p",
                task_id="t",
                task_revision=1,
                executor_type=executor_type,
            )
        )
        assert isinstance(outcome, Applied)
        attempts.append(attempt_id)
    return attempts


def _worker(
    store: ClusterStore, worker_id: str, capacity: int, types: tuple[str, ...] = ("shell",)
) -> tuple[WorkerSession, PrivateKey]:
    key = PrivateKey.generate()
    decision = WorkerRegistry(store).register(
        worker_id,
        uuid.uuid4().hex,
        executor_types=types,
        capacity=capacity,
        public_key=bytes(key.public_key),
    )
    assert isinstance(decision, SessionApplied)
    view = WorkerRegistry(store).session(worker_id)
    assert view is not None
    return view, key


def _rows(store: ClusterStore, statement: str) -> list[tuple[Any, ...]]:
    with store.connection() as conn:
        return conn.execute(statement).fetchall()


def _leases(store: ClusterStore) -> list[tuple[Any, ...]]:
    return _rows(
        store,
        "SELECT attempt_id, worker_id, lease_generation, token_digest, expires_at_ms"
        " - acquired_at_ms FROM run_dispatch_leases WHERE status = 'leased' ORDER BY attempt_id",
    )


def test_grants_follow_d13_order_within_capacity_and_offers_open_with_the_key(
    store: ClusterStore,
) -> None:
    attempts = _admit(store, 7)
    w1, k1 = _worker(store, "w1", 2)
    w2, k2 = _worker(store, "w2", 3)
    report = dispatch_grants(store)
    assert report.granted == 5
    assert [a for _r, a, _w in report.grants] == attempts[:5]  # D-13 key order
    leases = _leases(store)
    assert [row[0] for row in leases] == attempts[:5]
    by_worker = {w: sum(1 for row in leases if row[1] == w) for w in ("w1", "w2")}
    assert by_worker == {"w1": 2, "w2": 3}
    assert {row[4] for row in leases} == {LEASE_DURATION_DEFAULT_MS}  # E-2: 60 s
    assert _rows(store, "SELECT status FROM runs WHERE run_id IN ('r005', 'r006')") == [
        ("queued",),
        ("queued",),
    ]
    # The sealed token opens with the session's private key, and its digest is the lease's.
    digests = {row[0]: row[3] for row in leases}
    opened: dict[str, str] = {}
    for attempt_id, worker_id, sealed in _rows(
        store, "SELECT attempt_id, worker_id, sealed_token FROM worker_offers ORDER BY attempt_id"
    ):
        key = k1 if worker_id == "w1" else k2
        token = SealedBox(key).decrypt(bytes(sealed)).decode("ascii")
        assert hashlib.sha256(token.encode()).hexdigest() == digests[attempt_id]
        opened[attempt_id] = token
    assert sorted(opened) == attempts[:5]
    # The other session's key does not open it.
    sealed_w1 = _rows(store, "SELECT sealed_token FROM worker_offers WHERE worker_id = 'w1'")[0][0]
    with pytest.raises(Exception, match="decrypt"):
        SealedBox(k2).decrypt(bytes(sealed_w1))
    # The Worker's read builds the offers of its own session only.
    pending = pending_offers(store, w1, bytes(k1), lambda _run, _attempt: SPEC, 16)
    assert pending.unreadable == ()
    assert len(pending.offers) == 2
    for offer in pending.offers:
        assert offer.worker.session_id == w1.session_id
        assert offer.lease.lease_token.reveal() == opened[offer.candidate.attempt_id]
        assert offer.offer_id == offer.derived_offer_id()
        assert opened[offer.candidate.attempt_id] not in repr(pending)
    wrong_key = pending_offers(store, w1, bytes(k2), lambda _run, _attempt: SPEC, 16)
    assert (len(wrong_key.offers), len(wrong_key.unreadable)) == (0, 2)
    no_spec = pending_offers(store, w2, bytes(k2), lambda _run, _attempt: None, 16)
    assert (len(no_spec.offers), len(no_spec.unreadable)) == (0, 3)


@pytest.mark.spec("LEASE-10")
def test_no_raw_token_is_stored_anywhere(store: ClusterStore) -> None:
    _admit(store, 3)
    _w, key = _worker(store, "w1", 3)
    dispatch_grants(store)
    tokens = [
        SealedBox(key).decrypt(bytes(sealed)).decode("ascii")
        for (sealed,) in _rows(store, "SELECT sealed_token FROM worker_offers")
    ]
    assert len(tokens) == 3
    tables = [
        str(name)
        for (name,) in _rows(
            store,
            "SELECT table_name FROM information_schema.tables WHERE table_schema ="
            " current_schema()",
        )
    ]
    assert {"worker_offers", "worker_sessions", "run_dispatch_leases"} <= set(tables)
    with store.connection() as conn:
        for table in tables:
            # Every row of every table as text (bytea as hex, and as its raw bytes' text).
            dump = conn.execute(
                psycopg.sql.SQL("SELECT t::text FROM {} AS t").format(psycopg.sql.Identifier(table))
            ).fetchall()
            text = "\n".join(str(row[0]) for row in dump)
            for token in tokens:
                assert token not in text, table
                assert token.encode().hex() not in text, table


def test_a_failing_after_leaves_no_lease_and_no_offer(store: ClusterStore) -> None:
    _admit(store, 2)
    _worker(store, "w1", 2)

    def boom() -> None:
        raise RuntimeError("planted failure after the offer insert")

    with pytest.raises(RuntimeError, match="planted"):
        dispatch_grants(store, fail_after_grant=boom)
    assert _rows(store, "SELECT count(*) FROM run_dispatch_leases") == [(0,)]
    assert _rows(store, "SELECT count(*) FROM worker_offers") == [(0,)]
    assert _rows(store, "SELECT DISTINCT status FROM runs") == [("queued",)]
    assert dispatch_grants(store).granted == 2  # nothing half-done: the next call grants


def test_draining_offline_and_wrong_type_sessions_get_no_grant(store: ClusterStore) -> None:
    _admit(store, 4)
    reg = WorkerRegistry(store)
    drained, _k = _worker(store, "w1", 9)
    assert isinstance(reg.drain("w1", drained.session_id, drained.generation), SessionApplied)
    stopped, _k = _worker(store, "w2", 9)
    assert isinstance(reg.stop("w2", stopped.session_id, stopped.generation), SessionApplied)
    _worker(store, "w3", 9, types=("python",))
    report = dispatch_grants(store)
    assert report.granted == 0
    assert report.ends == (("python", "DISPATCH_NOTHING_TO_ACTIVATE"),)
    _worker(store, "w4", 1)
    report = dispatch_grants(store)
    assert [(a, w) for _r, a, w in report.grants] == [("a000", "w4")]
    assert report.ends[-1] == ("shell", "DISPATCH_NO_CAPACITY")


def test_settled_offers_are_cleaned_and_discard_removes_one(store: ClusterStore) -> None:
    _admit(store, 2)
    w1, _k = _worker(store, "w1", 2)
    dispatch_grants(store)
    assert discard_settled_offers(store, 16) == 0  # both leases are still leased
    assert discard_offer(store, w1, "a000", 1)
    assert not discard_offer(store, w1, "a000", 1)
    with store.connection() as conn:
        conn.execute(
            "UPDATE run_dispatch_leases SET status = 'released', release_reason ="
            " 'declined', released_at_ms = updated_at_ms WHERE attempt_id = 'a001'"
        )
    assert discard_settled_offers(store, 16) == 1
    assert _rows(store, "SELECT count(*) FROM worker_offers") == [(0,)]


def test_two_concurrent_dispatchers_never_double_grant_nor_overfill(
    store: ClusterStore, pg_dsn: str
) -> None:
    attempts = _admit(store, 40)
    _worker(store, "w1", 7)
    _worker(store, "w2", 9)
    stores = [ClusterStore(pg_dsn, store.schema) for _ in range(2)]
    barrier = threading.Barrier(2)
    reports: list[Any] = []
    failures: list[BaseException] = []

    def replica(s: ClusterStore) -> None:
        try:
            barrier.wait(timeout=30)
            for _ in range(4):
                reports.append(dispatch_grants(s, grants=16))
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=replica, args=(s,)) for s in stores]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        for s in stores:
            s.close()
    assert failures == []
    leases = _rows(
        store, "SELECT attempt_id, worker_id, status FROM run_dispatch_leases ORDER BY attempt_id"
    )
    assert len({row[0] for row in leases}) == len(leases) == 16  # no Attempt leased twice
    per_worker = {w: sum(1 for row in leases if row[1] == w) for w in ("w1", "w2")}
    assert per_worker == {"w1": 7, "w2": 9}  # filled, never overfilled
    assert sorted(row[0] for row in leases) == attempts[:16]  # D-13: the oldest first
    assert sum(r.granted for r in reports) == 16
    assert _rows(store, "SELECT count(*) FROM worker_offers") == [(16,)]


def test_execution_spec_for_gets_the_run(store: ClusterStore) -> None:
    _admit(store, 1)
    w1, k1 = _worker(store, "w1", 1)
    dispatch_grants(store)
    seen: list[Run] = []

    def spec_for(run: Run, _attempt_id: str) -> Mapping[str, object]:
        seen.append(run)
        return SPEC

    pending = pending_offers(store, w1, bytes(k1), spec_for, 4)
    assert [run.run_id for run in seen] == ["r000"]
    (offer,) = pending.offers
    assert offer.execution_spec == SPEC
