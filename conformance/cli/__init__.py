"""`qlk`: the command line of ql3-kernel (the conformance suite, and the local application's
commands as they are added).

    qlk conform                          # the bundled corpus against the edge runner (SQLite)
    qlk conform --runner cluster --dsn postgresql://postgres@127.0.0.1:5432/test
    qlk traces show conformance/traces/run/RETRY-07-retry-wait-not-before-due.jsonl
    qlk --version

One module per subcommand group (`conform.py`, `traces.py`), each with `register(commands)`;
`COMMANDS` lists them in the order `qlk --help` shows them. `main` is the one place that turns
what a subcommand returned or raised into the exit status of SPEC E-7 (`EXIT_CODES`), printing
a failure as one line `qlk: <message>` on stderr, never a traceback unless `--debug` is given.
Shared pieces (errors, `add_command`, `resolve_db`, `make_console`) are in `common.py`.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from importlib import metadata
from types import ModuleType
from typing import TextIO

from conformance.cli import cancel, conform, logs, serve, status, submit, tasks, traces
from conformance.cli.common import (
    CheckFailed,
    Context,
    ExitCode,
    InfrastructureError,
    Parser,
    QlkError,
    UsageError,
    global_options,
    make_console,
    one_line,
)
from conformance.run.factories import FactoryError

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

#: The subcommand modules, each with `register(commands: common.Commands) -> None`.
COMMANDS: tuple[ModuleType, ...] = (
    conform,
    traces,
    tasks,
    submit,
    serve,
    status,
    logs,
    cancel,
)

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
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="qlk",
        description="ql3-kernel: replay conformance traces against a runner, inspect traces.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[global_options()],
    )
    parser.add_argument("--version", action="version", version=f"qlk {version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for module in COMMANDS:
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run `qlk` with `argv` (default: the process's arguments), writing the report to `out`
    (default: stdout); returns the exit status (`ExitCode`) and never raises: a failure is one
    line on stderr (with `--debug`, after its traceback)."""
    stream = out if out is not None else sys.stdout
    err = sys.stderr
    parser = build_parser()
    debug = False
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exited:  # --help, --version
            return _status(exited.code)
        debug = bool(getattr(args, "debug", False))  # --debug before or after the command
        handler = getattr(args, "handler", None)
        if handler is None:
            parser.print_help(err)
            return ExitCode.USAGE
        ctx = Context(
            out=stream,
            err=err,
            console=make_console(stream),
            err_console=make_console(err),
            debug=debug,
        )
        return int(handler(args, ctx))
    except KeyboardInterrupt:
        _report("interrupted", err, debug=debug)
        return ExitCode.INTERRUPTED
    except QlkError as exc:
        if exc.message:
            _report(exc.message, err, debug=debug)
        return exc.exit_code
    except FactoryError as exc:  # a runner name found bad below the subcommand's own checks
        _report(str(exc), err, debug=debug)
        return ExitCode.USAGE
    except BrokenPipeError:  # `qlk traces show F | head`: the reader left; not an error
        _silence(stream)
        return ExitCode.OK
    except Exception as exc:
        where = f" ({exc.filename})" if isinstance(exc, OSError) and exc.filename else ""
        hint = "" if debug else " (run with --debug for the traceback)"
        _report(f"unexpected error{where}: {one_line(exc)}{hint}", err, debug=debug)
        return ExitCode.INFRASTRUCTURE


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
