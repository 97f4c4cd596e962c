"""docs/adapter-guide.md is true (issue 16 item 4, issue 18): its walk-through, run as a newcomer
would run it, ends with a passing third-party adapter, kill mode and Workflows included; its
tables of effect fields, aggregate shapes and enum values, Run and Workflow (§9), are the
kernel's own."""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import shutil
import subprocess
import sys
import typing
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance.run.corpus import RUN_CORPUS, trace_paths
from kernel import effects, entities
from kernel import workflow as wf
from tests.support.wiring_traces import WIRING, wiring_traces

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "adapter-guide.md"
BIN = Path(sys.executable).parent  # the venv's console scripts: `qlk`, `pytest`


def _block_after(marker: str, fence: str) -> list[str]:
    """The lines of the first fenced block (or table) after the HTML comment `marker`."""
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index(f"<!-- {marker}")
    lines = text[start:].splitlines()[1:]
    if fence == "table":
        table = []
        for line in lines:
            if not line.startswith("|"):
                break
            table.append(line)
        return table
    assert lines[0] == f"```{fence}", lines[0]
    return lines[1 : lines.index("```")]


def _table(marker: str) -> dict[str, list[str]]:
    """First column (a backticked name) -> the backticked items of the second column."""
    rows: dict[str, list[str]] = {}
    for line in _block_after(marker, "table")[2:]:  # after the header and its rule
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        name = cells[0].strip("`")
        rows[name] = [item.replace("\\|", "|") for item in re.findall(r"`([^`]*)`", cells[1])]
    return rows


def _fields(cls: type) -> list[str]:
    return [f"{f.name}: {f.type}" for f in dataclasses.fields(cls)]


def test_the_effect_table_is_kernel_effects() -> None:
    table = _table("effects:")
    members = typing.get_args(effects.Effect)
    assert list(table) == [cls.__name__ for cls in members]
    for cls in members:
        assert table[cls.__name__] == _fields(cls), cls.__name__


def test_the_shape_table_is_kernel_entities() -> None:
    table = _table("shapes:")
    shapes = (
        entities.RunAggregate,
        entities.Run,
        entities.Attempt,
        entities.RunRetryPolicy,
        entities.Lease,
        entities.Event,
    )
    assert list(table) == [cls.__name__ for cls in shapes]
    for cls in shapes:
        assert table[cls.__name__] == _fields(cls), cls.__name__


def test_the_workflow_effect_table_is_kernel_workflow_effects() -> None:
    """§9's table: the Workflow effects a store with the `workflow` capability persists."""
    table = _table("workflow-effects:")
    members = [
        c for c in typing.get_args(wf.WorkflowEffect) if c not in typing.get_args(effects.Effect)
    ]
    assert list(table) == [cls.__name__ for cls in members]
    for cls in members:
        assert table[cls.__name__] == _fields(cls), cls.__name__


def test_the_workflow_shape_table_is_kernel_workflow_entities() -> None:
    table = _table("workflow-shapes:")
    shapes = (wf.WorkflowAggregate, wf.WorkflowAdmission, wf.StepRun, wf.TaskAdmission)
    assert list(table) == [cls.__name__ for cls in shapes]
    for cls in shapes:
        assert table[cls.__name__] == _fields(cls), cls.__name__


def test_the_enum_table_is_every_enum_a_stored_field_has() -> None:
    table = _table("enums:")
    stored: dict[str, type[enum.Enum]] = {}
    for cls in (
        entities.Run,
        entities.Attempt,
        entities.RunRetryPolicy,
        entities.Lease,
        entities.Event,
        wf.WorkflowAdmission,
        wf.StepRun,
        wf.TaskAdmission,
    ):
        for hint in typing.get_type_hints(cls).values():
            stored.update(
                (o.__name__, o)
                for o in typing.get_args(hint) or (hint,)
                if isinstance(o, type) and issubclass(o, enum.Enum)
            )
    assert set(table) == set(stored)
    for name, values in table.items():
        assert values == [member.value for member in stored[name]], name


@pytest.mark.slow
@pytest.mark.spec("RUN-06", "RETRY-10")
def test_the_walkthrough_takes_a_newcomer_to_a_passing_adapter(tmp_path: Path) -> None:
    """The guide's §0 block, run as written in an empty folder with the installed `qlk` and
    `pytest` and no PYTHONPATH: the example JSON store passes replay of the whole bundled corpus,
    guard mode and kill mode through the adapter port (`qlk conform`, the one full replay of this
    store in the suite), and the pytest plugin. The plugin's step is the same replay through
    pytest, so it gets the fixed WIRING subset (tests/support/wiring_traces.py) through its own
    documented option, `--ql3-traces`, given the way pytest takes options from the environment
    (`PYTEST_ADDOPTS`): the commands stay exactly as the guide writes them."""
    commands = _block_after("walkthrough:", "sh")
    assert any(c.startswith("qlk conform ") for c in commands)
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "PYTHONPATH" and not k.startswith(("PYTEST_", "QL3_"))
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["QL3_KERNEL"] = str(ROOT)
    env["PYTEST_ADDOPTS"] = f"--ql3-traces={wiring_traces(tmp_path)}"
    script = "\n".join(["set -euo pipefail", *commands])
    done = subprocess.run(
        [shutil.which("bash") or "/bin/bash", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, f"{out[-4000:]}\n{done.stderr[-4000:]}"
    assert "verdict: PASS" in out.splitlines(), out[-3000:]
    assert "did not run" not in out
    kill = re.search(
        r"^kill mode: (\d+) write paths, (\d+) SIGKILLs at every storage-port", out, re.M
    )
    assert kill is not None, out[-3000:]
    assert int(kill.group(1)) > 0
    assert int(kill.group(2)) > int(kill.group(1))
    assert re.search(
        r"^guard mode: \d+ write paths, \d+ stale writes probed .* 0 accepted", out, re.M
    )
    # the pytest plugin's summary: one test per WIRING trace, plus guard-mode
    assert re.search(rf"^{len(WIRING) + 1} passed in ", out, re.M), out[-3000:]
    # qlk conform replayed the whole bundled corpus (the plugin's subset did not reach it)
    assert f"qlk conform: {len(trace_paths())} traces from {RUN_CORPUS} against " in out
    suite = ET.parse(tmp_path / "my-adapter" / "report.xml").getroot()
    assert suite.get("failures") == "0"
    kill_case = suite.find("testcase[@name='kill mode']")
    assert kill_case is not None
    assert kill_case.find("skipped") is None
