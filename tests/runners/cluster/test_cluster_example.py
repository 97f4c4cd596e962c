"""The README's cluster example runs as written against a real server."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[3]


def test_the_cluster_example_drives_a_run_to_success(pg_dsn: str) -> None:
    schema = f"ql3_example_{uuid.uuid4().hex[:12]}"
    try:
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "cluster_first_run.py"), schema],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
            env={**os.environ, "QL3_PG_DSN": pg_dsn},
        )
        lines = done.stdout.splitlines()
        assert [line.split()[0] for line in lines[:6]] == [
            "admit_run",
            "grant_lease",
            "acknowledge_starting",
            "acknowledge_running",
            "complete_with_lease",
            "complete_with_lease",
        ]
        assert lines[4].endswith("applied (completed)")
        assert lines[5].endswith("replayed (already_terminal)")
        assert lines[6] == f"done: 1 Runs in schema {schema}"
        with psycopg.connect(pg_dsn) as conn:
            conn.execute("SELECT set_config('search_path', %(s)s, false)", {"s": schema})
            row = conn.execute("SELECT status FROM runs").fetchall()
        assert row == [("succeeded",)]
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
