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

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

import psycopg

from runners.cluster.named_sql import STATEMENTS

_FILE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")

#: The advisory lock key of the migrator (an arbitrary constant, "ql3 migrate").
MIGRATION_LOCK_KEY: Final = 0x716C_335F_6D69_67


class MigrationError(RuntimeError):
    """The database's recorded schema does not match this runner's migrations."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    text: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def migrations() -> tuple[Migration, ...]:
    """Every migration file, by version; versions must be 1..N without gaps."""
    folder = resources.files("runners.cluster").joinpath("migrations")
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match is not None:
            found.append(
                Migration(
                    int(match.group("version")),
                    f"{match.group('version')}_{match.group('name')}",
                    entry.read_text(encoding="utf-8"),
                )
            )
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise MigrationError("migration versions must be 1..N without gaps")
    return tuple(found)


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
