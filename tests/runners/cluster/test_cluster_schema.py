"""The cluster runner's schema (issue 5 item 1): its own versioned migration with the same
logical schema as the edge runner's, applied once, fail closed, safe with replicas racing."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from kernel import Attempt, Event, Lease, Run, RunRetryPolicy
from runners.cluster import migrate as migrate_module
from runners.cluster.migrate import MigrationError, migrate, migrations
from runners.edge.store import EdgeStore

Schema = tuple[psycopg.Connection[tuple[object, ...]], str]

#: Cluster-only tables (issue 17: the Worker registry and sealed offers, migration 0004): the edge
#: runner has no remote Workers. They are the *only* difference between the two logical schemas.
CLUSTER_ONLY_TABLES = {
    "worker_sessions": [
        "worker_id",
        "session_id",
        "generation",
        "status",
        "executor_types",
        "capacity",
        "public_key",
        "session_expires_at_ms",
        "registered_at_ms",
        "updated_at_ms",
        "version",
    ],
    "worker_offers": [
        "attempt_id",
        "lease_generation",
        "worker_id",
        "worker_session_id",
        "worker_generation",
        "sealed_token",
        "created_at_ms",
    ],
}
CLUSTER_ONLY_INDEXES = {"worker_offers_by_session"}
ALL_VERSIONS = [m.version for m in migrations()]

ENTITY_TABLES: dict[str, type] = {
    "runs": Run,
    "attempts": Attempt,
    "run_retry_policies": RunRetryPolicy,
    "run_dispatch_leases": Lease,
    "events": Event,
}


#: The edge-only approval domain (migration 0004; SPEC §5.4: the cluster profile refuses Approved
#: Actions, decision AA-D1): its tables and indexes, and the task column that asks for it (a
#: cluster revision never requires approval; its reads say `FALSE AS requires_approval`).
EDGE_ONLY_TABLES = frozenset({"approved_actions", "action_events"})
EDGE_ONLY_INDEXES = frozenset(
    {
        "approved_actions_dispatch_due",
        "approved_actions_recovery_due",
        "approved_actions_by_request",
    }
)
EDGE_ONLY_COLUMNS = {"task_revisions": "requires_approval"}


def _objects(conn: psycopg.Connection[Any], schema: str) -> dict[str, Any]:
    tables = {
        str(name): [
            str(column)
            for (column,) in conn.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = %(s)s AND table_name = %(t)s ORDER BY ordinal_position",
                {"s": schema, "t": name},
            ).fetchall()
        ]
        for (name,) in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %(s)s",
            {"s": schema},
        ).fetchall()
    }
    indexes = {
        str(name)
        for (name,) in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %(s)s", {"s": schema}
        ).fetchall()
    }
    return {"tables": tables, "indexes": indexes}


def _edge_objects(path: Path) -> dict[str, Any]:
    EdgeStore(path).close()
    with closing(sqlite3.connect(path)) as conn:
        names = conn.execute(
            "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        ).fetchall()
        tables = {
            name: [row[1] for row in conn.execute("SELECT * FROM pragma_table_info(?)", (name,))]
            for kind, name in names
            if kind == "table"
        }
    return {"tables": tables, "indexes": {name for kind, name in names if kind == "index"}}


def test_the_cluster_schema_has_the_edge_schemas_tables_columns_and_indexes(
    pg_schema: Schema, tmp_path: Path
) -> None:
    """The same logical schema on both runners: the same tables, the same columns in the same
    order (the kernel entity fields), and the same named indexes besides PostgreSQL's own key
    indexes (`*_pkey`, `*_key`); the cluster-only registry tables are the one stated difference
    (the edge runner has none of them), and the edge-only approval domain the other (§5.4)."""
    conn, name = pg_schema
    assert migrate(conn) == ALL_VERSIONS
    cluster = _objects(conn, name)
    edge = _edge_objects(tmp_path / "edge.sqlite3")
    assert not EDGE_ONLY_TABLES & set(cluster["tables"])
    assert not EDGE_ONLY_INDEXES & cluster["indexes"]
    for table in EDGE_ONLY_TABLES:
        del edge["tables"][table]
    assert edge["indexes"] >= EDGE_ONLY_INDEXES
    edge["indexes"] -= EDGE_ONLY_INDEXES
    for table, column in EDGE_ONLY_COLUMNS.items():
        assert edge["tables"][table][-1] == column  # added last, by 0004
        assert column not in cluster["tables"][table]
        edge["tables"][table] = edge["tables"][table][:-1]
    only = {t: cluster["tables"].pop(t) for t in CLUSTER_ONLY_TABLES}
    assert only == CLUSTER_ONLY_TABLES
    assert not set(CLUSTER_ONLY_TABLES) & set(edge["tables"])
    assert cluster["tables"] == edge["tables"]
    for table, entity in ENTITY_TABLES.items():
        assert cluster["tables"][table] == [f.name for f in dataclasses.fields(entity)], table
    named = {i for i in cluster["indexes"] if not i.endswith(("_pkey", "_key"))}
    assert named >= CLUSTER_ONLY_INDEXES
    assert not CLUSTER_ONLY_INDEXES & edge["indexes"]
    assert named - CLUSTER_ONLY_INDEXES == edge["indexes"]


def test_migration_records_its_version_and_rerunning_is_a_no_op(pg_schema: Schema) -> None:
    conn, name = pg_schema
    assert migrate(conn) == ALL_VERSIONS
    before = _objects(conn, name)
    initial, role, tasks, registry = migrations()[:4]
    assert conn.execute(
        "SELECT version, name, checksum FROM schema_version ORDER BY version"
    ).fetchall()[:4] == [
        (1, "0001_initial", initial.checksum),
        (2, "0002_worker_ingress_role", role.checksum),
        (3, "0003_tasks", tasks.checksum),
        (4, "0004_worker_registry", registry.checksum),
    ]
    assert migrate(conn) == []
    assert _objects(conn, name) == before


def test_a_changed_or_unknown_migration_is_refused(pg_schema: Schema) -> None:
    conn, _ = pg_schema
    migrate(conn)
    conn.execute("UPDATE schema_version SET checksum = %(c)s WHERE version = 1", {"c": "0" * 64})
    with pytest.raises(MigrationError, match="changed"):
        migrate(conn)
    conn.execute(
        "UPDATE schema_version SET checksum = %(c)s WHERE version = 1",
        {"c": migrations()[0].checksum},
    )
    future = len(migrations()) + 1
    conn.execute(
        "INSERT INTO schema_version VALUES (%(v)s, 'future', %(c)s)", {"v": future, "c": "1" * 64}
    )
    with pytest.raises(MigrationError, match="newer"):
        migrate(conn)


def test_a_failed_migration_leaves_no_partial_schema(
    pg_schema: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn, name = pg_schema
    broken = migrate_module.Migration(
        1, "0001_initial", migrations()[0].text + "\nCREATE TABLE runs (x integer);\n"
    )
    monkeypatch.setattr(migrate_module, "migrations", lambda: (broken,))
    with pytest.raises(psycopg.errors.DuplicateTable):
        migrate(conn)
    assert _objects(conn, name) == {"tables": {}, "indexes": set()}


def test_replicas_migrating_at_once_apply_the_migration_exactly_once(
    pg_schema: Schema, pg_dsn: str
) -> None:
    """Four replicas start together on one empty schema: the advisory lock serialises them, one
    applies versions 1 and 2, the others wait and apply nothing, and no one fails."""
    _, name = pg_schema
    barrier = threading.Barrier(4)
    results: list[list[int]] = []
    errors: list[BaseException] = []

    def replica() -> None:
        try:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(name)))
                barrier.wait(timeout=30)
                results.append(migrate(conn))
        except BaseException as exc:  # reported below, never lost in a thread
            errors.append(exc)

    threads = [threading.Thread(target=replica) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sorted(results) == [[], [], [], ALL_VERSIONS]
