"""Reading a Workflow plan file (SPEC §4.1 plan admission; issue 18 item 5): `load_plan` returns
the kernel's plan, and every problem is one `UsageError` line (exit 2) that names the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.cli.common import ExitCode, UsageError
from conformance.cli.workflow_plan import load_plan
from kernel.workflow import PlanStep, plan_from_mapping

GOOD = """\
name = "build-and-test"

[[steps]]
key = "build"
argv = ["make", "build"]

[[steps]]
key = "test"
argv = ["make", "test"]
after = ["build"]
max_attempts = 3        # optional, default 1
retry_backoff_ms = 1000 # optional, default 0
"""


def _write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "plan.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _refusal(path: Path) -> str:
    with pytest.raises(UsageError) as raised:
        load_plan(path)
    assert raised.value.exit_code == ExitCode.USAGE
    message = raised.value.message
    assert len(message.splitlines()) == 1, message
    assert message.startswith(f"{path}: "), message
    assert raised.value.__cause__ is None  # `from None`: nothing chained for a traceback
    return message


def test_a_good_file_gives_the_kernels_plan(tmp_path: Path) -> None:
    plan = load_plan(_write(tmp_path, GOOD))
    assert plan.name == "build-and-test"
    assert plan.steps[1] == PlanStep(
        key="test", argv=("make", "test"), after=("build",), max_attempts=3, retry_backoff_ms=1000
    )
    assert plan.topological_order() == ("build", "test")
    assert plan == plan_from_mapping(plan.document())


def test_a_syntax_error_is_one_line_with_tomllibs_line_and_column(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD.replace('key = "test"', 'key = "test'))
    message = _refusal(path)
    assert "not a TOML file: " in message
    assert "(at line 8, column " in message


def test_an_unknown_key_is_the_kernels_refusal_after_the_file_name(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD + 'cwd = "/srv"\n')  # lands in the last [[steps]] table
    assert _refusal(path) == f'{path}: step "test": unknown key "cwd"'


def test_an_unknown_top_level_key_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, 'owner = "me"\n' + GOOD)
    assert _refusal(path) == f'{path}: plan: unknown key "owner"'


def test_a_missing_file_cannot_be_read(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    assert _refusal(path) == f"{path}: cannot read the plan file (No such file or directory)"


def test_a_directory_cannot_be_read(tmp_path: Path) -> None:
    assert "cannot read the plan file" in _refusal(tmp_path)


def test_bytes_that_are_not_utf8_are_refused_without_repeating_them(tmp_path: Path) -> None:
    path = _write(tmp_path, b'name = "\xff"\n')
    assert _refusal(path) == f"{path}: not a TOML file: not UTF-8 at byte 8"


def test_nesting_too_deep_for_tomllib_is_one_line_too(tmp_path: Path) -> None:
    path = _write(tmp_path, "name = " + "[" * 100_000)
    assert _refusal(path) == f"{path}: not a TOML file: nested too deeply"
