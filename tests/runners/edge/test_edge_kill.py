"""Kill mode (issue 4, item 3): the runner is SIGKILLed in a child process at every statement
boundary of every write path of the corpus; on reopen the durable state is exactly the before-
state (killed before COMMIT ran) or exactly the after-state (killed after it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from conformance.run.kill_edge import kill_every_write
from runners.edge.connection import SqliteAuthority

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
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check has teeth: without one transaction per write a kill leaves a torn state."""

    @contextmanager
    def autocommit(self: SqliteAuthority) -> Iterator[object]:
        with self.reading() as conn:
            yield conn

    monkeypatch.setattr(SqliteAuthority, "transaction", autocommit)
    results = kill_every_write()
    torn = [line for r in results for line in r.failures]
    assert torn
    assert "not the before-state" in torn[0]
