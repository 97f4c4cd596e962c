"""The throwaway local PostgreSQL (issue 5 item 6): without a DSN and without a server, the
cluster tests and `qlk conform --runner cluster` start one from the `pgserver` wheel, say so,
and remove it on exit. These tests start real servers (about 1-3 s each)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from conformance.run import local_server
from conformance.run.local_server import (
    UNPRIVILEGED_USER,
    NoPostgresError,
    ensure_dsn,
    throwaway_server,
)
from runners.cluster.migrate import applied_versions, migrate, migrations

NOBODY_ANSWERS = "postgresql://postgres@127.0.0.1:1/test?connect_timeout=2"
ROOT = Path(__file__).resolve().parents[3]


def _socket_directory(dsn: str) -> Path:
    return Path(str(conninfo_to_dict(dsn)["host"]))


def test_a_throwaway_server_takes_a_schema_and_the_cluster_migration_and_is_removed_on_exit() -> (
    None
):
    with throwaway_server() as server:
        assert server.directory.is_dir()
        assert _socket_directory(server.dsn) == server.directory
        assert server.version.startswith("16.")
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier("fallback")))
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier("fallback")))
            assert migrate(conn) == [m.version for m in migrations()]
            assert migrate(conn) == []  # re-running is a no-op
            assert [v for v, _, _ in applied_versions(conn)] == [m.version for m in migrations()]
            tables = conn.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'fallback'"
            ).fetchone()
            assert tables is not None
            assert int(str(tables[0])) > 1
        if os.geteuid() == 0:  # PostgreSQL refuses root: the server runs as `nobody`
            assert server.user == UNPRIVILEGED_USER
            assert (server.directory / "data").stat().st_uid != 0
            assert Path(f"/proc/{server.pid}").stat().st_uid != 0
    assert not server.directory.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(server.pid, 0)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(server.dsn, connect_timeout=2)


def test_with_no_dsn_and_no_server_ensure_dsn_starts_a_throwaway_server_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("QL3_PG_DSN", raising=False)
    said: list[str] = []
    with ensure_dsn(None, default=NOBODY_ANSWERS, announce=said.append) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.info.server_version >= 160000
        directory = _socket_directory(dsn)
        assert directory.is_dir()
        assert len(said) == 1
        assert said[0].startswith(
            f"no QL3_PG_DSN given and nothing answers at {NOBODY_ANSWERS}: "
            "started a throwaway PostgreSQL 16."
        )
        assert f"from pgserver at {dsn}" in said[0]
        assert said[0].endswith("; it is removed on exit")
    assert not directory.exists()


def test_an_explicit_dsn_or_QL3_PG_DSN_is_used_as_given_and_nothing_is_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def must_not_start() -> Path:
        raise AssertionError("no server may be started")

    monkeypatch.setattr(local_server, "pgserver_install", must_not_start)
    said: list[str] = []
    monkeypatch.setenv("QL3_PG_DSN", "postgresql://from-env@127.0.0.1:1/x")
    with ensure_dsn("postgresql://explicit@127.0.0.1:1/x", announce=said.append) as dsn:
        assert dsn == "postgresql://explicit@127.0.0.1:1/x"
    with ensure_dsn(None, announce=said.append) as dsn:
        assert dsn == "postgresql://from-env@127.0.0.1:1/x"
    assert said == []


def test_without_pgserver_the_error_says_how_to_fix_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QL3_PG_DSN", raising=False)
    with pytest.raises(NoPostgresError, match="the no_such_package_ql3 package is not installed"):
        local_server.pgserver_install("no_such_package_ql3")
    find = local_server.pgserver_install
    monkeypatch.setattr(local_server, "pgserver_install", lambda: find("pgserver_absent"))
    with pytest.raises(NoPostgresError) as raised, ensure_dsn(None, default=NOBODY_ANSWERS):
        pytest.fail("no DSN may be yielded")
    message = str(raised.value)
    assert "QL3_PG_DSN is not set and nothing answers at" in message
    assert "the pgserver_absent package is not installed" in message
    assert "set QL3_PG_DSN" in message
    assert "pip install -e '.[cluster]'" in message


def test_a_server_that_cannot_start_is_reported_with_its_output_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "pginstall"
    (fake / "bin").mkdir(parents=True)
    for name in ("initdb", "postgres"):
        (fake / "bin" / name).write_text("#!/bin/sh\necho 'initdb: cannot do that' >&2\nexit 3\n")
        (fake / "bin" / name).chmod(0o755)
    made: list[str] = []
    mkdtemp = tempfile.mkdtemp

    def recording_mkdtemp(prefix: str, dir: Path) -> str:
        made.append(mkdtemp(prefix=prefix, dir=dir))
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", recording_mkdtemp)
    refused = r"initdb \(as \w+\) exited with 3:\n.*cannot do"
    with pytest.raises(NoPostgresError, match=refused), throwaway_server(install=fake):
        pytest.fail("the server cannot have started")
    assert len(made) == 1
    assert not Path(made[0]).exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the copy of the binaries is made only as root")
def test_as_root_a_copy_of_the_binaries_serves_when_nobody_cannot_read_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(local_server, "_open_to_others", lambda trees: False)
    with throwaway_server() as server:
        copied = server.directory / "pgserver" / "pginstall" / "bin" / "postgres"
        assert copied.stat().st_uid != 0
        assert Path(f"/proc/{server.pid}/exe").resolve() == copied
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            assert conn.info.server_version >= 160000
    assert not server.directory.exists()


def _unshare_network() -> str | None:
    """The `unshare` program if it can make a private network namespace here."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    probe = subprocess.run([unshare, "-n", "true"], capture_output=True, check=False, timeout=30)
    return unshare if probe.returncode == 0 else None


def test_the_readme_test_command_works_on_a_machine_without_postgresql() -> None:
    """The cluster tests, run where nothing answers on 127.0.0.1 (a private network namespace:
    only a down loopback) and without QL3_PG_DSN: they start the throwaway server, say so in
    their output, and pass."""
    unshare = _unshare_network()
    if unshare is None:
        pytest.skip("needs `unshare -n` (root or CAP_SYS_ADMIN) to hide the machine's server")
    database_tests = Path(__file__).with_name("test_cluster_database.py")
    run = subprocess.run(
        [
            unshare,
            "-n",
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--no-spec-trace",
            # One process, so its announcement reaches this output (with the default `-n 2`
            # each worker brings up a throwaway server of its own, on its own socket directory).
            "-n",
            "0",
            str(database_tests) + "::test_a_table_of_one_test_schema_is_invisible_from_another",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
        env={
            k: v
            for k, v in os.environ.items()
            if not k.startswith("PYTEST_") and k not in {"QL3_PG_DSN", "CI"}
        },
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
    assert "started a throwaway PostgreSQL 16." in run.stdout
    assert "it is removed on exit" in run.stdout


@pytest.mark.slow  # qlk conform on a throwaway server
def test_qlk_conform_runner_cluster_works_on_a_machine_without_postgresql(
    tmp_path: Path,
) -> None:
    """`qlk conform --runner cluster` with no DSN where nothing answers: it starts the
    throwaway server, says so, replays the traces with zero divergences, runs guard, kill and
    terminate modes, and exits 0."""
    unshare = _unshare_network()
    if unshare is None:
        pytest.skip("needs `unshare -n` (root or CAP_SYS_ADMIN) to hide the machine's server")
    corpus = ROOT / "conformance" / "traces" / "run"
    for name in (
        "LEASE-02-each-mismatched-fence-field-rejected.jsonl",
        "REC-01-cluster-source-selects-exactly-the-candidates.jsonl",
    ):
        shutil.copy(corpus / name, tmp_path / name)
    run = subprocess.run(
        [
            *(unshare, "-n", sys.executable, "-m", "conformance.cli", "conform"),
            *("--runner", "cluster", "--traces", str(tmp_path), "--quiet"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k not in {"QL3_PG_DSN", "CI"}},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "qlk conform: no QL3_PG_DSN given and nothing answers at" in run.stdout
    assert "started a throwaway PostgreSQL 16." in run.stdout
    assert "|   passed           |                      2 |" in run.stdout
    assert "|   diverged         |                      0 |" in run.stdout
    assert "0 accepted by the runner" in run.stdout
    assert "0 torn states" in run.stdout
    assert "pg_terminate_backend at every statement boundary, 0 failures" in run.stdout
