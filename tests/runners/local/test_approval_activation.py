"""AA-15 (SPEC §5.6, ADR-0036 §6; decision AA-D5 amends D-5): the Approved Action lifecycle is
default unreachable.

- Import graph: importing every application and runner entry point (the local and cluster
  applications, the Worker host, `qlk` and each of its command modules) and building the
  default local application imports nothing of `runners.approved_action`, in a fresh
  interpreter (a child process: this test process may have imported it already).
- Source: outside its own package and tests, `runners.approved_action` is imported in exactly
  one place, inside the function the opt-in calls (`LocalApplication._approval_lifecycle`), and
  never at module level.
- Construction: the default application has no Approved Action lifecycle and starts no thread
  for it; with `approvals=True` it has one, inert until `start()`, scheduled after it, and
  stopped first by `stop()`.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from kernel.specs import Profile
from runners.local.app import LocalApplication
from tests.support.local_app import Stepped

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = "runners.approved_action"

#: The modules a person's process starts from (`qlk ...`), and the applications they assemble.
ENTRY_POINTS = (
    "runners.local.app",
    "runners.cluster.app",
    "runners.cluster.worker_host",
    "conformance.cli",
    *(f"conformance.cli.{name}" for name in (
        "conform", "traces", "tasks", "submit", "workflow", "serve", "worker", "status",
        "logs", "cancel",
    )),
)  # fmt: skip


def _child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.spec("AA-15")
def test_importing_every_entry_point_and_building_the_default_app_imports_no_lifecycle(
    tmp_path: Path,
) -> None:
    db = tmp_path / "ql3.db"
    done = _child(
        f"""
        import importlib, sys, threading
        for name in {list(ENTRY_POINTS)!r}:
            importlib.import_module(name)
        from pathlib import Path
        from runners.local.app import LocalApplication
        app = LocalApplication(Path({str(db)!r}))
        prefix = {PACKAGE!r}
        loaded = sorted(m for m in sys.modules if m == prefix or m.startswith(prefix + "."))
        print("loaded", loaded)
        print("approvals", app.approvals)
        print("threads", sorted(t.name for t in threading.enumerate()))
        app.stop()
        """
    )
    assert done.returncode == 0, done.stderr
    assert "loaded []" in done.stdout
    assert "approvals None" in done.stdout
    assert "approved_action" not in done.stdout.split("threads", 1)[1]


def _names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.ImportFrom) and node.module:
        return [node.module]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return []


def _is_package(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def _typing_only(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in {
        "TYPE_CHECKING",
        "typing.TYPE_CHECKING",
    }


def _import_sites(tree: ast.Module) -> list[str]:
    """Where `tree` imports the package at run time: `module level`, or the enclosing
    function's name (imports under `if TYPE_CHECKING:` never run)."""
    sites: list[str] = []
    for statement in tree.body:
        if _typing_only(statement):
            continue
        functions = [
            n for n in ast.walk(statement) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        for node in ast.walk(statement):
            if not any(_is_package(n) for n in _names(node)):
                continue
            owners = [f.name for f in functions if any(c is node for c in ast.walk(f))]
            sites.append(owners[-1] if owners else "module level")
    return sites


@pytest.mark.spec("AA-15")
def test_only_the_opt_in_function_imports_the_lifecycle() -> None:
    sites: list[str] = []
    for path in sorted(ROOT.glob("**/*.py")):
        rel = path.relative_to(ROOT)
        skipped = rel.parts[0] in {".venv", "tests", "model_tests", "build"}
        if skipped or rel.parts[:2] == ("runners", "approved_action"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        sites.extend(f"{rel.as_posix()}:{site}" for site in _import_sites(tree))
    # Two imports (the lifecycle; the ports import nothing of it) in the one opt-in function.
    assert set(sites) == {"runners/local/app.py:_approval_lifecycle"}, sites


@pytest.mark.spec("AA-15")
def test_the_default_application_has_no_lifecycle_and_the_opt_in_has_one(tmp_path: Path) -> None:
    default = LocalApplication(tmp_path / "default.db", Profile.STANDALONE)
    try:
        assert default.approvals is None
        assert not any("approved_action" in t.name for t in threading.enumerate())
    finally:
        stopped = default.stop()
    assert stopped.approvals is None

    stepped = Stepped()
    app = LocalApplication(tmp_path / "optin.db", Profile.EDGE, schedulers=stepped, approvals=True)
    try:
        assert app.approvals is not None
        # L-1: inert after construction; no timer until the application starts it.
        assert app.approvals.state.value == "inert"
        assert not any("approved_action" in t.name for t in threading.enumerate())
        app.start()
        assert app.approvals.state.value == "scheduled"
    finally:
        stopped = app.stop()
    assert stopped.approvals is not None
    assert stopped.approvals.drained
    assert str(app.approvals.state) == "stopped"
