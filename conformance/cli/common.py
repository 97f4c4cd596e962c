"""What every `qlk` subcommand shares: the exit-code contract (SPEC E-7), the errors a
subcommand raises, the parser class, registering a subcommand, the database setting and the
console that tables and progress are printed on.

A subcommand module has one function, `register(commands)`, which adds its parser(s) with
`add_command` and gives each a handler `(args, ctx) -> int`. A handler returns `ExitCode.OK`
or `ExitCode.CHECK_FAILED` (after printing its report), and raises `UsageError`,
`InfrastructureError` or `CheckFailed` with a one-line message naming the file or flag;
`conformance.cli.main` prints that line (`qlk: <message>`) and exits with the code. Never print
a traceback or call `sys.exit` from a handler.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, NoReturn, TextIO, TypeAlias

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "DB_DEFAULT",
    "DB_VARIABLE",
    "DSN_VARIABLE",
    "SCHEMA_DEFAULT",
    "CheckFailed",
    "Commands",
    "Context",
    "ExitCode",
    "Handler",
    "InfrastructureError",
    "Parser",
    "QlkError",
    "UsageError",
    "add_command",
    "add_db_argument",
    "add_store_arguments",
    "global_options",
    "is_terminal",
    "make_console",
    "one_line",
    "resolve_db",
    "subcommands",
]


class ExitCode(IntEnum):
    """The exit status of every `qlk` command (SPEC E-7)."""

    OK = 0
    #: a check failed: a divergence, a stale write accepted, a torn state
    CHECK_FAILED = 1
    #: usage or bad input: a wrong flag or value, a missing or malformed file
    USAGE = 2
    #: runtime or infrastructure: database unreachable, optional dependency missing, a runner
    #: factory that raises, an unexpected error
    INFRASTRUCTURE = 3
    #: interrupted (Ctrl-C)
    INTERRUPTED = 130


class QlkError(Exception):
    """An error a subcommand reports as one line `qlk: <message>` and an exit code."""

    exit_code: ClassVar[ExitCode] = ExitCode.INFRASTRUCTURE

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class UsageError(QlkError):
    """Bad usage or bad input (exit 2); the message names the flag or file and what to fix."""

    exit_code = ExitCode.USAGE


class InfrastructureError(QlkError):
    """The environment failed (exit 3): a database that does not answer, a missing optional
    dependency, a runner factory that raises. The message names the flag or file."""

    exit_code = ExitCode.INFRASTRUCTURE


class CheckFailed(QlkError):
    """A check failed (exit 1). Usually a handler prints its report and returns
    `ExitCode.CHECK_FAILED` instead; raise this when there is nothing more than one line to
    say (an empty message prints nothing)."""

    exit_code = ExitCode.CHECK_FAILED


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, for an error that came from a library."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


# -- parsing -----------------------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    """An `ArgumentParser` whose usage errors are `UsageError`s: `main` prints them as one line
    and exits 2, like every other bad input (argparse's own would print the usage too)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


class Context:
    """What a handler writes to: `out` (the report, `print(..., file=ctx.out)`), `console`
    (a rich console on `out` for tables), `err` and `err_console` (progress, warnings).

    A console not given is made by `make_console` when first used, so that rich is imported
    by a command that prints with it, when it does: `qlk serve` prints one table as it exits,
    and rich imported when it starts would be held all along (about 1 MiB more peak memory;
    docs/performance.md, "Peak memory of `qlk serve`")."""

    __slots__ = ("_console", "_err_console", "debug", "err", "out")

    def __init__(
        self,
        out: TextIO,
        err: TextIO,
        console: Console | None = None,
        err_console: Console | None = None,
        debug: bool = False,
    ) -> None:
        self.out = out
        self.err = err
        self._console = console
        self._err_console = err_console
        self.debug = debug

    @property
    def console(self) -> Console:
        if self._console is None:
            self._console = make_console(self.out)
        return self._console

    @property
    def err_console(self) -> Console:
        if self._err_console is None:
            self._err_console = make_console(self.err)
        return self._err_console


#: A subcommand: parsed arguments and where to write -> an exit status (`ExitCode`).
Handler: TypeAlias = Callable[[argparse.Namespace, Context], int]
#: What `parser.add_subparsers()` returns, to `add_command` to.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

#: `--debug` on every parser, so that it may come before or after the subcommand.
_DEBUG = argparse.ArgumentParser(add_help=False)
_DEBUG.add_argument(
    "--debug",
    action="store_true",
    default=argparse.SUPPRESS,
    help="print the traceback of an error (the exit status stays the same)",
)


def global_options() -> argparse.ArgumentParser:
    """The parent parser of every `qlk` parser (the global `--debug`)."""
    return _DEBUG


def add_command(
    commands: Commands,
    name: str,
    *,
    help: str,
    handler: Handler | None = None,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """Add the subcommand `name` (or a group, without `handler`, whose actions are added with
    `add_command` on `subcommands(parser)`). Returns its parser, to add arguments to."""
    parser = commands.add_parser(
        name,
        help=help,
        description=description or help,
        parents=[_DEBUG],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if handler is not None:
        parser.set_defaults(handler=handler)
    else:
        parser.set_defaults(handler=_group_help(parser))
    return parser


def subcommands(parser: argparse.ArgumentParser, *, dest: str) -> Commands:
    """The actions of a command group (`qlk traces show|generate`)."""
    return parser.add_subparsers(dest=dest, metavar="ACTION", parser_class=Parser)


def _group_help(parser: argparse.ArgumentParser) -> Handler:
    """A group given without an action: its help on stderr, exit 2."""

    def handler(args: argparse.Namespace, ctx: Context) -> int:
        del args
        parser.print_help(ctx.err)
        return ExitCode.USAGE

    return handler


# -- the database --------------------------------------------------------------------------
#: The environment variable naming the local application's database file.
DB_VARIABLE = "QL3_DB"
#: The database file when neither `--db` nor `$QL3_DB` is given (relative to the directory
#: `qlk` runs in).
DB_DEFAULT = "ql3.db"


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    """`--db FILE` on a subcommand; resolve it with `resolve_db(args.db)`."""
    parser.add_argument(
        "--db",
        metavar="FILE",
        default=None,
        help=f"the database file (default: ${DB_VARIABLE}, else ./{DB_DEFAULT})",
    )


#: The environment variable naming the cluster profile's database (`qlk serve --profile cluster`
#: without `--dsn`).
DSN_VARIABLE = "QL3_DSN"
#: The PostgreSQL schema of the cluster profile when `--schema` is not given (the same name as
#: `runners.cluster.app.DEFAULT_SCHEMA`; a test keeps them equal).
SCHEMA_DEFAULT = "ql3"


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """`--db FILE` (the local application's file) or `--dsn DSN [--schema NAME]` (the cluster
    profile's PostgreSQL schema), never both (exit 2). `args.dsn` None means the local file."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--db",
        metavar="FILE",
        default=None,
        help=f"the database file (default: ${DB_VARIABLE}, else ./{DB_DEFAULT})",
    )
    where.add_argument(
        "--dsn",
        metavar="DSN",
        default=None,
        help="the cluster profile's PostgreSQL database (a libpq connection string or URI)",
    )
    parser.add_argument(
        "--schema",
        metavar="NAME",
        default=None,
        help=f"with --dsn: the schema (default {SCHEMA_DEFAULT})",
    )


def resolve_db(arg: str | None, environ: Mapping[str, str] = os.environ) -> Path:
    """The database file: `--db FILE`, else `$QL3_DB`, else `./ql3.db`, as an absolute path.

    The file need not exist (the application creates it) but its directory must, and the file
    (or, when absent, the directory) must be writable; otherwise `UsageError` naming the flag or
    variable and the path."""
    if arg:
        source, value = f"--db {arg}", arg
    elif environ.get(DB_VARIABLE):
        value = environ[DB_VARIABLE]
        source = f"${DB_VARIABLE}={value}"
    else:
        source, value = f"default database ./{DB_DEFAULT}", DB_DEFAULT
    path = Path(value).expanduser().absolute()
    directory = path.parent
    if path.is_dir():
        raise UsageError(f"{source}: {path} is a directory, not a database file")
    if not directory.is_dir():
        what = "is not a directory" if directory.exists() else "does not exist"
        raise UsageError(f"{source}: the directory {directory} {what}")
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            raise UsageError(f"{source}: {path} is not writable")
    elif not os.access(directory, os.W_OK | os.X_OK):
        raise UsageError(f"{source}: the directory {directory} is not writable")
    return path


# -- output ----------------------------------------------------------------------------------
def is_terminal(stream: TextIO) -> bool:
    """Whether `stream` is an interactive terminal (not a pipe, a file, a test's buffer or a
    dumb terminal)."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False
    return tty and os.environ.get("TERM") != "dumb"


def make_console(stream: TextIO) -> Console:
    """A rich console on `stream`. On a terminal: colours and the terminal's width. Otherwise
    (a pipe, a file, a test): no colour, no control codes, width 100, so output is the same
    bytes every time. Markup, emoji and highlighting are off everywhere: user data such as a
    `[io_error]` or a task name is printed as given (style with `rich.text.Text`)."""
    from rich.console import Console  # noqa: PLC0415 (when first printed with: see Context)

    if is_terminal(stream):
        return Console(file=stream, markup=False, emoji=False, highlight=False)
    return Console(
        file=stream,
        force_terminal=False,
        force_interactive=False,
        no_color=True,
        color_system=None,
        width=100,
        markup=False,
        emoji=False,
        highlight=False,
        soft_wrap=False,
        legacy_windows=False,
    )
