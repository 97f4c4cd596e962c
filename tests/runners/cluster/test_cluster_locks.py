"""The lock probe on the cluster runner (issue 16 item 2; `conformance.run.locks`; B-35).

Over the whole corpus, a second connection's `SELECT ... FOR UPDATE` on the rows a write path
loaded blocks while the write holds its transaction after the load, and completes once it
committed. A runner whose load forgets a `FOR UPDATE` (a planted edit of the real statement
text in `runners/cluster/sql/statements.sql`) is caught, naming the rows.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from types import MappingProxyType
from xml.etree import ElementTree

import pytest

from conformance.cli import main
from conformance.run.corpus import RUN_CORPUS
from conformance.run.locks import lock_every_write_cluster
from runners.cluster import store

GRANT = "LEASE-02-each-mismatched-fence-field-rejected"


@pytest.fixture
def small(tmp_path: Path) -> Path:
    target = tmp_path / "traces"
    target.mkdir()
    shutil.copyfile(RUN_CORPUS / f"{GRANT}.jsonl", target / f"{GRANT}.jsonl")
    return target


def _plant(monkeypatch: pytest.MonkeyPatch, section: str, old: str, new: str) -> None:
    """Replace `old` (exactly once) by `new` in one statement as the store looks it up."""
    statements = dict(getattr(store, "STATEMENTS"))  # noqa: B009 - not exported, looked up
    assert statements[section].count(old) == 1, (section, old)
    statements[section] = statements[section].replace(old, new)
    monkeypatch.setattr(store, "STATEMENTS", MappingProxyType(statements))


@pytest.mark.slow  # the whole corpus on PostgreSQL (~6 s); the planted bugs below are quick
@pytest.mark.spec("REC-06")  # B-35: the rows are locked in the load, until the commit
def test_every_write_path_holds_its_rows_until_it_commits(pg_dsn: str) -> None:
    report = lock_every_write_cluster(RUN_CORPUS, pg_dsn)
    print(f"\n{report.summary()}")
    assert report.failures == []
    assert len(report.results) >= 20
    paths = {(r.path.command.name, r.path.code): r.contenders for r in report.results}
    assert paths[("admit_run", "admitted")] == 0  # nothing to lock yet
    assert {name for (name, _), n in paths.items() if n == 0} <= {"admit_run", "create_run"}
    assert paths[("grant_lease", "granted")] >= 2  # the Run and its Attempt at least
    assert paths[("lost_retry_step", "requeued")] == 4  # Run, Attempts, policy, lease


@pytest.mark.spec("REC-06")  # B-35: the rows are locked in the load, until the commit
@pytest.mark.parametrize(
    ("section", "rows"),
    [
        ("select_run", "the Run row"),
        ("select_attempts_of_run", "the Attempt rows"),
        ("select_leases_of_run", "the lease rows"),
    ],
)
def test_a_load_without_for_update_is_caught(
    small: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch, section: str, rows: str
) -> None:
    _plant(monkeypatch, section, "\nFOR UPDATE;", ";")
    failures = lock_every_write_cluster(small, pg_dsn).failures
    assert failures, f"{section} without FOR UPDATE passed the lock probe"
    assert f"FOR UPDATE on {rows} did not block" in failures[0]
    assert all(f"on {rows}" in line for line in failures), failures


def test_qlk_conform_runs_the_lock_probe_and_reports_it(
    small: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`qlk conform --runner cluster` prints the probe's summary line, and a finding fails the
    run, the verdict and the JUnit file alike; `--no-locks` skips it."""
    argv = ["conform", "--runner", "cluster", "--dsn", pg_dsn, "--traces", str(small), "-q"]
    argv += ["--no-guards", "--no-kill"]
    out = io.StringIO()
    assert main(argv, out=out) == 0, out.getvalue()
    assert "lock probe: 5 write paths, " in out.getvalue()
    assert ", 0 failures" in out.getvalue()
    out = io.StringIO()
    main([*argv, "--no-locks"], out=out)
    assert "lock probe" not in out.getvalue()

    _plant(monkeypatch, "select_run", "\nFOR UPDATE;", ";")
    junit = tmp_path / "report.xml"
    out = io.StringIO()
    assert main([*argv, "--junit", str(junit)], out=out) == 1, out.getvalue()
    text = out.getvalue()
    assert "FOR UPDATE on the Run row did not block" in text
    assert "lock probe: " in text.splitlines()[-1]  # the verdict names it
    suite = ElementTree.parse(junit).getroot()
    assert suite.get("failures") == "1"
    failed = [
        case.get("name") for case in suite.iter("testcase") if case.find("failure") is not None
    ]
    assert failed == ["lock probe"]
