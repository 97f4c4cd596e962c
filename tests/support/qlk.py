"""Running `qlk` from a test: as a real process (`qlk_process`) or in this process (`qlk`), and
the one-line error check every command's user errors must pass (SPEC E-7)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cli import main

ROOT = Path(__file__).resolve().parents[2]


def qlk_process(cwd: Path, *args: str, db: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m conformance.cli ARGS [--db DB]` in `cwd` (without `--db`, `./ql3.db`), a real
    process with no `$QL3_DB` and no pytest variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "QL3_DB"}
    env["PYTHONPATH"] = str(ROOT)
    extra = [] if db is None else ["--db", str(db)]
    return subprocess.run(
        [sys.executable, "-m", "conformance.cli", *args, *extra],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def one_line(stderr: str, prefix: str | None = "qlk: ") -> str:
    """E-7: a user error is exactly one stderr line (starting with `prefix`), no traceback."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    if prefix is not None:
        assert lines[0].startswith(prefix), stderr
    assert "Traceback" not in stderr
    return lines[0]


def qlk(capsys: pytest.CaptureFixture[str], db: Path, *args: str) -> tuple[int, str, str]:
    """`qlk ARGS --db DB` in this process (`--db` goes before a `--` command): (status, stdout,
    stderr)."""
    head, sep, tail = list(args), [], []
    if "--" in head:
        cut = head.index("--")
        head, sep, tail = head[:cut], ["--"], head[cut + 1 :]
    status = main([*head, "--db", str(db), *sep, *tail])
    out = capsys.readouterr()
    return status, out.out, out.err
