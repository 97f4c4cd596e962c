"""`qlk` and the pytest plugin: exit statuses, the summary, JUnit, the readable trace view, and
one test per trace through `pytest --ql3-runner` (issue 4, items 4 and 5; exercised here on the
reference adapter, and on the edge runner in tests/runners/edge)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.run import factories
from conformance.run.corpus import RUN_CORPUS, read_text
from conformance.run.trace import canonical, projection_digest

# The reference adapter without the cluster recovery source, importable by a child process.
LACKING = "tests.support.adapters:WithoutClusterRecovery"
SOME = (
    "RETRY-07-retry-wait-not-before-due.jsonl",
    "LEASE-02-each-mismatched-fence-field-rejected.jsonl",
    "REC-01-cluster-source-selects-exactly-the-candidates.jsonl",
)


def corpus(tmp_path: Path, *, tamper: bool = False) -> Path:
    """A small trace directory; with `tamper`, one step of one trace expects a wrong status."""
    root = tmp_path / "traces"
    root.mkdir()
    for name in SOME:
        shutil.copy(RUN_CORPUS / name, root / name)
    if tamper:
        target = root / SOME[0]
        lines = read_text(target).splitlines()
        step = json.loads(lines[3])
        step["expect"]["projection"]["runs"][0]["status"] = "running"
        step["expect"]["digest"] = projection_digest(step["expect"]["projection"])
        lines[3] = canonical(step)
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def row(out: str, label: str) -> str:
    """The value of one row of the summary table."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 2 and cells[0] == label:
            return cells[1]
    raise AssertionError(f"no row {label!r} in:\n{out}")


def test_conform_passes_prints_the_summary_and_writes_junit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "report.xml"
    status = main(
        [
            "conform",
            "--runner",
            "reference",
            "--traces",
            str(corpus(tmp_path)),
            "--junit",
            str(junit),
        ]
    )
    out = capsys.readouterr()
    assert status == 0
    assert row(out.out, "passed") == "3"
    assert row(out.out, "diverged") == "0"
    assert row(out.out, "properties covered") == "3 of 3 named"
    assert "100% 3/3 traces" in out.err  # progress on a pipe: one line per 10 %
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "0", "0")


def test_a_divergence_exits_1_with_the_step_and_the_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "report.xml"
    root = corpus(tmp_path, tamper=True)
    status = main(
        ["conform", "--runner", "reference", "--traces", str(root), "--junit", str(junit)]
    )
    out = capsys.readouterr().out
    assert status == 1
    assert "RETRY-07-retry-wait-not-before-due: step 3 (acknowledge_starting) diverged" in out
    assert "runs[r1].status: expected 'running', got 'dispatching'" in out
    failures = ET.parse(junit).getroot().findall("testcase/failure")
    assert len(failures) == 1
    assert "step 3" in (failures[0].text or "")


def test_a_missing_capability_is_reported_not_applicable_never_passed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "report.xml"
    spec = LACKING
    status = main(
        ["conform", "--runner", spec, "--traces", str(corpus(tmp_path)), "--junit", str(junit)]
    )
    out = capsys.readouterr().out
    assert status == 0
    assert row(out, "not applicable") == "1"
    assert "runner lacks: cluster_recovery" in out
    assert row(out, "properties covered") == "2 of 3 named"
    skipped = ET.parse(junit).getroot().findall("testcase/skipped")
    assert [s.get("message") for s in skipped] == ["not applicable: needs cluster_recovery"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["conform", "--runner", "nope"], "use edge, cluster, reference or package.module:factory"),
        (["conform", "--runner", "no_such_module:make"], "cannot import no_such_module"),
        (["conform", "--runner", "conformance.cli:nothing"], "has no callable 'nothing'"),
        (["conform", "--traces", "/nonexistent/dir"], "not a directory"),
        (["conform", "--jobs", "0"], "--jobs must be 1 or more"),
        (["traces", "show", "/nonexistent.jsonl"], "no such trace file"),
    ],
)
def test_bad_usage_exits_2_with_one_line_saying_what_to_fix(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2
    assert len(err) == 1
    assert err[0].startswith("qlk: error: ")
    assert message in err[0]


def test_cluster_without_a_dsn_says_how_to_give_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(factories.BUILTIN, "cluster", "conformance.run.adapter:ReferenceAdapter")
    with pytest.raises(factories.FactoryError, match="pass --dsn or set QL3_PG_DSN"):
        factories.resolve("cluster", dsn=None)


def test_traces_show_lists_each_step_with_what_it_changed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = RUN_CORPUS / "RETRY-17-local-candidate-error-counted-page-continues.jsonl"
    assert main(["traces", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "RETRY-17-local-candidate-error-counted-page-continues  [run, profile edge"
    )
    assert "   1 t=1000000 admit_run r1 r1-a1: applied admitted" in out
    assert "runs[r1].status: 'queued' -> 'dispatching'" in out
    assert "pass lost_retry_page -> {'errored': 1, 'failed': 2, 'scanned': 3}" in out
    assert "[io_error]" in out


def test_the_pytest_plugin_gives_one_test_per_trace(tmp_path: Path) -> None:
    root = corpus(tmp_path, tamper=True)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "--ql3-runner",
            LACKING,
            "--ql3-traces",
            str(root),
            "-rs",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**_env(), "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    out = run.stdout
    assert run.returncode == 1, out
    # Two traces (one tampered, one needing a missing capability) plus guard mode, which the
    # reference adapter supports and passes.
    assert "1 failed, 2 passed, 1 skipped" in out
    assert "step 3 (acknowledge_starting) diverged" in out
    assert "not applicable: needs cluster_recovery" in out


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
