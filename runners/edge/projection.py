"""The backdoor reader (SPEC §7, ARCHITECTURE rule 6).

It opens its own read-only connection to the database file and reads the tables with the
statements of `sql/projection.sql`, bypassing the runner's loads and row mapping, so a runner
cannot hide a wrong row; and, being another connection, it sees only what was committed. It
builds exactly the canonical projection of `conformance.run.projection.project`: rows as dicts keyed
by the entity field names, sorted by primary key, enums as their values, booleans as booleans,
Event payloads as dicts, tokens only as the digests the tables hold. Conformance only: the
runtime's single connection (FP-2) is the store's own.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from runners.edge.named_sql import APPROVAL, PROJECTION, STATEMENTS, WORKFLOW

Projection = dict[str, list[dict[str, Any]]]

#: Projection table -> its statement in `sql/projection.sql`.
_TABLES: tuple[tuple[str, str], ...] = (
    ("runs", "project_runs"),
    ("attempts", "project_attempts"),
    ("policies", "project_policies"),
    ("leases", "project_leases"),
    ("events", "project_events"),
)


#: The Workflow tables (SPEC §4.1) -> their statements in `sql/workflow.sql`. Projected only when
#: they hold a row, so the projection of a store without Workflows is the Run domain's alone.
_WORKFLOW_TABLES: tuple[tuple[str, str], ...] = (
    ("workflow_admissions", "project_workflow_admissions"),
    ("step_runs", "project_step_runs"),
    ("task_admissions", "project_task_admissions"),
)


#: The approval domain's tables (issue 19) -> their statements in `sql/approved_action.sql`;
#: projected only when they hold a row, like the Workflow tables.
_APPROVAL_TABLES: tuple[tuple[str, str], ...] = (
    ("approved_actions", "project_approved_actions"),
    ("action_events", "project_action_events"),
)


def _convert(table: str, row: dict[str, Any]) -> dict[str, Any]:
    if table == "approved_actions" and row["policy_retry_on_lost"] is not None:
        row["policy_retry_on_lost"] = bool(row["policy_retry_on_lost"])
    elif table == "step_runs":
        row["depends_on"] = json.loads(row["depends_on"])
    elif table == "policies":
        row["retry_on_lost"] = bool(row["retry_on_lost"])
    elif table == "events":
        row["payload"] = json.loads(row["payload"])
    return row


def _read(conn: sqlite3.Connection, table: str, statement: str) -> list[dict[str, Any]]:
    cursor = conn.execute(statement)
    names = [d[0] for d in cursor.description]
    return [_convert(table, dict(zip(names, row, strict=True))) for row in cursor.fetchall()]


def read_only_uri(path: Path) -> str:
    return path.resolve().as_uri() + "?mode=ro"


def project_file(path: Path) -> Projection:
    """The canonical projection of the committed state of the file at `path`."""
    conn = sqlite3.connect(read_only_uri(path), uri=True, isolation_level=None)
    with closing(conn):
        conn.execute(STATEMENTS["begin_deferred"])  # one snapshot for all the tables
        out: Projection = {}
        for table, statement in _TABLES:
            out[table] = _read(conn, table, PROJECTION[statement])
        for table, statement in _WORKFLOW_TABLES:
            rows = _read(conn, table, WORKFLOW[statement])
            if rows:
                out[table] = rows
        for table, statement in _APPROVAL_TABLES:
            rows = _read(conn, table, APPROVAL[statement])
            if rows:
                out[table] = rows
        conn.execute(STATEMENTS["commit"])
    return out
