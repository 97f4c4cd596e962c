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
from psycopg import errors, sql
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool

from kernel import (
    Attempt,
    Lease,
    Run,
    RunAggregate,
    RunRetryPolicy,
    WorkerSession,
    attempt_lock_key,
)
from kernel.workflow import TaskAdmission, WorkflowAdmission, WorkflowAggregate, WorkflowEffect
from runners.cluster.migrate import MIGRATION_LOCK_KEY, migrate
from runners.cluster.named_sql import PROJECTION, REGISTRY, SOURCES, STATEMENTS, WORKFLOW
from runners.cluster.session_rows import session_record, stored_view
from runners.engine import StaleWrite
from runners.rows import ATTEMPT_TYPES, LEASE_TYPES, POLICY_TYPES, RUN_TYPES
from runners.sql_sources import SqlSources
from runners.workflow_rows import step_run_from_row, workflow_effect_statement

Projection = dict[str, list[dict[str, Any]]]

#: Integrity failures that mean "another writer got there first", never a success.
STALE_ERRORS: Final = (errors.UniqueViolation, errors.ForeignKeyViolation)
#: Session states a failed command can leave behind on an unpooled connection (PG-10).
_MID_COMMAND: Final = frozenset({TransactionStatus.ACTIVE, TransactionStatus.UNKNOWN})

_TABLES: tuple[tuple[str, str], ...] = (
    ("runs", "project_runs"),
    ("attempts", "project_attempts"),
    ("policies", "project_policies"),
    ("leases", "project_leases"),
    ("events", "project_events"),
)


_WORKFLOW_TABLES: tuple[tuple[str, str], ...] = (
    ("workflow_admissions", "project_workflow_admissions"),
    ("step_runs", "project_step_runs"),
    ("task_admissions", "project_task_admissions"),
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
    """One open PostgreSQL transaction (the engine's `StorageTransaction`).

    Lock order per transaction (B-26, B-35, REC-06): the addressed Attempt's advisory lock,
    then the Run row, its Attempt rows, its policy row and its lease rows (`FOR UPDATE`).
    Exactly one advisory lock per transaction, always first, so two transactions can only
    wait on each other in the row locks of one Run, which they take in the same order.
    `trace`, when given, receives the name of every statement in the order it is sent (the
    lock-order test reads it)."""

    def __init__(self, conn: psycopg.Connection[Any], trace: list[str] | None = None) -> None:
        self._conn = conn
        self._trace = trace

    @property
    def connection(self) -> psycopg.Connection[Any]:
        return self._conn

    def _run(self, name: str, params: Mapping[str, Any]) -> psycopg.Cursor[Any]:
        if self._trace is not None:
            self._trace.append(name)
        # Looked up at call time, Run statements first (a test may plant an edited section).
        text = STATEMENTS[name] if name in STATEMENTS else WORKFLOW[name]
        return self._conn.execute(text, params)

    def _lock_attempt(self, attempt_id: str) -> None:
        self._run("attempt_lock", {"key": attempt_lock_key(attempt_id)})

    def load_run(self, run_id: str) -> RunAggregate | None:
        latest = self._run("select_latest_attempt_id_of_run", {"run_id": run_id}).fetchone()
        if latest is not None:
            self._lock_attempt(str(latest[0]))
        return self._load(run_id)

    def load_run_of_attempt(self, attempt_id: str) -> RunAggregate | None:
        self._lock_attempt(attempt_id)
        found = self._run("select_run_id_of_attempt", {"attempt_id": attempt_id}).fetchone()
        return None if found is None else self._load(str(found[0]))

    def _load(self, run_id: str) -> RunAggregate | None:
        key = {"run_id": run_id}
        found = _rows(self._run("select_run", key))
        if not found:
            return None
        run = _entity(Run, RUN_TYPES, found[0])
        attempts = tuple(
            _entity(Attempt, ATTEMPT_TYPES, r)
            for r in _rows(self._run("select_attempts_of_run", key))
        )
        policies = _rows(self._run("select_policy_of_run", key))
        policy = _entity(RunRetryPolicy, POLICY_TYPES, policies[0]) if policies else None
        leases = tuple(
            _entity(Lease, LEASE_TYPES, r) for r in _rows(self._run("select_leases_of_run", key))
        )
        return RunAggregate(run=run, attempts=attempts, policy=policy, leases=leases)

    def worker_session(self, worker_id: str) -> WorkerSession | None:
        """The Worker's current registry session, for a fenced command or a grant in this
        transaction (SPEC §1.7, issue 17 item 2): its row locked `FOR SHARE` *after* the
        aggregate's locks (D-7: advisory(attempt) -> Run -> Attempt -> policy -> lease -> the
        session row; the registry's own transactions lock only that row, so no cycle). The
        status is as stored; the command's guard compares the expiry with its own observation
        time. `None`: the control plane does not know the Worker."""
        if self._trace is not None:
            self._trace.append("select_worker_session_for_share")
        row = self._conn.execute(
            REGISTRY["select_worker_session_for_share"], {"worker_id": worker_id}
        ).fetchone()
        return None if row is None else stored_view(session_record(row))

    def load_workflow(self, run_id: str) -> WorkflowAggregate | None:
        """A Workflow aggregate (SPEC §4): the Run row locked `FOR UPDATE` first (every Workflow
        transaction writes the Run, so that lock serializes them), then its Attempts, admission,
        StepRuns and ledger. `None` when the Run does not exist or is not a Workflow."""
        core = self._load(run_id)
        if core is None:
            return None
        key = {"run_id": run_id}
        admission = _rows(self._run("select_workflow_admission", key))
        if not admission:
            return None
        return WorkflowAggregate(
            core=core,
            admission=WorkflowAdmission(**admission[0]),
            step_runs=tuple(
                step_run_from_row(r) for r in _rows(self._run("select_step_runs_of_run", key))
            ),
            ledger=tuple(
                TaskAdmission(**r) for r in _rows(self._run("select_task_admissions_of_run", key))
            ),
        )

    def load_workflow_of_attempt(self, attempt_id: str) -> WorkflowAggregate | None:
        found = self._run("select_run_id_of_attempt", {"attempt_id": attempt_id}).fetchone()
        return None if found is None else self.load_workflow(str(found[0]))

    def execute(self, effect: WorkflowEffect) -> None:
        """One effect, one named statement; a guard that no longer holds raises `StaleWrite`."""
        name, params = workflow_effect_statement(effect)
        self._write(name, _pg_params(params))

    def _write(self, name: str, params: Mapping[str, Any]) -> None:
        try:
            cursor = self._run(name, params)
        except STALE_ERRORS as exc:
            raise StaleWrite(f"{name}: {type(exc).__name__}") from None
        if cursor.rowcount != 1:
            raise StaleWrite(f"{name}: {cursor.rowcount} rows")


class ClusterStore(SqlSources):
    """The cluster store on one PostgreSQL schema: `Storage` (`transaction()`), the sources,
    `project()` (the backdoor reader on a connection of its own), `reopen()`, `close()`.

    Connections: by default one connection of its own (a replica's single worker loop, and
    conformance). With `pool_size`, transactions and source queries take a connection from a
    `psycopg_pool.ConnectionPool` of that size, so one replica can serve concurrent callers
    (Worker calls, the cycle) without sharing a connection between threads. A connection the
    server terminated (`pg_terminate_backend`, a failover) is replaced on the next call: the
    transaction it was in rolled back on the server, so nothing is lost or half-done."""

    def __init__(
        self, dsn: str, schema: str, *, pool_size: int | None = None, create_schema: bool = False
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        if create_schema:
            # Replicas and Worker hosts start together: two concurrent `CREATE SCHEMA IF NOT
            # EXISTS` can both miss the schema and one then fails on pg_namespace's unique index,
            # so creators take the migrator's advisory lock first and the second finds it made.
            with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
                conn.execute(STATEMENTS["migration_lock"], {"key": MIGRATION_LOCK_KEY})
                conn.execute(
                    sql.SQL(STATEMENTS["create_schema_if_missing"]).format(
                        schema=sql.Identifier(schema)
                    )
                )
        #: When a list, every transaction appends the names of its statements (REC-06 test).
        self.statement_trace: list[str] | None = None
        self._conn: psycopg.Connection[Any] | None = self._connect()
        migrate(self._conn)
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        if pool_size is not None:
            self._pool = ConnectionPool(
                dsn,
                min_size=pool_size,
                max_size=pool_size,
                kwargs={"autocommit": True},
                configure=self._configure,
                open=True,
            )

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(STATEMENTS["set_search_path"], {"schema": self.schema})

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
        if self._conn.broken or self._conn.info.transaction_status in _MID_COMMAND:
            # Terminated by the server (its transaction rolled back there), or left mid-command
            # by a failure whose answer the client never read ("another command is already in
            # progress"): neither can carry the next transaction (PG-10). A session inside a
            # transaction (INTRANS) is a caller's own, never replaced under it.
            self._conn.close()
            self._conn = self._connect()
        return self._conn

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for one transaction or one statement (autocommit, search_path set)."""
        if self._pool is not None:
            with self._pool.connection() as conn:
                yield conn
        else:
            yield self._open()

    @contextmanager
    def transaction(self) -> Iterator[ClusterTransaction]:
        with self.connection() as conn, conn.transaction():
            yield ClusterTransaction(conn, self.statement_trace)

    def _source_rows(self, name: str, params: Mapping[str, Any]) -> Sequence[Sequence[Any]]:
        # One statement on an autocommit connection: one snapshot, one observation time.
        with self.connection() as conn:
            return conn.execute(SOURCES[name], params).fetchall()

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
            # The Workflow tables (SPEC §4.1), only when they hold a row: the projection of a
            # store without Workflows is the Run domain's alone (as on the edge runner).
            for table, statement in _WORKFLOW_TABLES:
                rows = _rows(conn.execute(WORKFLOW[statement]))
                for row in rows:
                    if "depends_on" in row:
                        row["depends_on"] = json.loads(row["depends_on"])
                if rows:
                    out[table] = rows
            conn.execute(STATEMENTS["commit"])
        return out

    def reopen(self) -> None:
        """Close the connection and open a new one, as a process restart does (a pooled store
        keeps its pool: the pool replaces broken connections itself)."""
        if self._conn is not None:
            self._conn.close()
        self._conn = self._connect()
        migrate(self._conn)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
