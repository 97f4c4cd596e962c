"""Kill mode (issue 4, item 3): the runner is SIGKILLed in a child process at every statement
boundary of every write path of the corpus; on reopen the durable state is exactly the before-
state (killed before COMMIT ran) or exactly the after-state (killed after it)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conformance.run.corpus import RUN_CORPUS
from conformance.run.kill_edge import kill_every_write
from kernel import AppendEvent, Effect, UpdateLease
from kernel.approved_action import AnyActionEffect
from kernel.workflow import WorkflowEffect
from runners.edge.connection import SqliteAuthority
from runners.edge.store import EdgeStore, EdgeTransaction

pytestmark = pytest.mark.slow  # kill mode: a SIGKILLed child per statement boundary


@pytest.mark.spec("RUN-06", "RETRY-10")
def test_every_statement_boundary_of_every_write_path_is_atomic() -> None:
    results = kill_every_write()
    paths = {(r.path.command.name, r.path.code) for r in results}
    print(f"\nkill mode: {len(results)} write paths, {sum(r.kills for r in results)} kills")
    assert len(results) >= 20
    assert ("lost_retry_step", "requeued") in paths  # RETRY-10: the requeue transaction
    assert ("expire_with_lease", "lost") in paths  # lost + release in one transaction
    for result in results:
        assert result.failures == ()
        assert result.statements >= 3  # BEGIN, at least one write, COMMIT
        assert result.kills == result.statements + 1  # every boundary, none skipped


def test_kill_mode_catches_a_runner_that_commits_statement_by_statement(
    small: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check has teeth: without one transaction per write a kill leaves a torn state. One
    short trace shows it, as for the planted bugs below (the whole corpus with the runner as
    shipped is the test above)."""

    @contextmanager
    def autocommit(self: SqliteAuthority) -> Iterator[object]:
        with self.reading() as conn:
            yield conn

    monkeypatch.setattr(SqliteAuthority, "transaction", autocommit)
    results = kill_every_write(small)
    torn = [line for r in results for line in r.failures]
    assert torn
    assert "not the before-state" in torn[0]


GRANT = "LEASE-02-each-mismatched-fence-field-rejected"


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """One short trace: enough for a planted bug to show (its first write paths)."""
    target = tmp_path / "traces"
    target.mkdir()
    shutil.copyfile(RUN_CORPUS / f"{GRANT}.jsonl", target / f"{GRANT}.jsonl")
    return target


@contextmanager
def _events_after_commit(self: EdgeStore) -> Iterator[object]:
    """Planted bug: the write is split into two transactions, the Events committed second."""
    pending: list[WorkflowEffect | AnyActionEffect] = []

    class Deferring(EdgeTransaction):
        def execute(self, effect: WorkflowEffect | AnyActionEffect) -> None:
            if isinstance(effect, AppendEvent):
                pending.append(effect)
            else:
                super().execute(effect)

    with self.authority.transaction() as conn:
        yield Deferring(conn)
    with self.authority.transaction() as conn:
        late = EdgeTransaction(conn)
        for effect in pending:
            late.execute(effect)


@pytest.mark.spec("RUN-06")
def test_kill_mode_catches_a_write_split_into_two_transactions(
    small: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every statement of every transaction the write opens is a boundary (the trace callback
    sees the second `BEGIN IMMEDIATE`): the kill between the commits leaves no Events."""
    monkeypatch.setattr(EdgeStore, "transaction", _events_after_commit)
    torn = [line for r in kill_every_write(small) for line in r.failures]
    assert torn, "a write that commits twice passed kill mode"
    assert torn[0].startswith("admit_run:admitted")
    assert "not the before-state: runs[r1]: unexpected row" in torn[0]


def test_kill_mode_reports_a_runner_that_raises_never_crashes(
    small: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planted bug: the store raises on every lease update. Kill mode returns a finding per
    broken path and names what it could not reach; it never raises out of the walk."""
    original = EdgeTransaction.execute

    def broken(self: EdgeTransaction, effect: Effect) -> None:
        if isinstance(effect, UpdateLease):
            raise RuntimeError("planted")
        original(self, effect)

    monkeypatch.setattr(EdgeTransaction, "execute", broken)
    failures = [line for r in kill_every_write(small) for line in r.failures]
    assert any("raised RuntimeError: planted" in line for line in failures), failures
    assert all(not line.startswith("admit_run:") for line in failures), failures
