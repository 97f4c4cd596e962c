"""`qlk submit`: admit one Run, of a task or of a command, and print its Run id.

    RUN=$(qlk submit --task hello)
    qlk submit --cwd /srv --env MODE=full --deadline 1h -- ./nightly.sh --verbose
    qlk submit --dsn postgresql://... [--schema NAME] --task hello     # the cluster profile

Exactly one of `--task NAME` (a manual Run of the task's current revision, TK-8) and `-- CMD
ARGS...` (an ad-hoc command, run as its implicit task `adhoc:<16 hex>`, TK-5; `--cwd`, `--env`
and `--deadline` belong to this form: a task has its own). The Run is admitted through the
kernel (`runners.local.schedule.submit` / `submit_command`) with fresh portable ids
(`run-<32 hex>`, `att-<32 hex>`, decision CLI-11) and waits `queued` until the running
application (`qlk serve`) dispatches it. With `--dsn` the Run is admitted on the cluster schema
at the database's time and waits for a cluster Worker.

Stdout is the Run id alone, one line. Exit status (SPEC E-7): 0 admitted; 2 an unknown or
removed task, a refused command or admission, a bad flag (one line naming it); 3 the database
failed.

A task that requires approval (`qlk task add --requires-approval`; SPEC §5, issue 19) is not
admitted: the kernel makes the submission an approval request (`RequestApproval`) for exactly
that admission, asked by `--as NAME` (default: the OS user name, else `user`). Stdout is then
the request's id alone (`apr-` and the Run id's 32 hex, decision AA-D3), so
`ID=$(qlk submit --task deploy)` works, and stderr says one line: what it waits for and the Run
id it will have. `qlk approve ID` / `qlk deny ID` decide; `qlk serve --approvals` admits an
approved one.
"""

from __future__ import annotations

import argparse
import uuid

from conformance.cli.common import (
    Commands,
    Context,
    ExitCode,
    InfrastructureError,
    UsageError,
    add_command,
    add_store_arguments,
)
from conformance.cli.localdb import absolute_cwd, parse_env, person, refusal
from conformance.cli.tasks import duration_flag, open_task_store
from kernel import Applied, Raced, Rejected, Replayed, is_portable_id
from kernel.approved_action import ActionApplied, approval_id
from kernel.task import TaskRefused
from runners.edge.store import EdgeStore
from runners.engine import Storage
from runners.task_schedule import submit, submit_command

__all__ = ["ATTEMPT_ID_PREFIX", "RUN_ID_PREFIX", "fresh_ids", "register"]

# [decision CLI-11] A submitted Run's ids: a prefix and 128 random bits in hex, 36 characters,
# the longest portable identity (§0.4). The prefixes differ from a scheduled fire's (`fr:`,
# `fa:`, TK-6), so a Run's id says how it was started.
RUN_ID_PREFIX = "run-"
ATTEMPT_ID_PREFIX = "att-"


def fresh_ids() -> tuple[str, str]:
    """A new Run id and first Attempt id (uuid4: 122 random bits from the OS CSPRNG)."""
    run_id = RUN_ID_PREFIX + uuid.uuid4().hex
    attempt_id = ATTEMPT_ID_PREFIX + uuid.uuid4().hex
    assert is_portable_id(run_id)
    assert is_portable_id(attempt_id)
    return run_id, attempt_id


def register(commands: Commands) -> None:
    parser = add_command(
        commands,
        "submit",
        help="admit a Run of a task (--task NAME) or of a command (-- CMD ARGS); prints its id",
        handler=run,
    )
    parser.usage = (
        "qlk submit [--db FILE | --dsn DSN [--schema NAME]] --task NAME\n"
        "       qlk submit [--db FILE | --dsn DSN [--schema NAME]] [--cwd DIR] "
        "[--env NAME=VALUE] [--deadline DUR] -- CMD [ARGS...]"
    )
    add_store_arguments(parser)
    parser.add_argument("--task", metavar="NAME", default=None, help="the task to run")
    parser.add_argument(
        "--as",
        dest="requested_by",
        metavar="NAME",
        default=None,
        help="with --task, for a task that requires approval: who asks (default: your OS user "
        "name)",
    )
    parser.add_argument(
        "--cwd", metavar="DIR", default=None, help="with -- CMD: the working directory"
    )
    parser.add_argument(
        "--env",
        metavar="NAME=VALUE",
        action="append",
        default=None,
        help="with -- CMD: an environment variable (repeatable)",
    )
    parser.add_argument(
        "--deadline", metavar="DUR", default=None, help="with -- CMD: stop it after this (1s..7d)"
    )
    parser.add_argument("command", nargs="*", metavar="CMD", help="after --: the command")


def run(args: argparse.Namespace, ctx: Context) -> int:
    task: str | None = args.task
    command: list[str] = args.command
    if (task is None) == (not command):
        raise UsageError("give exactly one of --task NAME and -- CMD ARGS...")
    if task is not None and (args.cwd or args.env or args.deadline):
        raise UsageError("--cwd, --env and --deadline go with -- CMD; a task has its own")
    if task is None and args.requested_by is not None:
        raise UsageError("--as names who asks for an approval: it goes with --task")
    run_id, attempt_id = fresh_ids()
    subject = f"--task {task}" if task is not None else "CMD"
    if task is not None:
        requested_by = person(args.requested_by)
        with open_task_store(args) as (storage, tasks, now):
            outcome = submit(
                storage,
                tasks,
                task,
                now_ms=now,
                run_id=run_id,
                attempt_id=attempt_id,
                requested_by=requested_by,
            )
            requested = _approval_requested(storage, outcome, run_id)
        if requested:
            action_id = approval_id(run_id)
            print(action_id, file=ctx.out)
            print(
                f"{task}: awaiting approval (qlk approve {action_id}); its Run will be {run_id}",
                file=ctx.err,
            )
            return ExitCode.OK
    else:
        cwd = absolute_cwd(args.cwd)
        env = parse_env(args.env)
        deadline = duration_flag("--deadline", args.deadline)
        with open_task_store(args) as (storage, tasks, now):
            outcome = submit_command(
                storage,
                tasks,
                command,
                now_ms=now,
                run_id=run_id,
                attempt_id=attempt_id,
                cwd=cwd,
                env=env,
                deadline_ms=deadline,
            )
    if isinstance(outcome, TaskRefused):
        raise refusal(_subject(outcome.field, subject, args), outcome.code)
    if isinstance(outcome, Rejected):
        raise refusal(subject, outcome.code)
    if isinstance(outcome, Raced):
        raise InfrastructureError(
            f"{subject}: the database changed under the admission; submit again [{outcome.code}]"
        )
    assert isinstance(outcome, Applied | Replayed)
    print(run_id, file=ctx.out)
    return ExitCode.OK


def _approval_requested(storage: Storage, outcome: object, run_id: str) -> bool:
    """Whether the submission made an approval request: applied now, or (the same ids again)
    replayed, which only a request under the Run's action id tells apart from a replayed
    admission."""
    if isinstance(outcome, ActionApplied):
        return True
    if isinstance(outcome, Replayed) and isinstance(storage, EdgeStore):
        return storage.action(approval_id(run_id)) is not None
    return False


def _subject(field: str, default: str, args: argparse.Namespace) -> str:
    if field == "argv":
        return "CMD"
    if field == "deadline_ms":
        return f"--deadline {args.deadline}"
    if field in ("cwd", "env"):
        return f"--{field}"
    return default
