"""Reading a Workflow plan file (SPEC §4.1 plan admission, ADR-0229; issue 18 item 5).

`load_plan(path)` reads a TOML plan file with the standard library's `tomllib` and validates it
with the kernel (`kernel.workflow.plan_from_mapping`; the file format is in `kernel.workflow.plan`).
Every problem is a `UsageError` (exit 2) with one line that starts with the file name:

    plan.toml: cannot read the plan file (No such file or directory)
    plan.toml: not a TOML file: Expected '=' after a key in a key/value pair (at line 3, column 5)
    plan.toml: step "b": after names unknown step "x"

so `qlk workflow submit PLAN` prints it as `qlk: <line>` and never a traceback.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from conformance.cli.common import UsageError
from kernel.workflow import PlanError, WorkflowPlan, plan_from_mapping

__all__ = ["load_plan"]


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


def load_plan(path: Path) -> WorkflowPlan:
    """The validated plan in the TOML file `path` (§4.1 plan admission).

    :raises UsageError: one line naming the file: it cannot be read (missing, a directory, no
        permission), it is not UTF-8, it is not TOML (with tomllib's line and column), or the
        kernel refused the plan (`PlanError`'s message, which names the step and the field).
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UsageError(f"{path}: cannot read the plan file ({reason})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # TOML is UTF-8 by definition (TOML 1.0 "Spec"); say where, never the bytes.
        raise UsageError(f"{path}: not a TOML file: not UTF-8 at byte {exc.start}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not a TOML file: {_first_line(str(exc))}") from None
    except RecursionError:
        # tomllib parses nested arrays and inline tables recursively; a plan has no such depth.
        raise UsageError(f"{path}: not a TOML file: nested too deeply") from None
    try:
        return plan_from_mapping(data)
    except PlanError as exc:
        raise UsageError(f"{path}: {exc.message}") from None
