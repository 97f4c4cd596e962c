"""The edge runner's store: the storage port of `runners.engine` on one SQLite file.

Thin by design (ARCHITECTURE rules 1, 4, 5): a transaction loads the aggregate with a few
SELECTs, the engine calls the kernel, and each effect is one named statement
(`sql/statements.sql`) whose WHERE clause re-checks the effect's guard. Zero rows affected, or an
insert that collides with a primary key, a unique key or a vanished parent, raises
`StaleWrite`: a concurrent writer won and the engine reports `Raced`. Nothing here inspects a
status to decide what happens next; candidate selection is the SQL of `sql/sources.sql`, which
mirrors `kernel.selection`.

Durability (`synchronous`, see `runners.edge.connection` for the whole set-up): the default
`FULL` fsyncs the WAL at every commit, so no acknowledged transition is lost on power loss, at
the cost of one fsync per transaction; `NORMAL` syncs only at checkpoints (never corrupts, but
power loss may roll back the last acknowledged commits); `EXTRA` is `FULL` in WAL mode.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, TypeVar

from kernel import (
    Attempt,
    Lease,
    Run,
    RunAggregate,
    RunRetryPolicy,
)
from kernel.approved_action import (
    ACTION_EFFECT_TYPES,
    ActionAggregate,
    ActionCursor,
    ActionEvent,
    ActionSource,
    ActionStatus,
    AnyActionEffect,
    ApprovedAction,
    DuePage,
    action_event_from_row,
    action_from_row,
)
from kernel.workflow import TaskAdmission, WorkflowAdmission, WorkflowAggregate, WorkflowEffect
from runners.action_rows import action_effect_statement
from runners.edge import sources
from runners.edge.connection import DEFAULT_BUSY_TIMEOUT_MS, SqliteAuthority
from runners.edge.named_sql import APPROVAL, STATEMENTS, WORKFLOW
from runners.edge.projection import Projection, project_file
from runners.engine import StaleWrite
from runners.rows import ATTEMPT_TYPES, LEASE_TYPES, POLICY_TYPES, RUN_TYPES
from runners.sql_sources import SqlSources
from runners.workflow_rows import step_run_from_row, workflow_effect_statement

T = TypeVar("T")

#: Integrity failures that mean "another writer got there first", never a success.
STALE_CONSTRAINTS: Final = frozenset(
    {
        "SQLITE_CONSTRAINT_PRIMARYKEY",
        "SQLITE_CONSTRAINT_UNIQUE",
        "SQLITE_CONSTRAINT_FOREIGNKEY",
    }
)

# -- rows <-> entities (the mapping is shared: runners/rows.py) ---------------------------


def _entity(
    cls: Callable[..., T],
    types: Mapping[str, Callable[[Any], Any]],
    cursor: sqlite3.Cursor,
    row: tuple[Any, ...],
) -> T:
    names = [d[0] for d in cursor.description]
    fields: dict[str, Any] = {}
    for name, value in zip(names, row, strict=True):
        convert = types.get(name)
        fields[name] = value if value is None or convert is None else convert(value)
    return cls(**fields)


def _mappings(cursor: sqlite3.Cursor, rows: Sequence[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """`rows` of `cursor` as dicts keyed by column name (the approval codec's input)."""
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in rows]


# -- one transaction ------------------------------------------------------------------------
class EdgeTransaction:
    """One open `BEGIN IMMEDIATE` transaction (the engine's `StorageTransaction`)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def load_run(self, run_id: str) -> RunAggregate | None:
        conn = self._conn
        key = {"run_id": run_id}
        cur = conn.execute(STATEMENTS["select_run"], key)
        found = cur.fetchone()
        if found is None:
            return None
        run = _entity(Run, RUN_TYPES, cur, found)
        cur = conn.execute(STATEMENTS["select_attempts_of_run"], key)
        attempts = tuple(_entity(Attempt, ATTEMPT_TYPES, cur, r) for r in cur.fetchall())
        cur = conn.execute(STATEMENTS["select_policy_of_run"], key)
        policy_row = cur.fetchone()
        policy = (
            None if policy_row is None else _entity(RunRetryPolicy, POLICY_TYPES, cur, policy_row)
        )
        cur = conn.execute(STATEMENTS["select_leases_of_run"], key)
        leases = tuple(_entity(Lease, LEASE_TYPES, cur, r) for r in cur.fetchall())
        return RunAggregate(run=run, attempts=attempts, policy=policy, leases=leases)

    def load_run_of_attempt(self, attempt_id: str) -> RunAggregate | None:
        found = self._conn.execute(
            STATEMENTS["select_run_id_of_attempt"], {"attempt_id": attempt_id}
        ).fetchone()
        return None if found is None else self.load_run(str(found[0]))

    def load_workflow(self, run_id: str) -> WorkflowAggregate | None:
        """A Workflow aggregate (SPEC §4): the Run with its Attempts, then its admission,
        StepRuns and ledger, in this `BEGIN IMMEDIATE` transaction. `None` when the Run does
        not exist or is not a Workflow."""
        core = self.load_run(run_id)
        if core is None:
            return None
        key = {"run_id": run_id}
        cur = self._conn.execute(WORKFLOW["select_workflow_admission"], key)
        found = cur.fetchone()
        if found is None:
            return None
        admission = _entity(WorkflowAdmission, {}, cur, found)
        cur = self._conn.execute(WORKFLOW["select_step_runs_of_run"], key)
        names = [d[0] for d in cur.description]
        steps = tuple(step_run_from_row(dict(zip(names, r, strict=True))) for r in cur.fetchall())
        cur = self._conn.execute(WORKFLOW["select_task_admissions_of_run"], key)
        ledger = tuple(_entity(TaskAdmission, {}, cur, r) for r in cur.fetchall())
        return WorkflowAggregate(core=core, admission=admission, step_runs=steps, ledger=ledger)

    def load_workflow_of_attempt(self, attempt_id: str) -> WorkflowAggregate | None:
        found = self._conn.execute(
            STATEMENTS["select_run_id_of_attempt"], {"attempt_id": attempt_id}
        ).fetchone()
        return None if found is None else self.load_workflow(str(found[0]))

    def load_action(self, action_id: str) -> ActionAggregate | None:
        """An approved action and the Run under its Run id (the evidence; issue 19)."""
        cur = self._conn.execute(APPROVAL["select_action"], {"action_id": action_id})
        found = cur.fetchone()
        if found is None:
            return None
        action = action_from_row(_mappings(cur, [found])[0])
        return ActionAggregate(action, self.load_run(action.run_id))

    def execute(self, effect: WorkflowEffect | AnyActionEffect) -> None:
        """One effect, one named statement; a guard that no longer holds raises `StaleWrite`."""
        if isinstance(effect, ACTION_EFFECT_TYPES):
            name, params = action_effect_statement(effect)
        else:
            name, params = workflow_effect_statement(effect)
        self._write(name, params)

    def _write(self, name: str, params: Mapping[str, Any]) -> None:
        try:
            text = STATEMENTS.get(name) or WORKFLOW.get(name) or APPROVAL[name]
            cursor = self._conn.execute(text, params)
        except sqlite3.IntegrityError as exc:
            if exc.sqlite_errorname in STALE_CONSTRAINTS:
                raise StaleWrite(f"{name}: {exc.sqlite_errorname}") from None
            raise
        if cursor.rowcount != 1:
            raise StaleWrite(f"{name}: {cursor.rowcount} rows")


# -- the store ------------------------------------------------------------------------------
class EdgeStore(SqlSources):
    """The edge/standalone store on one SQLite file: `Storage` (`transaction()`), `Sources`
    (the seven candidate queries), `project()` (the backdoor reader), `reopen()`, `close()`."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "FULL",
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    ) -> None:
        self.authority = SqliteAuthority(
            path, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms
        )

    @property
    def path(self) -> Path:
        return self.authority.path

    # -- Storage ----------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[EdgeTransaction]:
        with self.authority.transaction() as conn:
            yield EdgeTransaction(conn)

    # -- Sources (runners.sql_sources) -----------------------------------------------------
    def _source_rows(self, name: str, params: Mapping[str, Any]) -> Sequence[Sequence[Any]]:
        with self.authority.reading() as conn:
            return conn.execute(sources.SOURCES[name], params).fetchall()

    # -- the approval domain (issue 19) ----------------------------------------------------
    def action_page(self, source: ActionSource, after: ActionCursor | None, limit: int) -> DuePage:
        """One page of a due index (`kernel.approved_action.selection.due_page`'s query)."""
        params = {
            "after_at": None if after is None else after.at_ms,
            "after_id": None if after is None else after.action_id,
            "limit_plus_one": limit + 1,
        }
        with self.authority.reading() as conn:
            rows = conn.execute(APPROVAL[source.value], params).fetchall()
        keys = tuple(ActionCursor(int(at), str(key)) for at, key in rows[:limit])
        return DuePage(keys, len(rows) > limit)

    def actions(
        self,
        *,
        status: ActionStatus | None = None,
        before: ActionCursor | None = None,
        limit: int = 64,
    ) -> list[ApprovedAction]:
        """Approval requests, newest first, strictly before `before` (`qlk approvals`)."""
        params = {
            "status": None if status is None else status.value,
            "before_at": None if before is None else before.at_ms,
            "before_id": None if before is None else before.action_id,
            "limit": limit,
        }
        with self.authority.reading() as conn:
            cur = conn.execute(APPROVAL["list_actions"], params)
            return [action_from_row(row) for row in _mappings(cur, cur.fetchall())]

    def action(self, action_id: str) -> tuple[ApprovedAction, list[ActionEvent]] | None:
        """One action and its Events, or None."""
        with self.authority.reading() as conn:
            cur = conn.execute(APPROVAL["select_action"], {"action_id": action_id})
            found = cur.fetchone()
            if found is None:
                return None
            action = action_from_row(_mappings(cur, [found])[0])
            cur = conn.execute(APPROVAL["select_action_events"], {"action_id": action_id})
            events = [action_event_from_row(row) for row in _mappings(cur, cur.fetchall())]
        return action, events

    # -- conformance and lifecycle ----------------------------------------------------------
    def project(self) -> Projection:
        """The canonical projection, read from the file by the backdoor reader (its own
        read-only connection: it sees exactly what is committed)."""
        if self.authority.closed:
            raise sqlite3.ProgrammingError("the edge store is closed")
        return project_file(self.path)

    def settings(self) -> dict[str, object]:
        return self.authority.settings()

    def reopen(self) -> None:
        self.authority.reopen()

    def close(self) -> None:
        self.authority.close()
