"""What the local application's commands share (`qlk task`, `submit`, `status`, `logs`,
`cancel`): opening the database, the clock at the CLI edge, `--env` and `--cwd`, and turning a
kernel refusal (`TaskRefused`, a `Rejected` code) into the one line of a `UsageError`, and the
style of their tables.

The kernel takes time as an input; this is the one place the commands read the wall clock
(`now_ms`). A refusal names the flag or argument it is about, never an argv or environment value
(they may hold secrets; S-1 spirit), and ends with the kernel's stable code in brackets.
"""

from __future__ import annotations

import getpass
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final

from conformance.cli.common import InfrastructureError, UsageError, one_line, resolve_db
from kernel.approved_action import person_refusal
from kernel.specs import Code
from runners.edge.connection import EdgeConfigError
from runners.edge.migrate import MigrationError
from runners.edge.store import EdgeStore

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = [
    "CODE_TEXT",
    "absolute_cwd",
    "now_ms",
    "open_store",
    "parse_env",
    "person",
    "refusal",
    "table",
]

#: SQLite errors that mean the file is not (or no longer) a database: bad input (exit 2).
_MALFORMED: Final = frozenset({"SQLITE_NOTADB", "SQLITE_CORRUPT"})

#: Who asks or decides when neither `--as` nor the OS names anyone.
ANONYMOUS: Final = "user"

#: What each refusal code means to the person who typed the command.
CODE_TEXT: Final[Mapping[Code, str]] = {
    Code.TASK_NAME_INVALID: "not a task name: 1-64 letters, digits, '.', '_' or '-', starting "
    "with a letter or digit",
    Code.TASK_ARGV_INVALID: "give the command after --: a non-empty program, at most 1024 "
    "arguments of at most 32 KiB, no NUL",
    Code.TASK_CWD_INVALID: "not a usable directory: at most 4096 characters, no NUL",
    Code.TASK_ENV_INVALID: "each --env is NAME=VALUE with a POSIX name (letters, digits and _, "
    "not starting with a digit), at most 256 of them",
    Code.TASK_CRON_INVALID: "not a cron expression that fires: exactly 5 fields (minute hour "
    "day-of-month month day-of-week, UTC), no @macros",
    Code.TASK_DEADLINE_INVALID: "a deadline is 1s to 7d",
    Code.INVALID_RUN_RETRY_POLICY: "outside the retry limits: --max-attempts 1 to 16, --backoff "
    "BASE:MAX with 0 <= BASE <= MAX <= 24h",
    Code.RUN_RETRY_POLICY_UNSAFE: "retrying a lost Attempt (--max-attempts above 1) needs "
    "--safety idempotent or deduplicated: the command may already have run",
    Code.TASK_NOT_FOUND: "no such task",
    Code.TASK_REMOVED: "the task was removed (qlk task add defines it again)",
    Code.RUN_NOT_FOUND: "no such run",
    # The approval domain (issue 19; `qlk task add --requires-approval`, `qlk approve|deny`).
    Code.TASK_APPROVAL_UNSUPPORTED: "approval is for submissions: a task that requires approval "
    "has no --cron (a scheduled fire has no one to ask)",
    Code.PROFILE_NOT_SUPPORTED: "the cluster profile (--dsn) runs no Approved Actions; define "
    "the task in a local --db file",
    Code.ACTION_NOT_FOUND: "no such approval request (qlk approvals lists them)",
    Code.ACTION_NOT_PENDING: "the request is already decided",
    Code.ACTION_ID_CONFLICT: "another approval request holds this id",
    Code.CLOCK_REGRESSION: "this machine's clock is behind the last change; try again later",
}


def table(console: Console) -> Table:
    """A table for `console`: rounded on a terminal, plain ASCII otherwise (CLI-7: logs and
    pipes get the same bytes every time)."""
    # Imported here: `qlk serve` imports this module (through `tasks`) and prints its one table
    # as it exits; rich imported at its start would be held all along (see `common.Context`).
    from rich import box  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    return Table(box=box.ROUNDED if console.is_terminal else box.ASCII2)


def now_ms() -> int:
    """The wall clock in epoch milliseconds, read once per command at the CLI edge."""
    return time.time_ns() // 1_000_000


def refusal(subject: str, code: Code | str) -> UsageError:
    """The `UsageError` of a refusal: `<subject>: <what it means> [<code>]`; `subject` names
    the flag or argument (`--cron '61 * * * *'`, `NAME hello`, `CMD`)."""
    try:
        text = CODE_TEXT.get(Code(code), "refused")
    except ValueError:
        text = "refused"
    return UsageError(f"{subject}: {text} [{code}]")


@contextmanager
def open_store(db: str | None) -> Iterator[EdgeStore]:
    """The local database (`--db`, `$QL3_DB`, `./ql3.db`; created and migrated on first use),
    closed afterwards. A file that is not a SQLite database, or whose schema this version does
    not know, is bad input (exit 2); any other SQLite failure, then or while the command runs
    (locked past the busy timeout, an I/O error), is exit 3. Both name the file."""
    path = resolve_db(db)
    try:
        store = EdgeStore(path)
    except sqlite3.Error as exc:
        raise _database_error(path, exc) from exc
    except MigrationError as exc:
        raise UsageError(f"{path}: not a database of this qlk version: {exc}") from exc
    except EdgeConfigError as exc:
        raise InfrastructureError(f"{path}: {exc}") from exc
    try:
        yield store
    except sqlite3.Error as exc:
        raise _database_error(path, exc) from exc
    finally:
        store.close()


def _database_error(path: Path, exc: sqlite3.Error) -> UsageError | InfrastructureError:
    if getattr(exc, "sqlite_errorname", None) in _MALFORMED:
        return UsageError(f"{path}: not a SQLite database, or a damaged one ({exc})")
    return InfrastructureError(f"{path}: the database failed: {one_line(exc)}")


def parse_env(items: Sequence[str] | None) -> dict[str, str]:
    """`--env NAME=VALUE ...` as a dict. A missing `=` or a name given twice is exit 2; the
    message names the item by position, never its value (it may be a secret). The kernel
    checks the names themselves (`TASK_ENV_INVALID`)."""
    env: dict[str, str] = {}
    for index, item in enumerate(items or (), start=1):
        name, equals, value = item.partition("=")
        if not equals:
            raise UsageError(f"--env: expected NAME=VALUE, the {_ordinal(index)} has no '='")
        if name in env:
            raise UsageError(f"--env: {name} is given twice")
        env[name] = value
    return env


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def absolute_cwd(cwd: str | None) -> str | None:
    """`--cwd DIR` as an absolute, normalised path (decision TK-2: the kernel stores absolute
    directories only; a relative one is resolved against the directory `qlk` runs in). A path
    that is not an existing directory is exit 2 (decision CLI-17)."""
    if cwd is None:
        return None
    if not cwd or "\0" in cwd:
        raise UsageError("--cwd: give a directory")
    path = os.path.abspath(os.path.expanduser(cwd))
    if not os.path.isdir(path):
        what = "is not a directory" if os.path.exists(path) else "does not exist"
        raise UsageError(f"--cwd {cwd}: {path} {what}")
    return path


def person(flag_value: str | None) -> str:
    """Who asks for or decides an approval (`--as NAME` of `qlk submit`, `approve`, `deny`;
    issue 19): the flag's value, checked by the kernel's rule (`person_refusal`: 1..64
    printable characters; else exit 2 naming `--as`), or, without it, the OS user name
    (`getpass.getuser()`), else `user`.

    [decision CLI-20] The default is the OS login name, not a fixed `user`: the Events of a
    request then say which account asked and which decided, which is what an approval is for;
    `--as` names someone else (a shared account, a script acting for a person)."""
    if flag_value is not None:
        why = person_refusal(flag_value)
        if why is not None:
            raise UsageError(f"--as {flag_value!r}: a name {why}")
        return flag_value
    try:
        name = getpass.getuser()
    except (OSError, KeyError):  # no $USER/$LOGNAME and no passwd entry (a bare container)
        return ANONYMOUS
    return name if person_refusal(name) is None else ANONYMOUS
