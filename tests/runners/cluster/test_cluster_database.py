"""The cluster tests' database set-up (issue 5 item 6): a real server, one schema per test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg


def test_the_server_is_real_and_each_test_gets_an_empty_schema_of_its_own(
    pg_schema: tuple[psycopg.Connection[tuple[object, ...]], str],
) -> None:
    conn, name = pg_schema
    row = conn.execute("SELECT current_schema(), current_setting('server_version_num')").fetchone()
    assert row is not None
    assert row[0] == name
    assert int(str(row[1])) >= 120000  # a real PostgreSQL server, 12 or newer
    tables = conn.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = %(schema)s",
        {"schema": name},
    ).fetchone()
    assert tables == (0,)
    conn.execute("CREATE TABLE probe (x integer)")
    assert conn.execute("SELECT to_regclass('probe') IS NOT NULL").fetchone() == (True,)


def test_a_table_of_one_test_schema_is_invisible_from_another(
    pg_schema: tuple[psycopg.Connection[tuple[object, ...]], str], pg_dsn: str
) -> None:
    conn, name = pg_schema
    conn.execute("CREATE TABLE only_here (x integer)")
    with psycopg.connect(pg_dsn, autocommit=True) as other:
        assert other.execute("SELECT to_regclass('only_here')").fetchone() == (None,)
        found = other.execute(
            "SELECT count(*) FROM information_schema.tables "
            "WHERE table_schema = %(schema)s AND table_name = 'only_here'",
            {"schema": name},
        ).fetchone()
        assert found == (1,)


def test_under_ci_an_unreachable_server_fails_instead_of_skipping(tmp_path: Path) -> None:
    """`CI=true` with a DSN nobody listens on: the test fails (exit 1), it is not skipped."""
    root = Path(__file__).resolve().parents[3]
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--no-spec-trace",
            str(Path(__file__).resolve())
            + "::test_a_table_of_one_test_schema_is_invisible_from_another",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
            "CI": "true",
            "QL3_PG_DSN": "postgresql://postgres@127.0.0.1:1/test?connect_timeout=2",
        },
    )
    assert run.returncode == 1, run.stdout
    assert "under CI=true the cluster tests need a real server" in run.stdout
    assert "skipped" not in run.stdout
