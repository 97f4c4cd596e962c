"""Least privilege on PostgreSQL (issue 5 item 5, SPEC FP-2 / CAD-18, docs/decisions.md PG-3):
the cluster migration creates the Worker-ingress role `ql3_worker_ingress`, which is denied
every write on runs, attempts, run_retry_policies and run_dispatch_leases (and on events and
schema_version). It may only read runs, attempts and run_dispatch_leases.

Each write is tried twice with the same statement: as the ingress role (refused with
InsufficientPrivilege, nothing changed) and as the owner in a rolled-back transaction (it does
change the table), so a schema that refused everyone, or a statement that could not succeed
anyway, would not pass."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql

from runners.cluster.migrate import migrate, migrations

Schema = tuple[psycopg.Connection[tuple[object, ...]], str]

ROLE = "ql3_worker_ingress"
RUN_DOMAIN = ("runs", "attempts", "run_retry_policies", "run_dispatch_leases")
ALL_TABLES = (*RUN_DOMAIN, "events", "schema_version")
READABLE = frozenset({"runs", "attempts", "run_dispatch_leases"})
DIGEST = "ab" * 32

#: r1 has Attempt a1 (leased, generation 1), Attempt a2, a policy and an Event; r2 is bare.
SEED = (
    "INSERT INTO runs (run_id, project_id, task_id, task_revision, executor_type, kind, owner,"
    " status, version, event_seq, created_at_ms, updated_at_ms) VALUES"
    " ('r1', 'p', 't', 1, 'shell', 'ordinary', 'runtime', 'dispatching', 3, 1, 0, 0),"
    " ('r2', 'p', 't', 1, 'shell', 'ordinary', 'runtime', 'queued', 1, 0, 0, 0)",
    "INSERT INTO attempts (attempt_id, run_id, number, status, executor_type, created_at_ms,"
    " lease_generation, lease_version) VALUES"
    " ('a1', 'r1', 1, 'claimed', 'shell', 0, 1, 1),"
    " ('a2', 'r1', 2, 'claimed', 'shell', 0, NULL, NULL)",
    "INSERT INTO run_retry_policies (run_id, max_attempts, retry_on_lost, safety,"
    " backoff_base_ms, backoff_max_ms, version, created_at_ms, updated_at_ms) VALUES"
    " ('r1', 3, true, 'idempotent', 100, 1000, 1, 0, 0)",
    "INSERT INTO run_dispatch_leases (attempt_id, run_id, lease_generation, status, version,"
    " worker_id, worker_session_id, worker_generation, token_digest, acquired_at_ms,"
    " renewed_at_ms, expires_at_ms, updated_at_ms) VALUES"
    " ('a1', 'r1', 1, 'leased', 1, 'w', 's', 1, '" + DIGEST + "', 0, 0, 1000, 0)",
    "INSERT INTO events (event_id, run_id, seq, type, actor, dedupe_key, at_ms, payload)"
    " VALUES ('e1', 'r1', 1, 'run.created', 'user', 'd1', 0, '{}')",
)

#: What the ingress may see, to compare before and after (owner's view).
SNAPSHOT = {
    "runs": "SELECT * FROM runs ORDER BY run_id",
    "attempts": "SELECT * FROM attempts ORDER BY attempt_id",
    "run_retry_policies": "SELECT * FROM run_retry_policies ORDER BY run_id",
    "run_dispatch_leases": (
        "SELECT * FROM run_dispatch_leases ORDER BY attempt_id, lease_generation"
    ),
    "events": "SELECT event_id, run_id, seq, payload::text FROM events ORDER BY event_id",
    "schema_version": "SELECT * FROM schema_version ORDER BY version",
}

#: One valid statement per (table, write): each would succeed for the owner.
WRITES: dict[tuple[str, str], str] = {
    ("runs", "INSERT"): (
        "INSERT INTO runs (run_id, project_id, task_id, task_revision, executor_type, kind,"
        " owner, status, version, event_seq, created_at_ms, updated_at_ms) VALUES"
        " ('r3', 'p', 't', 1, 'shell', 'ordinary', 'runtime', 'queued', 1, 0, 0, 0)"
    ),
    (
        "runs",
        "UPDATE",
    ): "UPDATE runs SET status = 'lost', version = version + 1 WHERE run_id = 'r1'",
    ("runs", "DELETE"): "DELETE FROM runs WHERE run_id = 'r2'",
    ("attempts", "INSERT"): (
        "INSERT INTO attempts (attempt_id, run_id, number, status, executor_type, created_at_ms)"
        " VALUES ('a3', 'r2', 1, 'claimed', 'shell', 0)"
    ),
    ("attempts", "UPDATE"): "UPDATE attempts SET status = 'lost' WHERE attempt_id = 'a1'",
    ("attempts", "DELETE"): "DELETE FROM attempts WHERE attempt_id = 'a2'",
    ("run_retry_policies", "INSERT"): (
        "INSERT INTO run_retry_policies (run_id, max_attempts, retry_on_lost, safety,"
        " backoff_base_ms, backoff_max_ms, version, created_at_ms, updated_at_ms) VALUES"
        " ('r2', 9, true, 'unknown', 0, 0, 1, 0, 0)"
    ),
    ("run_retry_policies", "UPDATE"): (
        "UPDATE run_retry_policies SET max_attempts = 99, version = version + 1 WHERE run_id = 'r1'"
    ),
    ("run_retry_policies", "DELETE"): "DELETE FROM run_retry_policies WHERE run_id = 'r1'",
    ("run_dispatch_leases", "INSERT"): (
        "INSERT INTO run_dispatch_leases (attempt_id, run_id, lease_generation, status, version,"
        " worker_id, worker_session_id, worker_generation, token_digest, acquired_at_ms,"
        " renewed_at_ms, expires_at_ms, updated_at_ms) VALUES"
        " ('a1', 'r1', 2, 'released', 1, 'w', 's', 1, '" + DIGEST + "', 0, 0, 0, 0)"
    ),
    ("run_dispatch_leases", "UPDATE"): (
        "UPDATE run_dispatch_leases SET expires_at_ms = 99999999, version = version + 1"
        " WHERE attempt_id = 'a1'"
    ),
    ("run_dispatch_leases", "DELETE"): "DELETE FROM run_dispatch_leases WHERE attempt_id = 'a1'",
    ("events", "INSERT"): (
        "INSERT INTO events (event_id, run_id, seq, type, actor, dedupe_key, at_ms, payload)"
        " VALUES ('e2', 'r1', 2, 'run.lost', 'worker', 'd2', 0, '{}')"
    ),
    ("events", "UPDATE"): "UPDATE events SET payload = '{\"forged\": true}' WHERE event_id = 'e1'",
    ("events", "DELETE"): "DELETE FROM events WHERE event_id = 'e1'",
    ("schema_version", "INSERT"): (
        "INSERT INTO schema_version VALUES (99, '0099_forged', repeat('0', 64))"
    ),
    ("schema_version", "UPDATE"): "UPDATE schema_version SET checksum = repeat('0', 64)",
    ("schema_version", "DELETE"): "DELETE FROM schema_version",
}
for _table in ALL_TABLES:
    WRITES[(_table, "TRUNCATE")] = {
        "runs": "TRUNCATE runs CASCADE",
        "attempts": "TRUNCATE attempts CASCADE",
        "run_retry_policies": "TRUNCATE run_retry_policies CASCADE",
        "run_dispatch_leases": "TRUNCATE run_dispatch_leases CASCADE",
        "events": "TRUNCATE events CASCADE",
        "schema_version": "TRUNCATE schema_version CASCADE",
    }[_table]


def _snapshot(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[Any, ...]]]:
    return {table: conn.execute(SNAPSHOT[table]).fetchall() for table in ALL_TABLES}


def _seeded(conn: psycopg.Connection[Any]) -> None:
    assert migrate(conn) == [m.version for m in migrations()]
    with conn.transaction():
        for statement in SEED:
            conn.execute(statement)


@pytest.fixture
def seeded(pg_schema: Schema) -> Schema:
    _seeded(pg_schema[0])
    return pg_schema


def _connect_in(dsn: str, schema: str, **kwargs: Any) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True, **kwargs)
    conn.execute("SELECT set_config('search_path', %(s)s, false)", {"s": schema})
    return conn


def _assert_every_write_refused(ingress: psycopg.Connection[Any], owner: Schema) -> None:
    conn, _ = owner
    before = _snapshot(conn)
    assert all(before[table] for table in ALL_TABLES)  # something to change in every table
    for (table, write), statement in WRITES.items():
        with pytest.raises(errors.InsufficientPrivilege, match="permission denied for table"):
            ingress.execute(statement)
        assert _snapshot(conn) == before, (table, write)
        # Positive control: the very same statement does change the table for the owner.
        with conn.transaction(force_rollback=True):
            conn.execute(statement)
            assert conn.execute(SNAPSHOT[table]).fetchall() != before[table], (table, write)
        assert _snapshot(conn) == before, (table, write)


@pytest.mark.spec("CAD-18")
def test_the_worker_ingress_role_is_refused_every_write_on_the_run_domain(
    seeded: Schema, pg_dsn: str
) -> None:
    _, name = seeded
    with _connect_in(pg_dsn, name) as ingress:
        ingress.execute("SET ROLE ql3_worker_ingress")
        assert ingress.execute("SELECT current_user").fetchone() == (ROLE,)
        _assert_every_write_refused(ingress, seeded)


@pytest.fixture
def login_member(pg_dsn: str) -> Iterator[str]:
    """A LOGIN role of this test only, a member of `ql3_worker_ingress` (as the Worker-ingress
    pool's user would be), dropped afterwards."""
    name = f"ql3_ingress_test_{uuid.uuid4().hex}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
        try:
            conn.execute(sql.SQL("GRANT ql3_worker_ingress TO {}").format(sql.Identifier(name)))
            yield name
        finally:
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.mark.spec("CAD-18")
def test_a_login_role_in_the_worker_ingress_role_connects_and_is_refused_every_write(
    seeded: Schema, pg_dsn: str, login_member: str
) -> None:
    _, name = seeded
    with _connect_in(pg_dsn, name, user=login_member) as ingress:
        assert ingress.execute("SELECT session_user").fetchone() == (login_member,)
        _assert_every_write_refused(ingress, seeded)


@pytest.mark.spec("CAD-18")
def test_the_worker_ingress_role_may_read_runs_attempts_and_leases_and_nothing_else(
    seeded: Schema, pg_dsn: str
) -> None:
    conn, name = seeded
    attributes = conn.execute(
        "SELECT rolcanlogin, rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls"
        " FROM pg_roles WHERE rolname = %(r)s",
        {"r": ROLE},
    ).fetchone()
    assert attributes == (False, False, False, False, False, False)
    privileges = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")
    for table in ALL_TABLES:
        for privilege in privileges:
            row = conn.execute(
                "SELECT has_table_privilege(%(r)s, %(t)s::regclass, %(p)s)",
                {"r": ROLE, "t": table, "p": privilege},
            ).fetchone()
            expected = privilege == "SELECT" and table in READABLE
            assert row == (expected,), (table, privilege)
    assert conn.execute(
        "SELECT has_schema_privilege(%(r)s, %(s)s, 'USAGE'),"
        " has_schema_privilege(%(r)s, %(s)s, 'CREATE')",
        {"r": ROLE, "s": name},
    ).fetchone() == (True, False)
    with _connect_in(pg_dsn, name) as ingress:
        ingress.execute("SET ROLE ql3_worker_ingress")
        assert ingress.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall() == [
            ("r1",),
            ("r2",),
        ]
        assert ingress.execute("SELECT count(*) FROM run_dispatch_leases").fetchone() == (1,)
        with pytest.raises(errors.InsufficientPrivilege):
            ingress.execute("SELECT * FROM run_retry_policies")
        with pytest.raises(errors.InsufficientPrivilege):
            ingress.execute("SELECT * FROM events")
        with pytest.raises(errors.InsufficientPrivilege):
            ingress.execute("CREATE TABLE inbox (x integer)")


def _migrate_in_threads(pg_dsn: str, schemas: list[str]) -> list[list[int]]:
    barrier = threading.Barrier(len(schemas))
    results: list[list[int]] = []
    errors_seen: list[BaseException] = []

    def replica(schema: str) -> None:
        try:
            with _connect_in(pg_dsn, schema) as conn:
                barrier.wait(timeout=30)
                results.append(migrate(conn))
        except BaseException as exc:  # reported below, never lost in a thread
            errors_seen.append(exc)

    threads = [threading.Thread(target=replica, args=(s,)) for s in schemas]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors_seen == []
    return results


@pytest.mark.spec("CAD-18")
def test_schemas_migrating_at_once_all_get_the_role_step(pg_schema: Schema, pg_dsn: str) -> None:
    """The role is cluster-wide, the migration per schema: several schemas migrating together
    all succeed, and each grants the ingress role only what it grants any schema."""
    conn, first = pg_schema
    others = [f"t_{uuid.uuid4().hex[:16]}" for _ in range(3)]
    for other in others:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(other)))
    try:
        results = _migrate_in_threads(pg_dsn, [first, *others])
        assert results == [[m.version for m in migrations()]] * 4
        for schema in (first, *others):
            row = conn.execute(
                "SELECT has_schema_privilege(%(r)s, %(s)s, 'USAGE'),"
                " has_table_privilege(%(r)s, format('%%I.runs', %(s)s::text), 'UPDATE'),"
                " has_table_privilege(%(r)s, format('%%I.runs', %(s)s::text), 'SELECT')",
                {"r": ROLE, "s": schema},
            ).fetchone()
            assert row == (True, False, True), schema
    finally:
        for other in others:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(other)))


def _role_step_as(role: str) -> str:
    """Migration 0002 with the role renamed, so a test can start from a role that does not
    exist yet without touching `ql3_worker_ingress`, which other schemas of the same server use
    (it can never be dropped while parallel tests migrate)."""
    role_step = migrations()[1]
    assert role_step.name == "0002_worker_ingress_role"
    return role_step.text.replace(ROLE, role)


@pytest.fixture
def scratch_role(pg_dsn: str) -> Iterator[str]:
    name = f"ql3_ingress_test_{uuid.uuid4().hex}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %(r)s", {"r": name})
        if exists.fetchone() is not None:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def _waits_on_a_lock(
    conn: psycopg.Connection[Any], pid: int, done: threading.Event, seconds: float = 10.0
) -> bool:
    """True once backend `pid` is waiting on a lock (and has not finished)."""
    for _ in range(int(seconds / 0.05)):
        row = conn.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %(pid)s", {"pid": pid}
        ).fetchone()
        if done.is_set():
            return False
        if row == ("Lock",):
            return True
        done.wait(0.05)
    return False


@pytest.mark.spec("CAD-18")
def test_two_migrations_creating_the_missing_role_at_once_both_commit(
    pg_schema: Schema, pg_dsn: str, scratch_role: str
) -> None:
    """The race the advisory lock does not cover (it is per database, roles are per cluster):
    A creates the role and has not committed; B, not seeing it, creates it too and waits on
    pg_authid's unique index; when A commits, B's CREATE ROLE fails and B goes on with the
    role A created. Both migrations commit and both schemas are granted to the one role."""
    conn, first = pg_schema
    second = f"t_{uuid.uuid4().hex[:16]}"
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(second)))
    step = _role_step_as(scratch_role).encode("utf-8")
    initial = migrations()[0].text.encode("utf-8")
    try:
        with _connect_in(pg_dsn, first) as a, _connect_in(pg_dsn, second) as b:
            b_done = threading.Event()
            b_errors: list[BaseException] = []

            def migrate_b() -> None:
                try:
                    with b.transaction():
                        b.execute(initial)
                        b.execute(step)
                except BaseException as exc:  # reported below
                    b_errors.append(exc)
                finally:
                    b_done.set()

            with a.transaction():
                a.execute(initial)
                a.execute(step)
                thread = threading.Thread(target=migrate_b)
                thread.start()
                assert _waits_on_a_lock(conn, b.info.backend_pid, b_done), b_errors
            thread.join(timeout=30)
        assert b_errors == []
        assert conn.execute(
            "SELECT count(*) FROM pg_roles WHERE rolname = %(r)s", {"r": scratch_role}
        ).fetchone() == (1,)
        for schema in (first, second):
            assert conn.execute(
                "SELECT has_schema_privilege(%(r)s, %(s)s, 'USAGE')",
                {"r": scratch_role, "s": schema},
            ).fetchone() == (True,)
    finally:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(second)))


@pytest.mark.spec("CAD-18")
def test_an_existing_superuser_role_of_that_name_fails_the_migration_closed(
    pg_schema: Schema, pg_dsn: str, scratch_role: str
) -> None:
    conn, _ = pg_schema
    conn.execute(sql.SQL("CREATE ROLE {} SUPERUSER").format(sql.Identifier(scratch_role)))
    conn.execute(migrations()[0].text.encode("utf-8"))
    with pytest.raises(errors.InsufficientPrivilege, match="must not be a superuser"):
        conn.execute(_role_step_as(scratch_role).encode("utf-8"))
