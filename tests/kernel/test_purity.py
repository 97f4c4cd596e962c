"""The kernel is pure (CAD-17, design card): no clock, randomness, database, OS or threads."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN_IN_KERNEL = {
    "sqlite3",
    "psycopg",
    "psycopg_pool",
    "time",
    "datetime",
    "random",
    "secrets",
    "os",
    "threading",
    "asyncio",
    "socket",
    "subprocess",
    "uuid",
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _py_files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.spec("CAD-17")
def test_kernel_imports_no_io_clock_or_randomness() -> None:
    """CAD-17: `kernel/` imports no sqlite3, psycopg, time, random, os or threading (nor any
    other clock, entropy, OS or concurrency module)."""
    files = _py_files("kernel")
    assert len(files) > 20
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name for name in _imports(path) if name.split(".")[0] in FORBIDDEN_IN_KERNEL
        )
        for path in files
    }
    assert {k: v for k, v in offenders.items() if v} == {}


@pytest.mark.spec("CAD-17")
def test_edge_runner_imports_nothing_from_the_cluster_runner() -> None:
    """CAD-17 (and FP-3): edge modules import nothing from `runners/cluster` or psycopg."""
    for path in _py_files("runners/edge"):
        names = _imports(path)
        assert not any(n.startswith(("runners.cluster", "psycopg")) for n in names), path


def test_the_detector_sees_a_forbidden_import(tmp_path: Path) -> None:
    """The scan above can fail: it finds `import time` and `from os import path`."""
    sample = tmp_path / "sample.py"
    sample.write_text("import time\nfrom os import path\nfrom . import sibling\n")
    assert _imports(sample) == {"time", "os"}
