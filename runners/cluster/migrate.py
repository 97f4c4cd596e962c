"""The cluster schema migrator: `runners/cluster/migrations/NNNN_<name>.sql`, applied in order.

Like the edge migrator (runners/edge/migrate.py): each pending migration runs in one
transaction together with the row that records it in `schema_version` (version, name, SHA-256
of the file), so a crash or a terminated backend leaves the old or the new schema, never a part.
Re-running is a no-op. A database that records a migration this code does not know, or whose
checksum differs from the file, is refused (fail closed). On PostgreSQL several replicas may
start at once, so the migration transaction first takes a transaction-scoped advisory lock:
the second migrator waits, then finds the schema current and applies nothing.
"""

from __future__ import annotations

import re
from typing import Any, Final

import psycopg

from runners.cluster.named_sql import STATEMENTS
from runners.migration_files import Migration, MigrationError, load_migrations

_FILE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")

#: The advisory lock key of the migrator (an arbitrary constant, "ql3 migrate").
MIGRATION_LOCK_KEY: Final = 0x716C_335F_6D69_67


__all__ = ["Migration", "MigrationError", "applied_versions", "migrate", "migrations"]


def migrations() -> tuple[Migration, ...]:
    """Every migration file of this runner, by version (1..N without gaps)."""
    return load_migrations("runners.cluster")


def applied_versions(conn: psycopg.Connection[Any]) -> list[tuple[int, str, str]]:
    row = conn.execute(STATEMENTS["schema_version_table_exists"]).fetchone()
    if row is None or not row[0]:
        return []
    rows = conn.execute(STATEMENTS["select_schema_versions"]).fetchall()
    return [(int(v), str(n), str(c)) for v, n, c in rows]


def migrate(conn: psycopg.Connection[Any]) -> list[int]:
    """Apply the pending migrations in the connection's `search_path` schema; return the versions
    applied (empty when up to date). `conn` must not be inside a transaction."""
    known = migrations()
    by_version = {m.version: m for m in known}
    newly: list[int] = []
    with conn.transaction():
        conn.execute(STATEMENTS["migration_lock"], {"key": MIGRATION_LOCK_KEY})
        applied = applied_versions(conn)
        for version, name, checksum in applied:
            migration = by_version.get(version)
            if migration is None:
                raise MigrationError(
                    f"database schema version {version} ({name}) is newer than this runner"
                )
            if migration.checksum != checksum or migration.name != name:
                raise MigrationError(f"migration {version} changed since it was applied")
        done = {version for version, _, _ in applied}
        for migration in known:
            if migration.version in done:
                continue
            # A migration file is a fixed script of this package, run as it is (no parameters,
            # so psycopg sends it with the simple query protocol, several statements at once).
            conn.execute(migration.text.encode("utf-8"))
            conn.execute(
                STATEMENTS["insert_schema_version"],
                {
                    "version": migration.version,
                    "name": migration.name,
                    "checksum": migration.checksum,
                },
            )
            newly.append(migration.version)
    return newly
