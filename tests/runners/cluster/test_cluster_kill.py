"""Kill mode and terminate mode of the cluster runner (issue 5, item 2;
`conformance.run.kill_cluster`).

Over named traces that cover a lease grant, a completion and a lost-retry requeue: a client
SIGKILLed at every statement boundary of every write path leaves exactly the before-state (killed
before COMMIT) or exactly the after-state (killed after it); a backend terminated by the server
at every boundary makes the runner's call fail, leaves the before-state, and the runner's next
call on the same store reconnects and applies. Planted bugs prove both checks have teeth.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from conformance.cli import main
from conformance.run.corpus import RUN_CORPUS
from conformance.run.kill_cluster import kill_every_write, terminate_every_write
from kernel import Command, Outcome
from runners import engine
from runners.cluster.store import ClusterStore, ClusterTransaction

pytestmark = pytest.mark.slow  # kill modes: a SIGKILL and a terminated backend per boundary

GRANT = "LEASE-02-each-mismatched-fence-field-rejected"
COMPLETION = "LEASE-08-completion-and-expiry-never-both-apply"
REQUEUE = "RETRY-10-fault-in-requeue-rolls-back-everything"


def _corpus(target: Path, *names: str) -> Path:
    target.mkdir()
    for name in names:
        shutil.copyfile(RUN_CORPUS / f"{name}.jsonl", target / f"{name}.jsonl")
    return target


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _corpus(tmp_path_factory.mktemp("kill") / "traces", GRANT, COMPLETION, REQUEUE)


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """One short trace: enough for a planted bug to show (its first write paths)."""
    return _corpus(tmp_path / "traces", GRANT)


REQUIRED = {
    ("grant_lease", "granted"),
    ("complete_with_lease", "completed"),
    ("lost_retry_step", "requeued"),  # RETRY-10: the requeue transaction
}


@pytest.mark.spec("RUN-06", "RETRY-10")
def test_a_sigkill_at_every_statement_boundary_leaves_the_before_or_the_after_state(
    corpus: Path, pg_dsn: str
) -> None:
    results = kill_every_write(corpus, pg_dsn)
    assert {(r.path.command.name, r.path.code) for r in results} >= REQUIRED
    assert [line for r in results for line in r.failures] == []
    for result in results:
        assert result.statements >= 3  # the advisory lock, a locked load, a write
        # every boundary before a statement, the one before COMMIT, and one after COMMIT
        assert result.kills == result.statements + 2
    assert sum(r.kills for r in results) == sum(r.statements + 2 for r in results)


@pytest.mark.spec("RUN-06", "RETRY-10")
def test_a_terminated_backend_at_every_boundary_fails_the_call_and_rolls_back(
    corpus: Path, pg_dsn: str
) -> None:
    results = terminate_every_write(corpus, pg_dsn)
    assert {(r.path.command.name, r.path.code) for r in results} >= REQUIRED
    assert [line for r in results for line in r.failures] == []
    for result in results:
        assert result.statements >= 3
        assert result.terminations == result.statements + 1  # every boundary, COMMIT included
    assert sum(r.terminations for r in results) == sum(r.statements + 1 for r in results)


@contextmanager
def _statement_by_statement(self: ClusterStore) -> Iterator[ClusterTransaction]:
    """Planted bug: no transaction, every statement commits on its own (autocommit)."""
    with self.connection() as conn:
        yield ClusterTransaction(conn, self.statement_trace)


def test_kill_mode_catches_a_store_that_commits_statement_by_statement(
    small: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ClusterStore, "transaction", _statement_by_statement)
    torn = [line for r in kill_every_write(small, pg_dsn) for line in r.failures]
    # admit_run: the first kill after insert_run commits alone leaves the Run row behind
    assert len(torn) == 1, torn  # the pre-state is gone: the path stops, the trace too
    assert torn[0].startswith("admit_run:admitted")
    assert "killed before statement" in torn[0]
    assert "not the before-state: runs[r1]: unexpected row" in torn[0]


def test_terminate_mode_catches_a_store_that_commits_statement_by_statement(
    small: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ClusterStore, "transaction", _statement_by_statement)
    failures = [line for r in terminate_every_write(small, pg_dsn) for line in r.failures]
    assert len(failures) == 1, failures
    assert "backend terminated before statement" in failures[0]
    assert "not the before-state: runs[r1]: unexpected row" in failures[0]


def test_terminate_mode_catches_a_runner_that_hides_the_fault_and_reports_success(
    small: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planted bug: the runner catches the OperationalError and quietly runs the command again,
    so the caller sees a success for a call whose connection the server killed."""
    original = engine.execute_observed

    def hiding(storage: engine.Storage, command: Command, observe: engine.Observe) -> Outcome:
        try:
            return original(storage, command, observe)
        except psycopg.OperationalError:
            return original(storage, command, observe)

    monkeypatch.setattr(engine, "execute_observed", hiding)
    results = terminate_every_write(small, pg_dsn)
    assert results
    for result in results:  # every write path: at the first boundary already
        assert len(result.failures) == 1
        assert "before statement 1" in result.failures[0]
        assert "yet the call returned applied" in result.failures[0]


def test_terminate_mode_catches_a_store_that_does_not_reconnect(
    small: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planted bug: the store keeps the terminated connection, so its next call fails too
    (here the run for boundary 1, after the termination at boundary 0)."""
    opened: Callable[[ClusterStore], psycopg.Connection[object]] = ClusterStore._open

    def stubborn(self: ClusterStore) -> psycopg.Connection[object]:
        conn = self._conn
        return conn if conn is not None and conn.broken else opened(self)

    monkeypatch.setattr(ClusterStore, "_open", stubborn)
    failures = [line for r in terminate_every_write(small, pg_dsn) for line in r.failures]
    assert len(failures) == 1, failures  # the trace cannot go on
    assert "the call raised OperationalError" in failures[0]
    assert "before boundary 1" in failures[0]


def test_qlk_conform_runs_both_modes_for_the_cluster_runner(small: Path, pg_dsn: str) -> None:
    out = io.StringIO()
    status = main(
        ["conform", "--runner", "cluster", "--dsn", pg_dsn, "--traces", str(small), "-q"], out=out
    )
    text = out.getvalue()
    assert status == 0, text
    assert "SIGKILLs at every statement boundary, 0 torn states" in text
    assert "pg_terminate_backend at every statement boundary, 0 failures" in text
    out = io.StringIO()
    main(
        [
            "conform",
            "--runner",
            "cluster",
            "--dsn",
            pg_dsn,
            "--traces",
            str(small),
            "-q",
            "--no-kill",
        ],
        out=out,
    )
    assert "kill mode" not in out.getvalue()
    assert "terminate mode" not in out.getvalue()
