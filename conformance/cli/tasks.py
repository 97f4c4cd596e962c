"""`qlk task add|list|remove`: the tasks of the local application (issue 15 item 4), or of the
cluster profile with `--dsn DSN [--schema NAME]` (issue 17 item 1; the same commands and output
on `runners.cluster.tasks.ClusterTaskStore`, at the database's time).

    qlk task add hello -- echo hello
    qlk task add backup --cron '*/5 * * * *' --deadline 10m -- /usr/bin/backup --all
    qlk task add sync --max-attempts 3 --safety idempotent --backoff 10s:5m -- ./sync.sh
    qlk task add deploy --requires-approval -- ./deploy.sh
    qlk task list [--json]
    qlk task remove hello

A task is validated by the kernel (`kernel.task.define_task`) and written by the task store
(`runners.edge.tasks.EdgeTaskStore`), which also asks croniter whether a cron expression fires.
Everything after the first `--` is the command, verbatim (executed directly, never through a
shell). `--max-attempts N` is the admission-time retry policy of the task's Runs: up to N
Attempts when an Attempt is lost (A-3, A-4: above 1 it needs `--safety idempotent` or
`deduplicated`); `--backoff BASE:MAX` delays each retry (default `0:0`, decision CLI-15).
`--requires-approval` makes each `qlk submit --task NAME` an approval request that a person
approves (`qlk approve`) or denies before its Run exists (SPEC §5, issue 19; `qlk approvals`).
It goes with neither `--cron` (a scheduled fire has no one to ask, decision AA-D4,
`TASK_APPROVAL_UNSUPPORTED`) nor `--dsn` (the cluster profile has no Approved Action lifecycle,
§5.4, `PROFILE_NOT_SUPPORTED`; refused before the database is opened).

Output: `added hello revision 1`, `hello unchanged (revision 1)`, `hello revision 2`,
`removed hello`. Exit status (SPEC E-7): 0 done (an identical re-add included); 2 a refused
definition, an unknown or removed task, a bad flag, each as one line naming the flag or argument
(`--cron`, `NAME`, `CMD`, ...); 3 the database failed.
"""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from conformance.cli.common import (
    Commands,
    Context,
    ExitCode,
    Parser,
    UsageError,
    add_command,
    add_store_arguments,
)
from conformance.cli.durations import (
    DurationError,
    format_duration,
    format_time,
    iso_time,
    parse_duration,
)
from conformance.cli.localdb import (
    absolute_cwd,
    now_ms,
    open_store,
    parse_env,
    refusal,
    table,
)
from kernel import PolicyDefinition, Safety
from kernel.specs import Code, Profile
from kernel.task import (
    TaskDefinition,
    TaskRefused,
    define_task,
    policy_document,
    task_profile_refusal,
)
from runners.edge.tasks import EdgeTaskStore, TaskRecord
from runners.engine import Storage

if TYPE_CHECKING:
    from runners.cluster.tasks import ClusterTaskStore

#: Either runner's task store (the same public behaviour).
AnyTaskStore: TypeAlias = "EdgeTaskStore | ClusterTaskStore"

__all__ = ["CommandParser", "open_task_store", "register"]

#: How many characters of a command `task list` shows.
COMMAND_WIDTH = 40
#: Tasks per page read by `task list` (the task store's page limit, P-1).
_PAGE = 64


class CommandParser(Parser):
    """A `Parser` that, when `command_dest` is set, takes everything after the first `--` as
    the command, verbatim, and parses the rest as usual. argparse alone loses a command given
    after options that follow a positional (`add hello --cron X -- CMD`: it has already given
    the command its empty list at `hello`)."""

    command_dest: str | None = None

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self.command_dest is None or args is None:
            return super().parse_known_args(args, namespace)
        words = list(args)
        command: list[str] = []
        if "--" in words:
            cut = words.index("--")
            words, command = words[:cut], words[cut + 1 :]
        parsed, extras = super().parse_known_args(words, namespace)
        setattr(parsed, self.command_dest, command)
        return parsed, extras


def register(commands: Commands) -> None:
    task = add_command(commands, "task", help="define, list and remove tasks")
    # `subcommands()` with the parser class that keeps the command after `--` verbatim.
    actions = cast(
        "Commands",
        task.add_subparsers(dest="task_command", metavar="ACTION", parser_class=CommandParser),
    )
    add = add_command(
        actions,
        "add",
        help="define a task, or its next revision (qlk task add NAME [options] -- CMD ARGS...)",
        handler=add_task,
    )
    assert isinstance(add, CommandParser)
    add.command_dest = "command"
    add.usage = "qlk task add NAME [options] -- CMD [ARGS...]"
    add_store_arguments(add)
    add.add_argument("name", metavar="NAME", help="the task's name (letters, digits, . _ -)")
    add.add_argument(
        "--cron",
        metavar="EXPR",
        default=None,
        help="run it on this 5-field schedule, in UTC (minute hour day-of-month month "
        "day-of-week), e.g. '*/5 * * * *'",
    )
    add.add_argument(
        "--max-attempts",
        type=int,
        metavar="N",
        default=None,
        help="up to N Attempts when one is lost (1..16; above 1 needs --safety)",
    )
    add.add_argument(
        "--safety",
        choices=[s.value for s in Safety],
        default=None,
        help="whether running the command again is safe: idempotent or deduplicated "
        "(unknown refuses retries)",
    )
    add.add_argument(
        "--backoff",
        metavar="BASE:MAX",
        default=None,
        help="delay before a retry, doubling from BASE up to MAX (e.g. 10s:5m; default 0:0)",
    )
    add.add_argument(
        "--deadline",
        metavar="DUR",
        default=None,
        help="stop a Run that runs longer than this (1s..7d, e.g. 30s, 5m, 2h, 1d)",
    )
    add.add_argument(
        "--requires-approval",
        action="store_true",
        help="each submission waits for a person's qlk approve (or deny) before its Run exists; "
        "not with --cron, not with --dsn",
    )
    add.add_argument(
        "--cwd",
        metavar="DIR",
        default=None,
        help="the working directory (a relative one is made absolute now)",
    )
    add.add_argument(
        "--env",
        metavar="NAME=VALUE",
        action="append",
        default=None,
        help="an environment variable for the command (repeatable)",
    )
    listing = add_command(actions, "list", help="the tasks, active and removed", handler=list_tasks)
    add_store_arguments(listing)
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    remove = add_command(
        actions,
        "remove",
        help="stop a task firing and refuse its submissions (its Runs and history stay)",
        handler=remove_task,
    )
    add_store_arguments(remove)
    remove.add_argument("name", metavar="NAME")


@contextmanager
def open_task_store(args: argparse.Namespace) -> Iterator[tuple[Storage, AnyTaskStore, int]]:
    """The storage, its task store and the command's one time: the local file (`--db`, wall
    clock at the CLI edge) or, with `--dsn`, the cluster schema (database time, ADR-0232 §1).
    The cluster side is imported only then: a local command never loads psycopg."""
    if getattr(args, "dsn", None) is None and getattr(args, "schema", None) is None:
        with open_store(args.db) as store:
            yield store, EdgeTaskStore(store), now_ms()
        return
    from conformance.cli.cluster import cluster_now, cluster_target, open_cluster  # noqa: PLC0415
    from runners.cluster.tasks import ClusterTaskStore  # noqa: PLC0415

    target = cluster_target(args)
    assert target is not None  # --schema alone was refused
    with open_cluster(target) as cluster:
        yield cluster, ClusterTaskStore(cluster), cluster_now(cluster)


# -- add ---------------------------------------------------------------------------------------


def duration_flag(flag: str, text: str | None) -> int | None:
    """A duration flag's value in milliseconds (None when not given); exit 2 naming the flag."""
    if text is None:
        return None
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise UsageError(f"{flag} {text}: {exc}") from None


def _backoff(text: str | None) -> tuple[int, int]:
    if text is None:
        return 0, 0
    base, colon, top = text.partition(":")
    if not colon:
        raise UsageError(f"--backoff {text}: give BASE:MAX, such as 10s:5m")
    try:
        return parse_duration(base), parse_duration(top)
    except DurationError as exc:
        raise UsageError(f"--backoff {text}: {exc}") from None


def _policy(args: argparse.Namespace) -> PolicyDefinition | None:
    """The retry policy the flags describe (None: no policy, one Attempt). A lost Attempt is
    the only thing the kernel retries, so `retry_on_lost` is set; A-3 and A-4 are the kernel's
    to check (`define_task`)."""
    if args.max_attempts is None:
        if args.safety is not None or args.backoff is not None:
            raise UsageError("--safety and --backoff describe retries: give --max-attempts N too")
        return None
    base, top = _backoff(args.backoff)
    return PolicyDefinition(
        max_attempts=args.max_attempts,
        retry_on_lost=True,
        safety=Safety(args.safety or Safety.UNKNOWN),
        backoff_base_ms=base,
        backoff_max_ms=top,
    )


def definition_refusal(refused: TaskRefused, args: argparse.Namespace) -> UsageError:
    """A kernel refusal of a definition as one line naming the flag or argument."""
    field = refused.field
    if field in ("name", "origin"):
        subject = f"NAME {getattr(args, 'name', '')!r}"
    elif field == "argv":
        subject = "CMD"
    elif field == "cron":
        subject = f"--cron {args.cron!r}"
    elif field == "deadline_ms":
        subject = f"--deadline {args.deadline}"
    elif field == "retry_policy":
        subject = _policy_subject(refused.code, args)
    elif field == "requires_approval":
        subject = "--requires-approval"
    else:
        subject = f"--{field}"
    return refusal(subject, refused.code)


def _policy_subject(code: Code, args: argparse.Namespace) -> str:
    if code is Code.RUN_RETRY_POLICY_UNSAFE:
        return f"--safety {args.safety or Safety.UNKNOWN.value}"
    backoff = "" if args.backoff is None else f" --backoff {args.backoff}"
    return f"--max-attempts {args.max_attempts}{backoff}"


def add_task(args: argparse.Namespace, ctx: Context) -> int:
    command: list[str] = args.command
    if not command:
        raise UsageError("CMD: give the command after --, e.g. qlk task add hello -- echo hello")
    definition = define_task(
        args.name,
        command,
        cwd=absolute_cwd(args.cwd),
        env=parse_env(args.env),
        cron=args.cron,
        deadline_ms=duration_flag("--deadline", args.deadline),
        retry_policy=_policy(args),
        requires_approval=args.requires_approval,
    )
    if isinstance(definition, TaskRefused):
        raise definition_refusal(definition, args)
    if getattr(args, "dsn", None) is not None or getattr(args, "schema", None) is not None:
        # The kernel's answer for the cluster profile, before any connection is made: a
        # refusal should not wait for (or need) a database that could only refuse it too.
        refused = task_profile_refusal(definition, Profile.CLUSTER)
        if refused is not None:
            raise definition_refusal(refused, args)
    with open_task_store(args) as (_storage, tasks, now):
        written = tasks.add(definition, now)
        if isinstance(written, TaskRefused):
            raise definition_refusal(written, args)
        schedule = tasks.schedule(definition.name) if definition.cron is not None else None
    name, revision = definition.name, written.revision.revision
    if not written.written:
        line = f"{name} unchanged (revision {revision})"
    elif written.created:
        line = f"added {name} revision {revision}"
    elif written.reactivated:
        line = f"{name} revision {revision} (added again after its removal)"
    else:
        line = f"{name} revision {revision}"
    print(line, file=ctx.out)
    if schedule is not None and schedule.next_due_ms is not None:
        print(f"{name} next runs at {format_time(schedule.next_due_ms)}", file=ctx.out)
    return ExitCode.OK


# -- list --------------------------------------------------------------------------------------


def _records(tasks: AnyTaskStore) -> Iterator[TaskRecord]:
    after: str | None = None
    while True:
        page = tasks.list(after=after, limit=_PAGE, include_removed=True)
        yield from page.items
        if page.next_after is None:
            return
        after = page.next_after


def _shorten(argv: Sequence[str], width: int = COMMAND_WIDTH) -> str:
    text = shlex.join(argv)
    return text if len(text) <= width else text[: width - 3] + "..."


def _retry(definition: TaskDefinition) -> str:
    policy = definition.retry_policy
    if policy is None or policy.max_attempts <= 1:
        return "-"
    backoff = ""
    if policy.backoff_max_ms:
        base, top = format_duration(policy.backoff_base_ms), format_duration(policy.backoff_max_ms)
        backoff = f" {base}:{top}"
    return f"{policy.max_attempts}x {policy.safety.value}{backoff}"


def _document(record: TaskRecord) -> dict[str, Any]:
    """A task for `--json`: always these keys. Environment values are left out (they may be
    secrets); their names are listed."""
    state = record.state
    revision = state.current
    d = revision.definition
    next_due = None if record.schedule is None or state.removed else record.schedule.next_due_ms
    return {
        "name": state.name,
        "revision": revision.revision,
        "state": "removed" if state.removed else "active",
        "cron": d.cron,
        "next_due_ms": next_due,
        "next_due": iso_time(next_due),
        "argv": list(d.argv),
        "cwd": d.cwd,
        "env_names": [name for name, _ in d.env],
        "deadline_ms": d.deadline_ms,
        "retry_policy": policy_document(d.retry_policy),
        "requires_approval": d.requires_approval,
        "revised_at_ms": revision.created_at_ms,
        "removed_at_ms": state.removed_at_ms,
    }


def list_tasks(args: argparse.Namespace, ctx: Context) -> int:
    with open_task_store(args) as (_storage, tasks, _now):
        records = list(_records(tasks))
    if args.json:
        documents = [_document(record) for record in records]
        print(json.dumps(documents, indent=2, ensure_ascii=False), file=ctx.out)
        return ExitCode.OK
    if not records:
        print("no tasks (qlk task add NAME -- CMD defines one)", file=ctx.out)
        return ExitCode.OK
    listing = table(ctx.console)
    columns = ("name", "rev", "state", "cron", "next due (UTC)", "retry", "approval", "command")
    for column in columns:
        listing.add_column(column, no_wrap=column not in ("retry", "command"), overflow="fold")
    for record in records:
        document = _document(record)
        listing.add_row(
            document["name"],
            str(document["revision"]),
            document["state"],
            document["cron"] or "-",
            format_time(document["next_due_ms"]),
            _retry(record.state.current.definition),
            "required" if document["requires_approval"] else "-",
            _shorten(document["argv"]),
        )
    ctx.console.print(listing)
    return ExitCode.OK


# -- remove ------------------------------------------------------------------------------------


def remove_task(args: argparse.Namespace, ctx: Context) -> int:
    name: str = args.name
    with open_task_store(args) as (_storage, tasks, now):
        removed = tasks.remove(name, now)
    if isinstance(removed, TaskRefused):
        if removed.code is Code.TASK_REMOVED:
            raise UsageError(f"NAME {name!r}: the task is already removed [{removed.code}]")
        raise refusal(f"NAME {name!r}", removed.code)
    print(f"removed {name}", file=ctx.out)
    return ExitCode.OK
