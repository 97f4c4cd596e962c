"""The README's first-use example runs as written (docs that show the first use in a minute)."""

from __future__ import annotations

import argparse
import doctest
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kernel
from conformance.cli import conform as conform_command
from conformance.cli import main
from conformance.run.corpus import RUN_CORPUS, trace_paths
from kernel import Applied, Code, Rejected
from tests.support.wiring_traces import CLUSTER_ONLY, WIRING, wiring_traces

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


def test_the_main_job_command_as_written_checks_the_bundled_corpus_every_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The README's main-job command, as written after the install step (`qlk conform`, no
    option), selects the whole bundled corpus and the edge runner with the guard and kill modes
    and the lock probe on: what `tests/runners/edge` checks in full (test_edge_corpus.py: every
    trace and guard mode; test_edge_kill.py; test_edge_locks.py)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert ".venv/bin/qlk conform\n" in text
    seen: list[tuple[argparse.Namespace, Path, list[Path]]] = []

    def record(
        args: argparse.Namespace, ctx: object, root: Path, paths: list[Path], dsn: str | None
    ) -> int:
        seen.append((args, root, paths))
        return 0

    monkeypatch.setattr(conform_command, "_conform_on", record)
    assert main(["conform"]) == 0
    [(args, root, paths)] = seen
    assert (root, paths) == (RUN_CORPUS, trace_paths(RUN_CORPUS))
    assert len(paths) >= 500  # the named and the generated traces
    assert args.runner == "edge"
    assert (args.no_guards, args.no_kill, args.no_locks) == (False, False, False)


@pytest.mark.slow  # the README's main job in a process of its own: replay, guard, kill, locks
def test_the_main_job_command_replays_the_corpus_with_no_divergence(tmp_path: Path) -> None:
    """The README's main-job command in a fresh process, end to end (replay, guard mode, kill
    mode, lock probe, summary, exit status) on the fixed WIRING subset of the corpus, given
    through its own `--traces` option; the test above shows that the command as written selects
    the whole corpus, which the edge runner's own tests replay once each way."""
    traces = wiring_traces(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "conform", "--quiet", "--traces", str(traces)],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        cwd=ROOT,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    applicable = len(WIRING) - len(CLUSTER_ONLY)
    assert "| runner             |                   edge |" in out
    assert f"|   passed           | {applicable:>22} |" in out
    assert "|   diverged         |                      0 |" in out
    assert re.search(r"^guard mode: \d+ write paths, .* 0 accepted by the runner$", out, re.M)
    assert re.search(r"^kill mode: \d+ write paths, \d+ SIGKILLs .*, 0 left a state", out, re.M)
    assert re.search(r"^lock probe: \d+ write paths, .* 0 failures$", out, re.M)
    assert out.splitlines()[-1].startswith("verdict: PASS")
