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
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conformance.cli import main
from conformance.run.corpus import RUN_CORPUS
from conformance.run.kill_cluster import kill_every_write, terminate_every_write
from kernel import AppendEvent, Command, Effect, Outcome, RunAggregate, UpdateLease
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
        assert result.statements >= 5  # BEGIN, the advisory lock, a locked load, a write, COMMIT
        # every boundary before a query (BEGIN and COMMIT included), and one after the return
        assert result.kills == result.statements + 1


@pytest.mark.spec("RUN-06", "RETRY-10")
def test_a_terminated_backend_at_every_boundary_fails_the_call_and_rolls_back(
    corpus: Path, pg_dsn: str
) -> None:
    results = terminate_every_write(corpus, pg_dsn)
    assert {(r.path.command.name, r.path.code) for r in results} >= REQUIRED
    assert [line for r in results for line in r.failures] == []
    for result in results:
        assert result.statements >= 5
        assert result.terminations == result.statements  # every boundary, BEGIN to COMMIT


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
    assert torn[0].startswith("admit_run:admitted")
    assert re.search(r"killed before statement \d+ \(insert_[a-z]+\)", torn[0]), torn[0]
    assert "not the before-state (nor the after-state): runs[r1]: unexpected row" in torn[0]
    # the pre-state is gone: the path stops, the trace too, and what it did not reach is said
    assert len(torn) == 2, torn
    assert f"the walk of {GRANT} stopped at admit_run:admitted" in torn[1]
    assert "write paths not checked: " in torn[1]


class _Deferring:
    """Executes the state effects now and keeps the Events for a second transaction."""

    def __init__(self, inner: ClusterTransaction, pending: list[Effect]) -> None:
        self._inner = inner
        self._pending = pending

    @property
    def connection(self) -> psycopg.Connection[Any]:
        return self._inner.connection

    def load_run(self, run_id: str) -> RunAggregate | None:
        return self._inner.load_run(run_id)

    def load_run_of_attempt(self, attempt_id: str) -> RunAggregate | None:
        return self._inner.load_run_of_attempt(attempt_id)

    def execute(self, effect: Effect) -> None:
        if isinstance(effect, AppendEvent):
            self._pending.append(effect)
        else:
            self._inner.execute(effect)


@contextmanager
def _events_after_commit(self: ClusterStore) -> Iterator[_Deferring]:
    """Planted bug: the write is split into two transactions, the Events committed second."""
    pending: list[Effect] = []
    with self.connection() as conn:
        with conn.transaction():
            yield _Deferring(ClusterTransaction(conn, self.statement_trace), pending)
        with conn.transaction():
            late = ClusterTransaction(conn, self.statement_trace)
            for effect in pending:
                late.execute(effect)


@pytest.mark.spec("RUN-06")
def test_kill_mode_catches_a_write_split_into_two_transactions(
    small: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every statement of every transaction a write opens is a boundary: the kill between the
    two commits leaves the state without its Events (before issue 16 only the first
    transaction was faulted, and this runner passed)."""
    monkeypatch.setattr(ClusterStore, "transaction", _events_after_commit)
    torn = [line for r in kill_every_write(small, pg_dsn) for line in r.failures]
    assert torn, "a write that commits twice passed kill mode"
    assert torn[0].startswith("admit_run:admitted")
    assert "(BEGIN), not the before-state (nor the after-state): " in torn[0]
    assert "runs[r1]: unexpected row" in torn[0]


@pytest.mark.spec("RUN-06")
def test_terminate_mode_catches_a_write_split_into_two_transactions(
    small: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ClusterStore, "transaction", _events_after_commit)
    failures = [line for r in terminate_every_write(small, pg_dsn) for line in r.failures]
    assert failures
    assert "backend terminated before statement" in failures[0]
    assert "(BEGIN), not the before-state: runs[r1]: unexpected row" in failures[0]


def test_kill_and_terminate_modes_report_a_runner_that_raises_never_crash(
    small: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planted bug: the store raises on every lease update. Both modes return a finding per
    broken path and name what they could not reach; neither raises out of the walk."""
    original = ClusterTransaction.execute

    def broken(self: ClusterTransaction, effect: Effect) -> None:
        if isinstance(effect, UpdateLease):
            raise RuntimeError("planted")
        original(self, effect)

    monkeypatch.setattr(ClusterTransaction, "execute", broken)
    for mode in (kill_every_write, terminate_every_write):
        results = mode(small, pg_dsn)
        failures = [line for r in results for line in r.failures]
        assert failures, mode.__name__
        assert any("RuntimeError" in line for line in failures), failures
        assert all(not line.startswith("admit_run:") for line in failures), failures


def test_terminate_mode_catches_a_store_that_commits_statement_by_statement(
    small: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ClusterStore, "transaction", _statement_by_statement)
    failures = [line for r in terminate_every_write(small, pg_dsn) for line in r.failures]
    assert len(failures) == 2, failures  # the torn path, then the paths its trace left
    assert "backend terminated before statement" in failures[0]
    assert "not the before-state: runs[r1]: unexpected row" in failures[0]
    assert "write paths not checked: grant_lease:granted" in failures[1]


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
    assert len(failures) == 2, failures  # the trace cannot go on (its other paths unchecked)
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
