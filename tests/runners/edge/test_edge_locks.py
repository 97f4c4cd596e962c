"""The lock probe on the edge runner (issue 16 item 2; `conformance.run.locks`; D-2).

Over the whole corpus, a second connection's `BEGIN IMMEDIATE` on the database file is refused
while a write path holds its transaction after the load, and a waiting one completes once the
write committed. A runner whose transactions start `DEFERRED` (a planted edit of the real
statement text in `runners/edge/sql/statements.sql`) takes no write lock at its load, and is
caught.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import MappingProxyType

import pytest

from conformance.run.corpus import RUN_CORPUS
from conformance.run.locks import lock_every_write_edge
from runners.edge import connection

GRANT = "LEASE-02-each-mismatched-fence-field-rejected"


def test_every_write_path_holds_the_write_lock_until_it_commits() -> None:
    report = lock_every_write_edge(RUN_CORPUS)
    print(f"\n{report.summary()}")
    assert report.failures == []
    assert len(report.results) >= 20
    # every write path whose Run exists was probed (a Run being created has nothing loaded)
    unprobed = {r.path.command.name for r in report.results if r.contenders != 1}
    assert unprobed <= {"admit_run", "create_run"}, unprobed


def test_a_deferred_transaction_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "traces").mkdir()
    shutil.copyfile(RUN_CORPUS / f"{GRANT}.jsonl", tmp_path / "traces" / f"{GRANT}.jsonl")
    statements = dict(getattr(connection, "STATEMENTS"))  # noqa: B009 - not exported
    assert statements["begin_immediate"].count("BEGIN IMMEDIATE") == 1
    statements["begin_immediate"] = statements["begin_immediate"].replace(
        "BEGIN IMMEDIATE", "BEGIN DEFERRED"
    )
    monkeypatch.setattr(connection, "STATEMENTS", MappingProxyType(statements))
    failures = lock_every_write_edge(tmp_path / "traces").failures
    assert failures, "a DEFERRED write transaction passed the lock probe"
    assert "BEGIN IMMEDIATE did not block while the write held its transaction" in failures[0]
