"""The cluster runner's store: the storage port of `runners.engine` on PostgreSQL (psycopg 3).

As thin as the edge store (ARCHITECTURE rules 1, 4, 5): a transaction loads the aggregate with
`SELECT ... FOR UPDATE` in the kernel's lock order (B-35: Run, Attempts, policy, leases), the
engine calls the kernel, and each effect is one named statement (`sql/statements.sql`) whose
WHERE clause re-checks the effect's guard. Zero rows affected, or an insert that collides with
a key or a vanished parent, raises `StaleWrite`: a concurrent writer won and the engine
reports `Raced`. Row <-> entity mapping is shared with the edge store (`runners/rows.py`:
the same columns).

The schema lives in the connection's `search_path` (one schema per database, or per trace in
conformance); `ClusterStore` migrates it on open.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

import psycopg
from psycopg import errors

from kernel import (
    Attempt,
    Effect,
    Lease,
    Run,
    RunAggregate,
    RunRetryPolicy,
)
from runners.cluster.migrate import migrate
from runners.cluster.named_sql import PROJECTION, SOURCES, STATEMENTS
from runners.engine import StaleWrite
from runners.rows import ATTEMPT_TYPES, LEASE_TYPES, POLICY_TYPES, RUN_TYPES, effect_statement
from runners.sql_sources import SqlSources

Projection = dict[str, list[dict[str, Any]]]

#: Integrity failures that mean "another writer got there first", never a success.
STALE_ERRORS: Final = (errors.UniqueViolation, errors.ForeignKeyViolation)

_TABLES: tuple[tuple[str, str], ...] = (
    ("runs", "project_runs"),
    ("attempts", "project_attempts"),
    ("policies", "project_policies"),
    ("leases", "project_leases"),
    ("events", "project_events"),
)


def _rows(cursor: psycopg.Cursor[Any]) -> list[dict[str, Any]]:
    names = [d.name for d in cursor.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _entity(cls: Any, types: Mapping[str, Any], row: Mapping[str, Any]) -> Any:
    fields = {
        name: value if value is None or name not in types else types[name](value)
        for name, value in row.items()
    }
    return cls(**fields)


def _pg_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The edge mapping stores booleans as 0/1; PostgreSQL has a real BOOLEAN."""
    out = dict(params)
    if "retry_on_lost" in out and out["retry_on_lost"] is not None:
        out["retry_on_lost"] = bool(out["retry_on_lost"])
    return out


class ClusterTransaction:
    """One open PostgreSQL transaction (the engine's `StorageTransaction`)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def load_run(self, run_id: str) -> RunAggregate | None:
        conn = self._conn
        key = {"run_id": run_id}
        found = _rows(conn.execute(STATEMENTS["select_run"], key))
        if not found:
            return None
        run = _entity(Run, RUN_TYPES, found[0])
        attempts = tuple(
            _entity(Attempt, ATTEMPT_TYPES, r)
            for r in _rows(conn.execute(STATEMENTS["select_attempts_of_run"], key))
        )
        policies = _rows(conn.execute(STATEMENTS["select_policy_of_run"], key))
        policy = _entity(RunRetryPolicy, POLICY_TYPES, policies[0]) if policies else None
        leases = tuple(
            _entity(Lease, LEASE_TYPES, r)
            for r in _rows(conn.execute(STATEMENTS["select_leases_of_run"], key))
        )
        return RunAggregate(run=run, attempts=attempts, policy=policy, leases=leases)

    def load_run_of_attempt(self, attempt_id: str) -> RunAggregate | None:
        found = self._conn.execute(
            STATEMENTS["select_run_id_of_attempt"], {"attempt_id": attempt_id}
        ).fetchone()
        return None if found is None else self.load_run(str(found[0]))

    def execute(self, effect: Effect) -> None:
        """One effect, one named statement; a guard that no longer holds raises `StaleWrite`."""
        name, params = effect_statement(effect)
        self._write(name, _pg_params(params))

    def _write(self, name: str, params: Mapping[str, Any]) -> None:
        try:
            cursor = self._conn.execute(STATEMENTS[name], params)
        except STALE_ERRORS as exc:
            raise StaleWrite(f"{name}: {type(exc).__name__}") from None
        if cursor.rowcount != 1:
            raise StaleWrite(f"{name}: {cursor.rowcount} rows")


class ClusterStore(SqlSources):
    """The cluster store on one PostgreSQL schema: `Storage` (`transaction()`), `project()`
    (the backdoor reader on a second connection), `reopen()`, `close()`."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.schema = schema
        self._conn: psycopg.Connection[Any] | None = self._connect()
        migrate(self._conn)

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self.dsn, autocommit=True)
        try:
            conn.execute(STATEMENTS["set_search_path"], {"schema": self.schema})
        except BaseException:
            conn.close()
            raise
        return conn

    def _open(self) -> psycopg.Connection[Any]:
        if self._conn is None:
            raise psycopg.InterfaceError("the store is closed")
        return self._conn

    @contextmanager
    def transaction(self) -> Iterator[ClusterTransaction]:
        conn = self._open()
        with conn.transaction():
            yield ClusterTransaction(conn)

    def _source_rows(self, name: str, params: Mapping[str, Any]) -> Sequence[Sequence[Any]]:
        # One statement on the autocommit connection: one snapshot, one observation time.
        return self._open().execute(SOURCES[name], params).fetchall()

    def project(self) -> Projection:
        """The canonical projection of what is committed, read directly from the tables on a
        connection of its own, in one read-only repeatable-read snapshot."""
        with self._connect() as conn:
            conn.execute(STATEMENTS["begin_snapshot"])
            out: Projection = {}
            for table, statement in _TABLES:
                rows = _rows(conn.execute(PROJECTION[statement]))
                if table == "events":
                    for row in rows:  # JSONB arrives decoded; re-decode text defensively
                        if isinstance(row["payload"], str):
                            row["payload"] = json.loads(row["payload"])
                out[table] = rows
            conn.execute(STATEMENTS["commit"])
        return out

    def reopen(self) -> None:
        """Close the connection and open a new one, as a process restart does."""
        self.close()
        self._conn = self._connect()
        migrate(self._conn)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
