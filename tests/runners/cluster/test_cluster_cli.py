"""`qlk serve --profile cluster`, `qlk submit|status|task --dsn` end to end, in subprocesses on a
real PostgreSQL (issue 17 item 1; SPEC E-7 exit codes): a replica starts, admits a due cron fire
at database time, submitted Runs land on the schema, SIGTERM stops it with exit 0 and Ctrl-C with
130; a database that does not answer is exit 3 with one line; `--db` and `--dsn` exclude each
other (exit 2); the local commands never load psycopg."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import psycopg
import pytest

from conformance.cli.common import SCHEMA_DEFAULT
from kernel.task import TaskDefinition, define_task, fire_run_id
from runners.cluster.app import DEFAULT_SCHEMA
from runners.cluster.store import ClusterStore
from runners.cluster.tasks import ClusterTaskStore
from runners.cron import latest_fire_at_or_before
from tests.support.cluster_fixtures import db_now

ROOT = Path(__file__).resolve().parents[3]
DEADLINE_S = 120.0
#: Nothing listens on port 1 of the loopback address: the connection is refused at once.
DEAD_DSN = "postgresql://postgres@127.0.0.1:1/test"
YEARLY = "0 0 1 1 *"
DAY = 86_400_000
SERVE = (sys.executable, "-m", "conformance.cli", "serve", "--profile", "cluster")


def _env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PYTEST_") and k not in ("QL3_DB", "QL3_DSN")
    }
    env["PYTHONPATH"] = str(ROOT)
    return env


def qlk(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conformance.cli", *args],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=cwd,
        timeout=DEADLINE_S,
        check=False,
    )


class Lines:
    """A stream's lines, collected on a thread (a pipe never fills up)."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, deadline_s: float = DEADLINE_S) -> str:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            for line in list(self.lines):
                if text in line:
                    return line
            time.sleep(0.05)
        raise AssertionError(f"no line with {text!r} in {DEADLINE_S} s: {self.lines}")

    def join(self) -> list[str]:
        self._thread.join(DEADLINE_S)
        return self.lines


@pytest.fixture
def schema(pg_schema: tuple[psycopg.Connection[Any], str]) -> str:
    return pg_schema[1]


@pytest.fixture
def serve(pg_dsn: str, schema: str) -> Iterator[tuple[subprocess.Popen[str], Lines, Lines]]:
    proc = subprocess.Popen(
        [*SERVE, "--dsn", pg_dsn, "--schema", schema],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    try:
        yield proc, out, err
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(DEADLINE_S)


@pytest.mark.slow
def test_serve_admits_a_due_fire_and_submissions_land_then_sigterm_exits_0(
    pg_dsn: str, schema: str, serve: tuple[subprocess.Popen[str], Lines, Lines]
) -> None:
    proc, out, err = serve
    err.wait_for("cluster replica on")
    # A cron task whose first fire is already due at database time (it was added 400 days
    # ago): the next cycle admits its latest fire (TK-10); the next one is months away, so no
    # minute boundary during the test adds a Run.
    store = ClusterStore(pg_dsn, schema)
    try:
        with store.connection() as conn:
            now = db_now(conn)
        definition = define_task("tick", ["/bin/true"], cron=YEARLY)
        assert isinstance(definition, TaskDefinition)
        ClusterTaskStore(store).add(definition, now - 400 * DAY)
    finally:
        store.close()
    line = out.wait_for("admitted 1")
    assert line.startswith("cycle ")
    target = ["--dsn", pg_dsn, "--schema", schema]
    submitted = qlk("submit", *target, "--", "/bin/echo", "hello")
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()
    assert run_id.startswith("run-")
    added = qlk("task", "add", "hello", *target, "--", "/bin/echo", "hi")
    assert (added.returncode, added.stdout.strip()) == (0, "added hello revision 1"), added.stderr
    by_task = qlk("submit", *target, "--task", "hello")
    assert by_task.returncode == 0, by_task.stderr
    listed = qlk("task", "list", *target, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [t["name"] for t in json.loads(listed.stdout)] == ["hello", "tick"]
    status = qlk("status", *target, "--json")
    assert status.returncode == 0, status.stderr
    document = json.loads(status.stdout)
    assert document["total"] == 3
    assert document["runs"]["queued"] == 3  # no Worker yet: admitted and waiting
    # The fire's Run has its deterministic id (TK-6) and the submission its own.
    store = ClusterStore(pg_dsn, schema)
    try:
        runs = {r["run_id"] for r in store.project()["runs"]}
    finally:
        store.close()
    latest = latest_fire_at_or_before(YEARLY, now)
    assert latest is not None
    assert run_id in runs
    assert {r for r in runs if r.startswith("fr:")} == {fire_run_id("tick", 1, latest)}
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(DEADLINE_S) == 0
    lines = out.join()
    assert lines[-1] == f"3 runs in {schema}: queued 3"
    assert not any("Traceback" in line for line in err.join())


def test_ctrl_c_stops_serve_with_exit_130(
    serve: tuple[subprocess.Popen[str], Lines, Lines],
) -> None:
    proc, _out, err = serve
    err.wait_for("cluster replica on")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(DEADLINE_S) == 130
    assert not any("Traceback" in line for line in err.join())


@pytest.mark.parametrize(
    "args",
    [
        ("serve", "--profile", "cluster", "--dsn", DEAD_DSN),
        ("serve", "--dsn", DEAD_DSN),
        ("status", "--dsn", DEAD_DSN),
        ("submit", "--dsn", DEAD_DSN, "--", "/bin/true"),
        ("task", "list", "--dsn", DEAD_DSN),
    ],
    ids=["serve", "serve-implied", "status", "submit", "task-list"],
)
def test_a_database_that_does_not_answer_is_exit_3_with_one_line(args: tuple[str, ...]) -> None:
    done = qlk(*args)
    assert done.returncode == 3, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("qlk: --dsn 127.0.0.1:1/test: the database does not answer")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("serve", "--db", "x.db", "--dsn", DEAD_DSN),
        ("status", "--db", "x.db", "--dsn", DEAD_DSN),
        ("submit", "--db", "x.db", "--dsn", DEAD_DSN, "--", "/bin/true"),
        ("task", "list", "--db", "x.db", "--dsn", DEAD_DSN),
        ("serve", "--profile", "cluster"),  # no --dsn, no $QL3_DSN
        ("serve", "--profile", "edge", "--dsn", DEAD_DSN),
        ("serve", "--schema", "s"),
        ("status", "--schema", "s"),
        ("status", "--dsn", DEAD_DSN, "--schema", "Bad-Name"),
        ("status", "--dsn", "host=a bogus", "--schema", "s"),
        ("serve", "--profile", "cluster", "--dsn", DEAD_DSN, "--until-idle"),
    ],
)
def test_usage_errors_are_exit_2_with_one_line(args: tuple[str, ...], tmp_path: Path) -> None:
    done = qlk(*args, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "x.db").exists()


def test_the_default_schema_is_one_name() -> None:
    assert SCHEMA_DEFAULT == DEFAULT_SCHEMA == "ql3"


def test_a_local_serve_never_loads_psycopg(tmp_path: Path) -> None:
    """The cluster side is imported only with --dsn or --profile cluster (peak memory)."""
    driver = (
        "import sys\n"
        "from conformance.cli import main\n"
        "status = main(sys.argv[1:])\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] == 'psycopg']\n"
        "assert not loaded, loaded\n"
        "sys.exit(status)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", driver, "serve", "--until-idle", "--db", str(tmp_path / "q.db")],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=tmp_path,
        timeout=DEADLINE_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
