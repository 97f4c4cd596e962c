"""The foundation `qlk`'s subcommands plug into (`conformance/cli/common.py`): registering a
subcommand, the errors it raises and the exit codes `main` maps them to (SPEC E-7), the
database setting (`--db`, `$QL3_DB`, `./ql3.db`), the console and the replay progress."""

from __future__ import annotations

import argparse
import io
import os
import sys
import types
from pathlib import Path

import pytest
from rich.console import Console

from conformance import cli
from conformance.cli import main
from conformance.cli.common import (
    DB_VARIABLE,
    CheckFailed,
    Commands,
    Context,
    ExitCode,
    InfrastructureError,
    UsageError,
    add_command,
    add_db_argument,
    make_console,
    resolve_db,
)
from conformance.report import Outcome, ReplayProgress
from conformance.run.replay import TraceResult


# -- a subcommand as the application's will be written ----------------------------------------
def _hello(args: argparse.Namespace, ctx: Context) -> int:
    db = resolve_db(args.db)
    if args.fail == "check":
        raise CheckFailed("2 tasks out of date")
    if args.fail == "usage":
        raise UsageError("--name: must not be empty")
    if args.fail == "infra":
        raise InfrastructureError(f"{db}: database is locked")
    print(f"hello {db.name}", file=ctx.out)
    return ExitCode.OK


def _register(commands: Commands) -> None:
    hello = add_command(commands, "hello", help="say hello", handler=_hello)
    add_db_argument(hello)
    hello.add_argument("--fail", choices=("check", "usage", "infra"), default=None)


@pytest.fixture
def with_hello(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command `hello` registered as every command is: a name in `COMMANDS` naming the module
    whose `register` adds it (imported by `build_parser` when needed)."""
    module = types.ModuleType("hello_command")
    module.register = _register  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hello_command", module)
    monkeypatch.setattr(cli, "COMMANDS", {**cli.COMMANDS, "hello": "hello_command"})


@pytest.mark.usefixtures("with_hello")
@pytest.mark.parametrize(
    ("fail", "code", "line"),
    [
        ("check", 1, "qlk: 2 tasks out of date"),
        ("usage", 2, "qlk: --name: must not be empty"),
        ("infra", 3, "database is locked"),
    ],
)
def test_a_registered_subcommand_raises_and_main_maps_the_exit_code(
    fail: str, code: int, line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = io.StringIO()
    db = tmp_path / "app.db"
    assert main(["hello", "--db", str(db)], out=out) == 0
    assert out.getvalue() == "hello app.db\n"
    assert main(["hello", "--db", str(db), "--fail", fail]) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("qlk: ")
    assert line in err[0]
    assert "hello" in cli.build_parser().format_help()


@pytest.mark.usefixtures("with_hello")
def test_a_subcommand_given_a_bad_db_exits_2_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere" / "app.db"
    assert main(["hello", "--db", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"qlk: --db {missing}: the directory {missing.parent} does not exist\n"
    )


# -- the database setting ----------------------------------------------------------------------
def test_resolve_db_prefers_the_flag_then_the_variable_then_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    flag, variable = tmp_path / "flag.db", tmp_path / "variable.db"
    environ = {DB_VARIABLE: str(variable)}
    assert resolve_db(str(flag), environ) == flag
    assert resolve_db(None, environ) == variable
    assert resolve_db(None, {}) == tmp_path / "ql3.db"
    assert resolve_db("", {DB_VARIABLE: ""}) == tmp_path / "ql3.db"  # empty means unset
    assert resolve_db("relative.db", {}) == tmp_path / "relative.db"  # absolute
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_db("~/home.db", {}) == tmp_path / "home.db"


def test_resolve_db_refuses_a_path_it_cannot_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("", encoding="utf-8")
    with pytest.raises(UsageError, match=r"^--db .*: the directory .*a-file is not a directory$"):
        resolve_db(str(a_file / "x.db"), {})
    with pytest.raises(UsageError, match=rf"^\${DB_VARIABLE}=.*: .* is a directory, not a"):
        resolve_db(None, {DB_VARIABLE: str(tmp_path)})
    monkeypatch.chdir(a_file.parent)
    monkeypatch.setattr(os, "access", lambda *args, **kwargs: False)  # e.g. a read-only mount
    with pytest.raises(UsageError, match=r"^default database \./ql3\.db: the directory .* is not"):
        resolve_db(None, {})
    with pytest.raises(UsageError, match=r"^--db .*a-file: .*a-file is not writable$"):
        resolve_db(str(a_file), {})


def test_add_db_argument_defaults_to_none_so_resolve_db_decides() -> None:
    parser = argparse.ArgumentParser()
    add_db_argument(parser)
    assert parser.parse_args([]).db is None
    assert parser.parse_args(["--db", "x.db"]).db == "x.db"
    assert "$QL3_DB" in parser.format_help()


# -- output ------------------------------------------------------------------------------------
def test_make_console_off_a_terminal_is_plain_and_prints_user_data_as_given() -> None:
    stream = io.StringIO()
    console = make_console(stream)
    assert not console.is_terminal
    assert console.width == 100
    console.print("[io_error] :smile: task [bold]x[/bold]")
    assert stream.getvalue() == "[io_error] :smile: task [bold]x[/bold]\n"


def _outcome(steps: int) -> Outcome:
    return Outcome("t.jsonl", TraceResult("t", steps=steps), 0.0, None)


def test_replay_progress_off_a_terminal_prints_one_line_per_ten_percent() -> None:
    stream = io.StringIO()
    with ReplayProgress(make_console(stream)) as progress:
        for done in range(1, 21):
            progress(_outcome(3), done, 20)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10
    assert lines[0] == "   10% 2/20 traces, 6 steps, 0 diverged"
    assert lines[-1] == "  100% 20/20 traces, 60 steps, 0 diverged"


def test_replay_progress_on_a_terminal_draws_a_rich_progress_bar() -> None:
    stream = io.StringIO()
    console = Console(file=stream, force_terminal=True, width=100, color_system=None)
    with ReplayProgress(console) as progress:
        for done in range(1, 4):
            progress(_outcome(5), done, 3)
    text = stream.getvalue()
    assert "3/3 traces, 15 steps, 0 diverged" in text
    assert "%" not in text  # not the plain lines
