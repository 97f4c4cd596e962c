"""The architecture is checked, not hoped for (ARCHITECTURE "Imports flow one way"; CAD-17).

- The import contract of `pyproject.toml` (`[tool.importlinter]`: `kernel <- runners <-
  conformance`, `model_tests` imported by neither, `runners.edge` and `runners.cluster`
  independent) holds: `lint-imports` is run here as well as in `.ci/run`.
- Runners and the conformance suite use the kernel through its facades only (`kernel`,
  `kernel.specs`, `kernel.worker`), never by reaching into a kernel module.
- `runners/edge/` holds the SQLite Run store only (no Worker-host module), and `kernel/` top level
  holds no `journal_*` module (the Worker's decisions live in `kernel/worker/`).
- Nothing that ships (`kernel`, `runners`, `conformance`) imports `model_tests` or `tests`, even
  dynamically by name.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FACADES = frozenset(
    {
        "kernel",
        "kernel.specs",
        "kernel.task",
        "kernel.worker",
        "kernel.workflow",
        "kernel.approved_action",
    }
)


def _python_files(*roots: str) -> list[Path]:
    return sorted(p for root in roots for p in (ROOT / root).rglob("*.py"))


def _kernel_imports(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        found += [(node.lineno, m) for m in modules if m == "kernel" or m.startswith("kernel.")]
    return found


@pytest.mark.spec("CAD-17")
def test_the_import_contract_holds() -> None:
    """`lint-imports` keeps every contract of `pyproject.toml` (and fails the test otherwise)."""
    executable = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert executable is not None, "import-linter is a dev dependency (pyproject.toml)"
    result = subprocess.run(
        [executable, "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
    assert result.stdout.count(" KEPT") >= 3


def test_runners_and_conformance_use_the_kernel_through_its_facades() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in _python_files("runners", "conformance")
        for line, module in _kernel_imports(path)
        if module not in FACADES
    ]
    assert offenders == [], "import from kernel, kernel.specs or kernel.worker:\n" + "\n".join(
        offenders
    )


def test_the_layout_shows_the_two_domains() -> None:
    edge = {p.name for p in (ROOT / "runners" / "edge").glob("*.py")}
    worker_host = {"file_journal.py", "sqlite_journal.py", "journal_lock.py", "journal_common.py"}
    worker_host |= {"posix_executor.py", "launch_wrapper.py", "receipts.py", "kill.py"}
    assert edge & worker_host == set()
    assert not list((ROOT / "kernel").glob("journal_*.py"))
    assert (ROOT / "kernel" / "worker" / "__init__.py").is_file()
    for package in ("journal", "posix"):
        assert (ROOT / "runners" / "worker" / package / "__init__.py").is_file()
    for component in ("run", "journal"):
        assert (ROOT / "conformance" / component / "__init__.py").is_file()


def test_nothing_that_ships_names_the_models_or_the_tests() -> None:
    """Dynamic imports (`importlib.import_module("model_tests...")`) are invisible to
    import-linter; a string naming a test package in shipped code would be one."""
    offenders: list[str] = []
    for path in _python_files("kernel", "runners", "conformance"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value).startswith(("model_tests", "tests"))
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_every_folder_the_readme_layout_names_exists() -> None:
    """The README's layout table is the newcomer's map: each folder it names is there."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = text[text.index("## Layout") : text.index("## Testing")]
    folders = set(re.findall(r"^\| `([a-z_/]+/)` \|", layout, re.MULTILINE))
    assert len(folders) >= 10
    assert [f for f in sorted(folders) if not (ROOT / f).is_dir()] == []
