"""`qlk` imports a command's module only when that command runs, so that `qlk serve` does not
carry the conformance suite (issue 15 item 5: peak RSS of `qlk serve`, goal <= 30 MB;
docs/performance.md, "Peak memory of `qlk serve`"). Every check of what is imported runs in a
fresh interpreter: this test process has imported everything already."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import cli
from conformance.cli import COMMANDS, build_parser, command_named

ROOT = Path(__file__).resolve().parents[2]

#: What `qlk conform` and `qlk traces` load and no command of the local application needs: the
#: conformance suite (replay, journal, report), and the standard library they bring
#: (`multiprocessing` for the parallel replay, `xml` for the JUnit report, `concurrent.futures`),
#: and `importlib.metadata` (with `email`, `zipfile`), needed by `--version` only.
NOT_FOR_THE_LOCAL_APPLICATION = (
    "conformance.run",
    "conformance.journal",
    "conformance.report",
    "conformance.cli.conform",
    "conformance.cli.traces",
    "multiprocessing",
    "xml",
    "concurrent.futures",
    "importlib.metadata",
    "email",
)
#: The commands of the local application.
LOCAL_COMMANDS = (
    "task", "submit", "serve", "status", "logs", "cancel", "approvals", "approve", "deny",
)  # fmt: skip

#: Runs `qlk ARGS` in this interpreter, then writes the names of the modules it imported to
#: the file named by $QLK_MODULES (one per line).
DRIVER = """\
import os, sys
from conformance.cli import main
status = main(sys.argv[1:])
with open(os.environ["QLK_MODULES"], "w", encoding="utf-8") as out:
    out.write("\\n".join(sorted(sys.modules)))
sys.exit(status)
"""


def _loaded(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "QL3_DB"}
    env["PYTHONPATH"] = str(ROOT)
    return {**env, **extra}


def _qlk_modules(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run `qlk ARGS` in a fresh interpreter: (the process, the modules it had imported at the
    end)."""
    listing = tmp_path / "modules.txt"
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, *args],
        cwd=tmp_path,
        env=_env(QLK_MODULES=str(listing)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done, set(listing.read_text(encoding="utf-8").split())


def test_serve_runs_without_importing_the_conformance_suite(tmp_path: Path) -> None:
    done, modules = _qlk_modules(tmp_path, "serve", "--until-idle", "--db", str(tmp_path / "q.db"))
    assert done.returncode == 0, done.stderr
    assert "Runs in q.db" in done.stdout
    assert "conformance.cli.serve" in modules  # the driver saw the real run
    assert _loaded(modules, NOT_FOR_THE_LOCAL_APPLICATION) == []
    # nor the other commands' modules, except what serve imports itself (its duration flag)
    others = {module for name, module in COMMANDS.items() if name != "serve"}
    assert others & modules <= {"conformance.cli.tasks"}
    # croniter (and dateutil) come with the first cron question: a file without a cron task
    # never asks one (runners/edge/cron.py)
    assert _loaded(modules, ("croniter", "dateutil")) == []


@pytest.mark.parametrize("command", LOCAL_COMMANDS)
def test_a_local_command_does_not_import_the_conformance_suite(
    command: str, tmp_path: Path
) -> None:
    done, modules = _qlk_modules(tmp_path, command, "--help")
    assert done.returncode == 0, done.stderr
    assert f"usage: qlk {command}" in done.stdout
    assert _loaded(modules, NOT_FOR_THE_LOCAL_APPLICATION) == []
    # rich comes with the first table printed (`Context`): serve prints its one as it exits
    assert _loaded(modules, ("rich",)) == []


def test_help_still_imports_and_lists_every_command(tmp_path: Path) -> None:
    done, modules = _qlk_modules(tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    assert set(COMMANDS.values()) <= modules
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("    ")]
    assert [name for name in listed if name in COMMANDS] == list(COMMANDS)


def _names(parser: argparse.ArgumentParser) -> list[str]:
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(commands.choices)


def test_each_registered_name_is_the_command_its_module_adds() -> None:
    assert _names(build_parser()) == list(COMMANDS)
    for name in COMMANDS:
        assert _names(build_parser(name)) == [name]


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["serve", "--db", "x.db"], "serve"),
        (["--debug", "task", "list"], "task"),
        (["status", "--help"], "status"),
        ([], None),
        (["--help"], None),
        (["--help", "serve"], None),  # the top-level help lists every command
        (["--he", "serve"], None),  # an abbreviated --help
        (["--version", "serve"], None),
        (["bogus"], None),  # answered with the valid names
        (["-h"], None),
    ],
)
def test_command_named_is_the_command_only_when_nothing_before_it_needs_the_others(
    argv: list[str], command: str | None
) -> None:
    assert command_named(argv) == command


def test_the_version_is_read_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"qlk {cli.version()}\n"


#: `qlk conform` on the edge runner in an interpreter where psycopg cannot be imported: the
#: README's main job installs the package without the `cluster` extra.
WITHOUT_PSYCOPG = """\
import sys
sys.modules["psycopg"] = None
sys.modules["psycopg_pool"] = None
from conformance.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_qlk_conform_on_the_edge_runner_runs_every_mode_without_psycopg(tmp_path: Path) -> None:
    """Every mode of the edge run (replay, guard, kill, lock probe) works without psycopg: the
    cluster halves of the modes are imported only for `--runner cluster`."""
    traces = tmp_path / "traces"
    traces.mkdir()
    name = "LEASE-02-each-mismatched-fence-field-rejected.jsonl"
    (traces / name).write_bytes((ROOT / "conformance" / "traces" / "run" / name).read_bytes())
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_PSYCOPG, "conform", "-q", "--traces", str(traces)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert any(line.startswith("lock probe: ") for line in lines), run.stdout
    assert any(line.startswith("kill mode: ") for line in lines), run.stdout
    assert lines[-1] == "verdict: PASS"


@pytest.mark.parametrize(
    "argv",
    [
        ["worker", "--dsn", "postgresql://x@127.0.0.1/test", "--journal", "w", "--executor-type",
         "local.posix", "--retention", "1m"],
        ["serve", "--profile", "cluster", "--dsn", "postgresql://x@127.0.0.1/test"],
        ["status", "--dsn", "postgresql://x@127.0.0.1/test"],
    ],
    ids=["worker", "serve-cluster", "status-dsn"],
)  # fmt: skip
def test_a_cluster_command_without_the_cluster_extra_is_exit_3_naming_what_to_install(
    tmp_path: Path, argv: list[str]
) -> None:
    """E-7: a missing optional dependency is exit 3 with one line, never a traceback or an
    'unexpected error'."""
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_PSYCOPG, *argv],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert run.returncode == 3, run.stdout + run.stderr
    assert run.stderr.count("\n") == 1, run.stderr
    assert "psycopg" in run.stderr
    assert "pip install 'ql3-kernel[cluster]'" in run.stderr
    assert "unexpected" not in run.stderr
