"""The durable Worker registry on a real PostgreSQL (issue 17 item 2; SPEC §1.1, §1.7, §3.8 D-8,
Appendix E-2, E-8, CAD-18): round trips at database time, the in-transaction session read of
fenced commands, and the Worker-ingress role's least privilege on the registry tables."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors

from kernel import SessionApplied, SessionRefused
from kernel.specs import SessionCode, SessionTrigger, WorkerSessionStatus
from runners.cluster.clock import InjectedClock
from runners.cluster.registry import WorkerRegistry
from runners.cluster.store import ClusterStore

KEY = bytes(range(32))
T0 = 5_000_000_000


@pytest.fixture
def store(pg_dsn: str, pg_schema: tuple[psycopg.Connection[Any], str]) -> Iterator[ClusterStore]:
    s = ClusterStore(pg_dsn, pg_schema[1])
    try:
        yield s
    finally:
        s.close()


def _register(reg: WorkerRegistry, worker_id: str = "w1", **kwargs: Any) -> SessionApplied:
    decision = reg.register(
        worker_id,
        kwargs.pop("session_id", uuid.uuid4().hex),
        executor_types=kwargs.pop("executor_types", ("shell",)),
        capacity=kwargs.pop("capacity", 2),
        public_key=KEY,
        **kwargs,
    )
    assert isinstance(decision, SessionApplied), decision
    return decision


def test_register_twice_is_generation_plus_one_with_a_new_session_id(store: ClusterStore) -> None:
    reg = WorkerRegistry(store)
    first = _register(reg)
    second = _register(reg)
    assert second.record.generation == first.record.generation + 1 == 2
    assert second.record.session_id != first.record.session_id
    stored = reg.record("w1")
    assert stored == second.record
    view = reg.session("w1")
    assert view is not None
    assert (view.session_id, view.generation, view.status) == (
        second.record.session_id,
        2,
        WorkerSessionStatus.ONLINE,
    )
    # The database time: the session lease runs from statement_timestamp(), not a host clock.
    with store.connection() as conn:
        row = conn.execute("SELECT floor(extract(epoch FROM now()) * 1000)::bigint").fetchone()
    assert row is not None
    assert abs(second.record.registered_at_ms - int(row[0])) < 600_000
    assert reg.session("nobody") is None


def test_resume_only_while_unexpired_and_heartbeat_after_expiry_is_refused(
    store: ClusterStore,
) -> None:
    clock = InjectedClock(T0)
    reg = WorkerRegistry(store, clock=clock)
    first = _register(reg, ttl_ms=10_000).record
    clock.set(T0 + 5_000)
    resumed = reg.resume("w1", first.session_id, first.generation, ttl_ms=10_000)
    assert isinstance(resumed, SessionApplied)
    assert (resumed.record.session_id, resumed.record.generation) == (first.session_id, 1)
    assert resumed.record.session_expires_at_ms == T0 + 15_000
    clock.set(T0 + 15_000)
    assert reg.heartbeat("w1", first.session_id, 1) == SessionRefused(
        SessionTrigger.HEARTBEAT, SessionCode.OFFLINE
    )
    assert reg.resume("w1", first.session_id, 1) == SessionRefused(
        SessionTrigger.RESUME, SessionCode.OFFLINE
    )
    view = reg.session("w1")
    assert view is not None
    assert view.status is WorkerSessionStatus.OFFLINE  # decided on read
    assert reg.record("w1") == resumed.record  # nothing was written by the refusals
    swept = reg.expire_sweep(16)
    assert [type(d) for d in swept] == [SessionApplied]
    stored = reg.record("w1")
    assert stored is not None
    assert stored.status is WorkerSessionStatus.OFFLINE
    assert reg.expire_sweep(16) == ()


def test_heartbeat_drain_stop_and_a_superseded_session(store: ClusterStore) -> None:
    clock = InjectedClock(T0)
    reg = WorkerRegistry(store, clock=clock)
    old = _register(reg).record
    new = _register(reg).record
    clock.set(T0 + 1_000)
    assert reg.heartbeat("w1", old.session_id, old.generation) == SessionRefused(
        SessionTrigger.HEARTBEAT, SessionCode.SUPERSEDED
    )
    beat = reg.heartbeat("w1", new.session_id, new.generation)
    assert isinstance(beat, SessionApplied)
    assert beat.record.session_expires_at_ms == T0 + 1_000 + 30_000
    drained = reg.drain("w1", new.session_id, new.generation)
    assert isinstance(drained, SessionApplied)
    view = reg.session("w1")
    assert view is not None
    assert view.status is WorkerSessionStatus.DRAINING
    stopped = reg.stop("w1", new.session_id, new.generation)
    assert isinstance(stopped, SessionApplied)
    assert stopped.record.status is WorkerSessionStatus.OFFLINE
    assert isinstance(reg.stop("w1", new.session_id, new.generation), SessionRefused)
    record = reg.record("w1")
    assert record is not None
    assert record.version == 5  # register, register, heartbeat, drain, stop


def test_the_fenced_commands_read_the_session_in_their_transaction(store: ClusterStore) -> None:
    reg = WorkerRegistry(store)
    record = _register(reg).record
    store.statement_trace = []
    with store.transaction() as tx:
        view = tx.worker_session("w1")
        assert tx.worker_session("w2") is None
    assert view is not None
    assert (view.session_id, view.generation, view.status) == (
        record.session_id,
        1,
        WorkerSessionStatus.ONLINE,
    )
    assert store.statement_trace == ["select_worker_session_for_share"] * 2


# -- CAD-18: the Worker-ingress role on the registry tables ------------------------------------


def _ingress(pg_dsn: str, schema: str, worker_id: str | None) -> psycopg.Connection[Any]:
    conn = psycopg.connect(pg_dsn, autocommit=True)
    conn.execute("SELECT set_config('search_path', %(s)s, false)", {"s": schema})
    conn.execute("SET ROLE ql3_worker_ingress")
    if worker_id is not None:
        conn.execute("SELECT set_config('ql3.worker_id', %(w)s, false)", {"w": worker_id})
    return conn


def _seed_offer(store: ClusterStore, worker_id: str, attempt_id: str) -> None:
    """An offer row (and the Run, Attempt and lease it references) written as the owner."""
    run_id = f"r-{attempt_id}"
    with store.connection() as conn, conn.transaction():
        conn.execute(
            "INSERT INTO runs (run_id, project_id, task_id, task_revision, executor_type, kind,"
            " owner, status, version, event_seq, created_at_ms, updated_at_ms) VALUES"
            " (%(r)s, 'p', 't', 1, 'shell', 'ordinary', 'runtime', 'dispatching', 2, 1, 0, 0)",
            {"r": run_id},
        )
        conn.execute(
            "INSERT INTO attempts (attempt_id, run_id, number, status, executor_type,"
            " created_at_ms, lease_generation, lease_version) VALUES"
            " (%(a)s, %(r)s, 1, 'claimed', 'shell', 0, 1, 1)",
            {"a": attempt_id, "r": run_id},
        )
        conn.execute(
            "INSERT INTO run_dispatch_leases (attempt_id, run_id, lease_generation, status,"
            " version, worker_id, worker_session_id, worker_generation, token_digest,"
            " acquired_at_ms, renewed_at_ms, expires_at_ms, updated_at_ms) VALUES"
            " (%(a)s, %(r)s, 1, 'leased', 1, %(w)s, 's', 1, repeat('ab', 32), 0, 0, 1000, 0)",
            {"a": attempt_id, "r": run_id, "w": worker_id},
        )
        conn.execute(
            "INSERT INTO worker_offers (attempt_id, lease_generation, worker_id,"
            " worker_session_id, worker_generation, sealed_token, created_at_ms) VALUES"
            " (%(a)s, 1, %(w)s, 's', 1, '\\x00', 0)",
            {"a": attempt_id, "w": worker_id},
        )


@pytest.mark.spec("CAD-18")
def test_the_ingress_role_gets_only_the_registry_privileges_it_needs(
    store: ClusterStore, pg_dsn: str
) -> None:
    expected = {
        "worker_sessions": {"SELECT", "INSERT", "UPDATE"},
        "worker_offers": {"SELECT", "DELETE"},
        "runs": {"SELECT"},
        "attempts": {"SELECT"},
        "run_dispatch_leases": {"SELECT"},
        "run_retry_policies": set(),
        "events": set(),
        "schema_version": set(),
        "tasks": set(),
        "task_revisions": set(),
        "task_schedules": set(),
    }
    privileges = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")
    with store.connection() as conn:
        for table, granted in expected.items():
            for privilege in privileges:
                row = conn.execute(
                    "SELECT has_table_privilege('ql3_worker_ingress', %(t)s::regclass, %(p)s)",
                    {"t": table, "p": privilege},
                ).fetchone()
                assert row == (privilege in granted,), (table, privilege)
        rls = conn.execute(
            "SELECT relname, relrowsecurity FROM pg_class WHERE relname IN"
            " ('worker_sessions', 'worker_offers') AND relnamespace = %(s)s::regnamespace"
            " ORDER BY relname",
            {"s": store.schema},
        ).fetchall()
    assert rls == [("worker_offers", True), ("worker_sessions", True)]


@pytest.mark.spec("CAD-18")
def test_the_ingress_role_touches_only_its_own_workers_rows(
    store: ClusterStore, pg_dsn: str
) -> None:
    reg = WorkerRegistry(store)
    _register(reg, "w1")
    _register(reg, "w2")
    _seed_offer(store, "w1", "a1")
    _seed_offer(store, "w2", "a2")
    with _ingress(pg_dsn, store.schema, "w1") as ingress:
        assert ingress.execute("SELECT worker_id FROM worker_sessions").fetchall() == [("w1",)]
        assert ingress.execute("SELECT attempt_id FROM worker_offers").fetchall() == [("a1",)]
        # Another Worker's row is invisible to UPDATE and DELETE; its own row may be renewed.
        updated = ingress.execute(
            "UPDATE worker_sessions SET session_expires_at_ms = 1, version = version + 1"
            " WHERE worker_id = 'w2'"
        )
        assert updated.rowcount == 0
        own = ingress.execute(
            "UPDATE worker_sessions SET version = version + 1 WHERE worker_id = 'w1'"
        )
        assert own.rowcount == 1
        with pytest.raises(errors.InsufficientPrivilege):  # row security's WITH CHECK
            ingress.execute("UPDATE worker_sessions SET worker_id = 'w2' WHERE worker_id = 'w1'")
        with pytest.raises(errors.InsufficientPrivilege):
            ingress.execute(
                "INSERT INTO worker_sessions VALUES ('w3', 's', 1, 'online', ARRAY['shell'], 1,"
                " %(k)s, 0, 0, 0, 1)",
                {"k": KEY},
            )
        assert ingress.execute("DELETE FROM worker_offers WHERE attempt_id = 'a2'").rowcount == 0
        assert ingress.execute("DELETE FROM worker_offers WHERE attempt_id = 'a1'").rowcount == 1
        denied = (
            "DELETE FROM worker_sessions WHERE worker_id = 'w1'",
            "TRUNCATE worker_sessions",
            "TRUNCATE worker_offers",
            "INSERT INTO worker_offers VALUES ('a1', 1, 'w1', 's', 1, '\\x00', 0)",
            "UPDATE worker_offers SET sealed_token = '\\x01'",
            "UPDATE run_dispatch_leases SET expires_at_ms = 99999999",
            "UPDATE runs SET status = 'lost'",
            "UPDATE attempts SET status = 'lost'",
            "DELETE FROM run_dispatch_leases",
            "DELETE FROM runs",
            "INSERT INTO run_retry_policies (run_id, max_attempts, retry_on_lost, safety,"
            " backoff_base_ms, backoff_max_ms, version, created_at_ms, updated_at_ms) VALUES"
            " ('r-a1', 9, true, 'unknown', 0, 0, 1, 0, 0)",
        )
        for statement in denied:
            with pytest.raises(errors.InsufficientPrivilege):
                ingress.execute(statement)
    with _ingress(pg_dsn, store.schema, None) as anonymous:
        # Without a worker id the ingress sees no registry row at all.
        assert anonymous.execute("SELECT count(*) FROM worker_sessions").fetchone() == (0,)
        assert anonymous.execute("SELECT count(*) FROM worker_offers").fetchone() == (0,)
    # The owner's view: w2's rows are untouched, w1's offer was discarded.
    with store.connection() as conn:
        assert conn.execute("SELECT attempt_id FROM worker_offers").fetchall() == [("a2",)]
        assert conn.execute(
            "SELECT count(*) FROM run_dispatch_leases WHERE expires_at_ms = 1000"
        ).fetchone() == (2,)
    w2 = reg.record("w2")
    assert w2 is not None
    assert w2.version == 1
