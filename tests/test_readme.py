"""The README's first-use example runs as written (docs that show the first use in a minute)."""

from __future__ import annotations

import doctest
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kernel
from kernel import Applied, Code, Rejected

ROOT = Path(__file__).resolve().parents[1]


def test_readme_python_example_runs() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README has no python example"
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)  # noqa: S102 - our own README
    assert isinstance(namespace["outcome"], Applied)
    assert namespace["refused"] == Rejected(Code.LEASE_TOKEN_MISMATCH)


def test_example_script_drives_a_run_to_success() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "first_run.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert "done: run run-1 is succeeded; invariants hold" in done.stdout
    assert "replayed (already_terminal)" in done.stdout


def test_worker_example_runs_a_real_child_once_to_success() -> None:
    """`examples/worker_first_run.py` (README "The Worker"): a real child, one spawn, the
    Run `succeeded`, no receipt left."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "worker_first_run.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert "delivery: running_acknowledged" in done.stdout
    assert "completion: ['completed']" in done.stdout
    assert "run: succeeded" in done.stdout
    assert "spawns: 1 receipt left: None" in done.stdout


def test_package_docstring_example_runs() -> None:
    """The example in `kernel/__init__.py`'s docstring is a doctest that passes."""
    failed, attempted = doctest.testmod(kernel, verbose=False)
    assert attempted >= 3
    assert failed == 0


@pytest.mark.slow  # the README's main job: the whole corpus, guard and kill modes
def test_the_main_job_command_replays_the_corpus_with_no_divergence() -> None:
    """The README's main-job command, as written after the install step."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert ".venv/bin/qlk conform\n" in text
    done = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "conform", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| runner             |                   edge |" in done.stdout
    assert "|   diverged         |                      0 |" in done.stdout
