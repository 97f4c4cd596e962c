"""Kill mode through the adapter port for third-party runners (issue 16 item 4; RUN-06,
RETRY-10): the example JSON store passes it, the same store with non-atomic persistence is
caught, and an adapter without the port is reported as not run, naming what it lacks. Real
files (tmp_path and the adapters' own temporary folders), real forked children, real SIGKILLs."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.run.adapter import ReferenceAdapter
from conformance.run.corpus import RUN_CORPUS
from conformance.run.kill_port import kill_every_write
from examples.adapter.jsonstore import make_adapter
from tests.support.kill_adapters import make_non_atomic, make_without_locator

# Three named traces with writes of one to several effects (admission, leases, retries).
SOME = (
    "RETRY-07-retry-wait-not-before-due.jsonl",
    "LEASE-02-each-mismatched-fence-field-rejected.jsonl",
    "REC-01-cluster-source-selects-exactly-the-candidates.jsonl",
)
JSON_STORE = "examples.adapter.jsonstore:make_adapter"
NON_ATOMIC = "tests.support.kill_adapters:make_non_atomic"


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    root = tmp_path / "traces"
    root.mkdir()
    for name in SOME:
        shutil.copy(RUN_CORPUS / name, root / name)
    return root


@pytest.mark.spec("RUN-06", "RETRY-10")
def test_an_atomic_store_survives_a_sigkill_at_every_port_boundary(traces: Path) -> None:
    report = kill_every_write(make_adapter, traces)
    assert report.not_run is None
    assert report.failures == []
    assert report.results, "no write path was killed"
    # m + 2 boundaries per write of m effects, every one a real SIGKILL
    assert report.kills == sum(r.effects + 2 for r in report.results)
    assert all(r.effects >= 1 for r in report.results)


@pytest.mark.spec("RUN-06")
def test_a_store_that_writes_effects_one_by_one_is_caught(traces: Path) -> None:
    report = kill_every_write(make_non_atomic, traces)
    assert report.not_run is None
    torn = [line for line in report.failures if "not the before-state" in line]
    assert torn, report.failures
    # the finding names the write path, the boundary and a field-level difference
    assert "killed before effect 2/" in torn[0]
    assert "expected" in torn[0]


def test_an_adapter_without_the_port_is_not_killed_and_says_why(traces: Path) -> None:
    assert "does not declare the 'kill' capability" in (
        kill_every_write(ReferenceAdapter, traces).not_run or ""
    )
    assert "has no locator()" in (kill_every_write(make_without_locator, traces).not_run or "")


def test_qlk_conform_runs_kill_mode_for_a_module_factory_runner(
    traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "report.xml"
    argv = ["conform", "--runner", JSON_STORE, "--traces", str(traces), "-q", "--no-guards"]
    assert main([*argv, "--junit", str(junit)]) == 0
    out = capsys.readouterr().out
    assert "kill mode: " in out
    assert "SIGKILLs at every storage-port boundary" in out
    assert out.splitlines()[-1] == "verdict: PASS"
    case = ET.parse(junit).getroot().find("testcase[@name='kill mode']")
    assert case is not None
    assert case.find("skipped") is None
    assert case.find("failure") is None


def test_qlk_conform_fails_a_non_atomic_store_in_kill_mode(
    traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "report.xml"
    argv = ["conform", "--runner", NON_ATOMIC, "--traces", str(traces), "-q", "--no-guards"]
    assert main([*argv, "--junit", str(junit)]) == 1
    out = capsys.readouterr().out
    assert "kill mode: " in out
    assert "not the before-state" in out
    assert "kill mode: " in out.splitlines()[-1]  # the verdict names kill mode's findings
    failure = ET.parse(junit).getroot().find("testcase[@name='kill mode']/failure")
    assert failure is not None
    assert "not the before-state" in (failure.text or "")
