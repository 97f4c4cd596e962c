"""`qlk`: the command line of ql3-kernel (the conformance suite, and the local application's
commands as they are added).

    qlk conform                          # the bundled corpus against the edge runner (SQLite)
    qlk conform --runner cluster --dsn postgresql://postgres@127.0.0.1:5432/test
    qlk traces show conformance/traces/run/RETRY-07-retry-wait-not-before-due.jsonl
    qlk --version

One module per subcommand group (`conform.py`, `traces.py`), each with `register(commands)`;
`COMMANDS` maps each command name to its module, in the order `qlk --help` shows them. A
command's module is imported only when that command runs: `qlk serve ...` imports `serve.py` and
what it imports, nothing of the conformance suite (`qlk conform`'s replay, `multiprocessing`,
`xml`: about 5 MiB of memory that a long-running `qlk serve` would hold for nothing;
docs/performance.md, "Peak memory of `qlk serve`"). `qlk --help`, a bad command name and
anything else not certain before parsing import them all. Each module's `register` stays the
one place its name, help and arguments are written.

`main` is the one place that turns what a subcommand returned or raised into the exit status of
SPEC E-7 (`EXIT_CODES`), printing a failure as one line `qlk: <message>` on stderr, never a
traceback unless `--debug` is given. Shared pieces (errors, `add_command`, `resolve_db`,
`make_console`) are in `common.py`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from typing import TextIO

from conformance.cli.common import (
    CheckFailed,
    Context,
    ExitCode,
    InfrastructureError,
    Parser,
    QlkError,
    UsageError,
    global_options,
    one_line,
)

__all__ = [
    "COMMANDS",
    "CheckFailed",
    "ExitCode",
    "InfrastructureError",
    "QlkError",
    "UsageError",
    "build_parser",
    "main",
    "version",
]

#: Command name -> the module that registers it (`register(commands: common.Commands) -> None`
#: adds a command of that name), in the order `qlk --help` lists them.
COMMANDS: Mapping[str, str] = {
    "conform": "conformance.cli.conform",
    "traces": "conformance.cli.traces",
    "task": "conformance.cli.tasks",
    "submit": "conformance.cli.submit",
    "workflow": "conformance.cli.workflow",
    "serve": "conformance.cli.serve",
    "worker": "conformance.cli.worker",
    "status": "conformance.cli.status",
    "logs": "conformance.cli.logs",
    "cancel": "conformance.cli.cancel",
    "approvals": "conformance.cli.approvals",
    "approve": "conformance.cli.approve",
    "deny": "conformance.cli.deny",
}

DISTRIBUTION = "ql3-kernel"

EXIT_CODES = """\
exit status (every command, SPEC E-7):
  0    success
  1    a check failed (a divergence, a stale write accepted, a torn state)
  2    usage or bad input (a wrong flag or value, a missing or malformed file)
  3    runtime or infrastructure error (database unreachable, missing optional
       dependency such as psycopg, a runner factory that raises)
  130  interrupted
An error is one line on stderr, `qlk: <message>`, naming the file or flag;
--debug adds the traceback."""


def version() -> str:
    """The installed package's version (`unknown` when run from a tree that is not installed)."""
    # Imported here, for `--version` only: importlib.metadata brings email, csv and more
    # (1.3 MiB of memory that every command, `qlk serve` included, would otherwise hold).
    from importlib import metadata  # noqa: PLC0415

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


class _Version(argparse.Action):
    """`--version`, reading the version only when the flag is given (see `version`)."""

    def __init__(self, option_strings: Sequence[str], dest: str) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="show program's version number and exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        del namespace, values, option_string
        print(f"qlk {version()}", file=sys.stdout)
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `qlk` parser with every command of `COMMANDS`, or, given one of their names, with
    that one only, importing only its module (the other commands are then unknown to it)."""
    parser = Parser(
        prog="qlk",
        description="ql3-kernel: replay conformance traces against a runner, inspect traces.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[global_options()],
    )
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name in COMMANDS if command is None else (command,):
        importlib.import_module(COMMANDS[name]).register(commands)
    return parser


def command_named(argv: Sequence[str]) -> str | None:
    """The command `argv` runs when that is certain before parsing: its first argument other
    than `--debug` is a name in `COMMANDS`. Otherwise (`--help`, `--version`, an abbreviated
    option, a bad name, nothing) None: the parser then needs every command, as `--help` lists
    them all and a bad name is answered with the valid ones."""
    for arg in argv:
        if arg != "--debug":
            return arg if arg in COMMANDS else None
    return None


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run `qlk` with `argv` (default: the process's arguments), writing the report to `out`
    (default: stdout); returns the exit status (`ExitCode`) and never raises: a failure is one
    line on stderr (with `--debug`, after its traceback)."""
    stream = out if out is not None else sys.stdout
    err = sys.stderr
    arguments = sys.argv[1:] if argv is None else list(argv)
    debug = False
    try:
        parser = build_parser(command_named(arguments))
        try:
            args = parser.parse_args(arguments)
        except SystemExit as exited:  # --help, --version
            return _status(exited.code)
        debug = bool(getattr(args, "debug", False))  # --debug before or after the command
        handler = getattr(args, "handler", None)
        if handler is None:
            parser.print_help(err)
            return ExitCode.USAGE
        ctx = Context(out=stream, err=err, debug=debug)  # its consoles made when first used
        return int(handler(args, ctx))
    except KeyboardInterrupt:
        _report("interrupted", err, debug=debug)
        return ExitCode.INTERRUPTED
    except QlkError as exc:
        if exc.message:
            _report(exc.message, err, debug=debug)
        return exc.exit_code
    except BrokenPipeError:  # `qlk traces show F | head`: the reader left; not an error
        _silence(stream)
        return ExitCode.OK
    except Exception as exc:
        missing = _missing_cluster_module(exc)
        if missing is not None:  # E-7: a missing optional dependency, with what to install
            command = command_named(arguments) or "this command"
            _report(
                f"{command}: the cluster profile needs {missing}, which is not installed: "
                "pip install 'ql3-kernel[cluster]'",
                err,
                debug=debug,
            )
            return ExitCode.INFRASTRUCTURE
        if _is_factory_error(exc):  # a runner name found bad below the subcommand's own checks
            _report(str(exc), err, debug=debug)
            return ExitCode.USAGE
        where = f" ({exc.filename})" if isinstance(exc, OSError) and exc.filename else ""
        hint = "" if debug else " (run with --debug for the traceback)"
        _report(f"unexpected error{where}: {one_line(exc)}{hint}", err, debug=debug)
        return ExitCode.INFRASTRUCTURE


#: The cluster extra's modules (pyproject.toml) -> the name a user installs.
_CLUSTER_MODULES: Mapping[str, str] = {
    "psycopg": "psycopg",
    "psycopg_pool": "psycopg-pool",
    "nacl": "PyNaCl",
}


def _missing_cluster_module(exc: Exception) -> str | None:
    """The package of the cluster extra whose import failed, or None."""
    if not isinstance(exc, ModuleNotFoundError):
        return None
    return _CLUSTER_MODULES.get((exc.name or "").partition(".")[0])


def _is_factory_error(exc: Exception) -> bool:
    """Whether `exc` is a `conformance.run.factories.FactoryError`. Looked up, not imported:
    importing it loads the conformance suite, and only a command that imported it (`conform`)
    can raise one."""
    factories = sys.modules.get("conformance.run.factories")
    return factories is not None and isinstance(exc, factories.FactoryError)


def _status(code: object) -> int:
    if code is None:
        return ExitCode.OK
    if isinstance(code, int):
        return code
    return ExitCode.USAGE


def _report(message: str, err: TextIO, *, debug: bool) -> None:
    if debug:
        traceback.print_exc(file=err)
    print(f"qlk: {message}", file=err)


def _silence(stream: TextIO) -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush does
    not fail again."""
    if stream is sys.stdout:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        finally:
            os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
