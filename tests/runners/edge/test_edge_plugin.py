"""The edge runner through the pytest plugin, as an adapter author would run it (issue 4, item 5):
`pytest --ql3-runner=edge` gives one test per trace plus the guard mode, and a cluster-only trace
is skipped with the capability named, never passed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from conformance.run.corpus import RUN_CORPUS, read_text
from conformance.run.trace import canonical, projection_digest

ROOT = Path(__file__).resolve().parents[3]
TRACES = (
    "LEASE-09-old-worker-fenced-after-lost-release.jsonl",
    "RETRY-13-page-bounded-and-has-more-exact.jsonl",
    "RUN-06-fault-before-commit-writes-nothing.jsonl",
    "REC-02-cluster-source-bounded-has-more-exact.jsonl",
)


def run_plugin(tmp_path: Path, traces: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """`pytest --ql3-runner=edge --ql3-traces TRACES OPTIONS` in a fresh process, as an adapter
    author runs it from `tmp_path`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    pytest_command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
    plugin = ["--rootdir", str(tmp_path), "--ql3-runner=edge", "--ql3-traces", str(traces)]
    return subprocess.run(
        [*pytest_command, *plugin, *options],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env | {"PYTHONPATH": str(ROOT)},
    )


def test_pytest_ql3_runner_edge_gives_one_test_per_trace(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    for name in TRACES:
        shutil.copy(RUN_CORPUS / name, traces / name)
    run = run_plugin(tmp_path, traces, "-rs", "-v")
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    assert "4 passed, 1 skipped" in out
    assert "ql3.edge::guard-mode PASSED" in out
    assert "ql3.edge::LEASE-09-old-worker-fenced-after-lost-release.jsonl PASSED" in out
    assert "not applicable: needs cluster_recovery" in out


def test_a_failing_trace_is_one_readable_block_with_a_sensible_junit_classname(
    tmp_path: Path,
) -> None:
    """Issue 16 item 4: a divergence is the replayer's report, a malformed trace one line naming
    its file and line, no frames of pytest's own; the JUnit classname is `ql3.<runner>`."""
    traces = tmp_path / "traces"
    traces.mkdir()
    name = TRACES[0]
    lines = read_text(RUN_CORPUS / name).splitlines()
    step = json.loads(lines[3])
    step["expect"]["projection"]["runs"][0]["status"] = "succeeded"
    step["expect"]["digest"] = projection_digest(step["expect"]["projection"])
    lines[3] = canonical(step)
    (traces / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (traces / "zz-bad.jsonl").write_text('{"bad": 1}\n', encoding="utf-8")
    junit = tmp_path / "report.xml"
    run = run_plugin(tmp_path, traces, f"--junitxml={junit}", "-k", "not guard")
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "2 failed" in out
    assert f"{name.removesuffix('.jsonl')}: step 3 " in out
    assert "zz-bad.jsonl: malformed trace: line 1: bad: unknown header member" in out
    assert "_pytest" not in out  # no frames of pytest's own
    assert "Traceback" not in out
    cases = ET.parse(junit).getroot().iter("testcase")
    assert {(c.get("classname"), c.get("name")) for c in cases} == {
        ("ql3.edge", name),
        ("ql3.edge", "zz-bad.jsonl"),
    }
