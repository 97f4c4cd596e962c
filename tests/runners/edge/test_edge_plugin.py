"""The edge runner through the pytest plugin, as an adapter author would run it (issue 4, item 5):
`pytest --ql3-runner=edge` gives one test per trace plus the guard mode, and a cluster-only trace
is skipped with the capability named, never passed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conformance.run.corpus import RUN_CORPUS

ROOT = Path(__file__).resolve().parents[3]
TRACES = (
    "LEASE-09-old-worker-fenced-after-lost-release.jsonl",
    "RETRY-13-page-bounded-and-has-more-exact.jsonl",
    "RUN-06-fault-before-commit-writes-nothing.jsonl",
    "REC-02-cluster-source-bounded-has-more-exact.jsonl",
)


def test_pytest_ql3_runner_edge_gives_one_test_per_trace(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    for name in TRACES:
        shutil.copy(RUN_CORPUS / name, traces / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "--ql3-runner=edge",
            "--ql3-traces",
            str(traces),
            "-rs",
            "-v",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env | {"PYTHONPATH": str(ROOT)},
    )
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    assert "4 passed, 1 skipped" in out
    assert "ql3[edge]::guard-mode PASSED" in out
    assert "ql3[edge]::LEASE-09-old-worker-fenced-after-lost-release.jsonl PASSED" in out
    assert "not applicable: needs cluster_recovery" in out
