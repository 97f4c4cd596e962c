"""The schema migrator: `runners/edge/migrations/NNNN_<name>.sql`, applied in order.

Each pending migration runs in one `BEGIN IMMEDIATE` transaction together with the row that
records it in `schema_version` (version, name, SHA-256 of the file), so a crash leaves either the
old or the new schema. Re-running is a no-op. A database that records a migration this code does
not know, or whose recorded checksum differs from the file, is refused (fail closed): the code
and the file disagree about the schema.
"""

from __future__ import annotations

import sqlite3

from runners.edge.named_sql import STATEMENTS
from runners.migration_files import Migration, MigrationError, load_migrations

__all__ = [
    "Migration",
    "MigrationError",
    "applied_versions",
    "migrate",
    "migrations",
    "split_statements",
]


def migrations() -> tuple[Migration, ...]:
    """Every migration file of this runner, by version (1..N without gaps)."""
    return load_migrations("runners.edge")


def split_statements(script: str) -> list[str]:
    """The statements of a migration script, split where SQLite says a statement is complete."""
    statements: list[str] = []
    pending: list[str] = []
    for line in script.splitlines():
        pending.append(line)
        text = "\n".join(pending)
        if sqlite3.complete_statement(text):
            statements.append(text.strip())
            pending = []
    rest = [line for line in pending if line.strip() and not line.lstrip().startswith("--")]
    if rest:
        raise MigrationError("a migration ends with an incomplete statement")
    return statements


def applied_versions(conn: sqlite3.Connection) -> list[tuple[int, str, str]]:
    (exists,) = conn.execute(STATEMENTS["schema_version_table_exists"]).fetchone()
    if not exists:
        return []
    rows = conn.execute(STATEMENTS["select_schema_versions"]).fetchall()
    return [(int(v), str(n), str(c)) for v, n, c in rows]


def migrate(conn: sqlite3.Connection) -> list[int]:
    """Apply the pending migrations; return the versions applied (empty when up to date).
    `conn` must be in autocommit mode (`isolation_level=None`) and outside a transaction."""
    known = migrations()
    conn.execute(STATEMENTS["begin_immediate"])
    try:
        applied = applied_versions(conn)
        by_version = {m.version: m for m in known}
        for version, name, checksum in applied:
            migration = by_version.get(version)
            if migration is None:
                raise MigrationError(
                    f"database schema version {version} ({name}) is newer than this runner"
                )
            if migration.checksum != checksum or migration.name != name:
                raise MigrationError(f"migration {version} changed since it was applied")
        done = {version for version, _, _ in applied}
        newly: list[int] = []
        for migration in known:
            if migration.version in done:
                continue
            for statement in split_statements(migration.text):
                conn.execute(statement)
            conn.execute(
                STATEMENTS["insert_schema_version"],
                {
                    "version": migration.version,
                    "name": migration.name,
                    "checksum": migration.checksum,
                },
            )
            newly.append(migration.version)
    except BaseException:
        if conn.in_transaction:
            conn.execute(STATEMENTS["rollback"])
        raise
    conn.execute(STATEMENTS["commit"])
    return newly
