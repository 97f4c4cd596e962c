"""The Worker runtime runs the kernel, not a copy of it (issue 14 item 1, the check).

Each plant of `WORKER_PLANTS` changes one Worker decision in the kernel's own tables
(`kernel/specs/journal.py`: the §3.7 `REPLAY` row for `started`, the running ACK's accepted
answers, the §3.14 retention order). The Worker runtime's own tests (`tests/runners/worker/`,
real journals, the real edge control plane) are run in a subprocess with the plant installed at
load (`-p model_tests.quality.plant_plugin`), and must fail: a runtime that kept its own copy
of the rule would stay green, which is exactly the defect this tier exists to catch. Kernel
data tests are not run, so the catch comes from the runtime.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from model_tests.quality import plant_plugin
from model_tests.quality.plants import WORKER_PLANTS

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_TESTS = "tests/runners/worker"
#: The runtime test module that must catch each plant (run alone, `-x`, to keep the tier fast;
#: the assertion is that a Worker runtime test fails, not a kernel data test).
HINTS = {
    "worker_replay_started_starts_again": "tests/runners/worker/test_receiver.py",
    "worker_running_ack_refuses_already_running": "tests/runners/worker/test_recovery.py",
    "worker_retention_journal_before_receipt": "tests/runners/worker/test_retention.py",
}


def _run(plant: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != plant_plugin.ENV}
    env[plant_plugin.ENV] = plant
    command = [
        sys.executable,
        "-m",
        "pytest",
        HINTS[plant],
        "-x",
        "-q",
        "-p",
        "model_tests.quality.plant_plugin",
        "-p",
        "no:cacheprovider",
        "-n",
        "0",  # in this process: the plant is loaded where the tests run, and -x stops at once
    ]
    return subprocess.run(  # noqa: S603 - the interpreter running this test, fixed arguments
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False
    )


@pytest.mark.parametrize("plant", sorted(WORKER_PLANTS))
def test_every_worker_plant_still_matches_the_kernel_source(plant: str) -> None:
    """A kernel edit that removes a plant's text fails here, naming the plant."""
    assert HINTS[plant].startswith(f"{RUNTIME_TESTS}/")
    for patch in WORKER_PLANTS[plant]:
        patch.check()  # PlantError names the module and the text that no longer matches


@pytest.mark.slow
@pytest.mark.spec("INBOX-06", "INBOX-39")
@pytest.mark.parametrize("plant", sorted(WORKER_PLANTS))
def test_the_worker_runtime_tests_catch_each_planted_kernel_change(plant: str) -> None:
    result = _run(plant)
    output = result.stdout + result.stderr
    assert f"plant {plant}" in result.stdout, output[-3000:]
    assert "kernel.specs.journal: planted" in result.stdout, output[-3000:]
    assert result.returncode == 1, output[-3000:]  # a test failed (not a usage error, not 0)
    failed = re.findall(r"^FAILED (\S+)", result.stdout, re.MULTILINE)
    assert failed, output[-3000:]
    assert all(node.startswith(f"{RUNTIME_TESTS}/") for node in failed), failed
