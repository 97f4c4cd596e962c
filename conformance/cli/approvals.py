"""`qlk approvals [ID]`, `qlk approve ID`, `qlk deny ID`: the approval requests of tasks that
require approval (SPEC §5, issue 19 item 3; the approval domain of decision AA-D1).

    qlk approvals                  # pending requests, newest first
    qlk approvals --all [--json]   # every status (pending, approved, denied, starting, ...)
    qlk approvals apr-3f2a...      # one request and its Events (who asked, who decided, when)
    qlk approve apr-3f2a... [--as NAME]
    qlk deny apr-3f2a... [--as NAME]

A request is made by `qlk submit --task NAME` for a task added with `--requires-approval`: it
holds the exact Run admission it will make. `qlk approve` records the decision (the kernel's
`ApproveAction`, one transaction); the Run is admitted later, by the Approved Action lifecycle
of `qlk serve --approvals`, behind its durable start barrier (at most once). `qlk deny` ends the
request: its Run never exists. Who decides is `--as NAME`, else the OS user name
(`localdb.person`, decision CLI-20); who and when are the request's Events.

[decision CLI-21] Listing is bounded (P-1): one keyset page of at most 64 requests, newest
first, read by `EdgeStore.actions`; when older ones exist a last line says so and gives the
`--before ID` that reads the next page. `--json` prints an array with the same keys every time,
each request with its Events (the note about older ones then goes to stderr). The table's
`requested` and `decided` cells are `who, age ago` and `run` is the status of the Run admitted
under the request's Run id (`-`: none yet): the ids themselves are 36 characters each, and the
Run id is the request id's 32 hex after `run-` (decision AA-D3); `--json` and `qlk approvals ID`
give both ids and the absolute times.

Output of `approve`/`deny`, one line: `approved apr-... (as bob); ...` / `denied apr-... (as
bob); ...`; the same decision by the same person again is `apr-... already approved by bob at
...` (exit 0). Exit status (SPEC E-7): 0 as said; 2 an unknown ID, a request already decided
otherwise (`already denied by alice at ...`, `ACTION_NOT_PENDING`), a bad `--as`; 3 the database
failed, the request changed while written, or this machine's clock is behind its last change.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Final

from conformance.cli.common import (
    Commands,
    Context,
    ExitCode,
    InfrastructureError,
    UsageError,
    add_command,
    add_db_argument,
)
from conformance.cli.durations import format_duration, format_time, iso_time
from conformance.cli.localdb import now_ms, open_store, person, refusal, table
from kernel import CommandError, Raced, Rejected, Replayed
from kernel.approved_action import (
    ActionApplied,
    ActionCursor,
    ActionEvent,
    ActionStatus,
    ApproveAction,
    ApprovedAction,
    DenyAction,
)
from kernel.specs import Code
from runners.edge.store import EdgeStore
from runners.engine import execute_action
from runners.local.status import run_progress

__all__ = [
    "PAGE",
    "action_document",
    "register",
    "register_approve",
    "register_deny",
]

#: Requests per listing: one keyset page, the domain's hard page cap (P-1, §5.1).
PAGE: Final = 64


def register(commands: Commands) -> None:
    parser = add_command(
        commands,
        "approvals",
        help="the approval requests (pending by default), or one request with its Events",
        description=(
            "The approval requests of tasks added with --requires-approval, newest first:\n"
            "pending ones by default, every status with --all; with ID, that one request and\n"
            "its Events. At most 64 per page; --before ID reads the next one."
        ),
        handler=show,
    )
    add_db_argument(parser)
    parser.add_argument(
        "id", metavar="ID", nargs="?", default=None, help="one request (apr-...): its Events too"
    )
    parser.add_argument("--all", action="store_true", help="every status, not only pending")
    parser.add_argument(
        "--before",
        metavar="ID",
        default=None,
        help="the next page: requests older than the request ID",
    )
    parser.add_argument("--json", action="store_true", help="print JSON (an array without ID)")


def _decision_parser(commands: Commands, name: str, help: str, approve: bool) -> None:
    parser = add_command(
        commands,
        name,
        help=help,
        handler=lambda args, ctx: decide(args, ctx, approve=approve),
    )
    add_db_argument(parser)
    parser.add_argument("id", metavar="ID", help="the request (apr-...; qlk approvals lists them)")
    parser.add_argument(
        "--as",
        dest="decided_by",
        metavar="NAME",
        default=None,
        help="who decides (default: your OS user name)",
    )


def register_approve(commands: Commands) -> None:
    """`qlk approve` (its module `conformance.cli.approve` is this function)."""
    _decision_parser(
        commands,
        "approve",
        "approve a pending request: qlk serve --approvals then admits its Run, once",
        approve=True,
    )


def register_deny(commands: Commands) -> None:
    """`qlk deny` (its module `conformance.cli.deny` is this function)."""
    _decision_parser(commands, "deny", "deny a pending request: its Run never runs", approve=False)


# -- documents ---------------------------------------------------------------------------------


def _event_document(event: ActionEvent) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "type": event.type.value,
        "actor": event.actor.value,
        "by": event.by,
        "at_ms": event.at_ms,
        "at": iso_time(event.at_ms),
        "code": event.code,
    }


def action_document(
    action: ApprovedAction, run_status: str | None, events: list[ActionEvent]
) -> dict[str, Any]:
    """One request for `--json`: always these keys (None where a fact is absent). `run_status`
    is the status of the Run admitted under its Run id (None: not admitted)."""
    admission = action.admission
    return {
        "action_id": action.action_id,
        "status": action.status.value,
        "task": admission.task_id,
        "task_revision": admission.task_revision,
        "run_id": admission.run_id,
        "run_status": run_status,
        "requested_by": action.requested_by,
        "requested_at_ms": action.requested_at_ms,
        "requested_at": iso_time(action.requested_at_ms),
        "decided_by": action.decided_by,
        "decided_at_ms": action.decided_at_ms,
        "decided_at": iso_time(action.decided_at_ms),
        "claimed_at_ms": action.claimed_at_ms,
        "finished_at_ms": action.finished_at_ms,
        "code": action.code,
        "events": [_event_document(e) for e in events],
    }


def _run_status(store: EdgeStore, action: ApprovedAction) -> str | None:
    progress = run_progress(store, action.run_id)
    return None if progress is None else progress.status.value


# -- listing and showing -----------------------------------------------------------------------


def _cursor(store: EdgeStore, before: str) -> ActionCursor:
    found = store.action(before)
    if found is None:
        raise refusal(f"--before {before}", Code.ACTION_NOT_FOUND)
    action, _ = found
    return ActionCursor(action.requested_at_ms, action.action_id)


def show(args: argparse.Namespace, ctx: Context) -> int:
    if args.id is not None:
        if args.all or args.before is not None:
            raise UsageError("--all and --before list requests: not with ID")
        return _show_one(args, ctx)
    status = None if args.all else ActionStatus.PENDING
    with open_store(args.db) as store:
        before = None if args.before is None else _cursor(store, args.before)
        page = store.actions(status=status, before=before, limit=PAGE)
        more = False
        if len(page) == PAGE:  # one more bounded read: is there an older one?
            last = page[-1]
            after_last = ActionCursor(last.requested_at_ms, last.action_id)
            more = bool(store.actions(status=status, before=after_last, limit=1))
        found = [(a, _run_status(store, a), store.action(a.action_id)) for a in page]
        now = now_ms()
    older = ""
    if more:
        flags = " --all" if args.all else ""
        last_id = page[-1].action_id
        older = f"(the newest {PAGE} shown; older ones: qlk approvals{flags} --before {last_id})"
    if args.json:
        documents = [
            action_document(a, run, [] if detail is None else detail[1]) for a, run, detail in found
        ]
        print(json.dumps(documents, indent=2, ensure_ascii=False), file=ctx.out)
        if older:
            print(f"qlk approvals: {older}", file=ctx.err)
        return ExitCode.OK
    if not found:
        what = "approval requests" if args.all else "pending approval requests"
        hint = "" if args.all else " (--all lists every status)"
        print(f"no {what}{hint}", file=ctx.out)
        return ExitCode.OK
    listing = table(ctx.console)
    for column in ("id", "task", "status", "requested", "decided", "run"):
        listing.add_column(column, no_wrap=column in ("id", "status"), overflow="fold")
    for action, run, _detail in found:
        decided = (
            "-"
            if action.decided_by is None
            else _who_when(action.decided_by, action.decided_at_ms, now)
        )
        listing.add_row(
            action.action_id,
            action.admission.task_id,
            action.status.value,
            _who_when(action.requested_by, action.requested_at_ms, now),
            decided,
            run or "-",
        )
    ctx.console.print(listing)
    if older:
        print(older, file=ctx.out)
    return ExitCode.OK


def _who_when(who: str, at_ms: int | None, now: int) -> str:
    if at_ms is None:
        return who
    age = max(0, now - at_ms)
    return f"{who}, " + ("just now" if age < 1_000 else f"{format_duration(age - age % 1_000)} ago")


def _show_one(args: argparse.Namespace, ctx: Context) -> int:
    action_id: str = args.id
    with open_store(args.db) as store:
        found = store.action(action_id)
        if found is None:
            raise refusal(f"ID {action_id}", Code.ACTION_NOT_FOUND)
        action, events = found
        run = _run_status(store, action)
    if args.json:
        print(json.dumps(action_document(action, run, events), indent=2), file=ctx.out)
        return ExitCode.OK
    out = ctx.out
    admission = action.admission
    decided = "-"
    if action.decided_by is not None:
        decided = f"{action.decided_by} at {format_time(action.decided_at_ms)}"
    facts = [
        ("task", f"{admission.task_id} (revision {admission.task_revision})"),
        ("run", f"{action.run_id}: {run or 'not admitted'}"),
        ("requested", f"{action.requested_by} at {format_time(action.requested_at_ms)}"),
        ("decided", decided),
    ]
    if action.claimed_at_ms is not None:
        facts.append(("claimed", format_time(action.claimed_at_ms)))
    if action.code is not None and action.status.final:
        facts.append(("code", action.code))
    print(f"approval {action.action_id}: {action.status.value}", file=out)
    for label, value in facts:
        print(f"  {label:<10}{value}", file=out)
    listing = table(ctx.console)
    for column in ("seq", "type", "actor", "by", "at", "code"):
        listing.add_column(column, no_wrap=column != "code", overflow="fold")
    for e in events:
        listing.add_row(
            str(e.seq),
            e.type.value,
            e.actor.value,
            e.by or "-",
            format_time(e.at_ms),
            e.code or "-",
        )
    print("events", file=out)
    ctx.console.print(listing)
    return ExitCode.OK


# -- approve and deny --------------------------------------------------------------------------


def decide(args: argparse.Namespace, ctx: Context, *, approve: bool) -> int:
    """`qlk approve ID` / `qlk deny ID`: the kernel's decision command, one transaction."""
    action_id: str = args.id
    subject = f"ID {action_id}"
    decided_by = person(args.decided_by)
    try:
        command = (
            ApproveAction(action_id, decided_by) if approve else DenyAction(action_id, decided_by)
        )
    except CommandError:
        raise refusal(subject, Code.ACTION_NOT_FOUND) from None  # not an action id at all
    with open_store(args.db) as store:
        outcome = execute_action(store, command, now_ms())
        found = store.action(action_id)
    action = None if found is None else found[0]
    if isinstance(outcome, ActionApplied):
        run_id = outcome.action.run_id
        if approve:
            line = (
                f"approved {action_id} (as {decided_by}); qlk serve --approvals admits its Run "
                f"{run_id}"
            )
        else:
            line = f"denied {action_id} (as {decided_by}); its Run {run_id} never runs"
        print(line, file=ctx.out)
        return ExitCode.OK
    if isinstance(outcome, Replayed) and action is not None:
        print(f"{action_id} already {_decision(action)}", file=ctx.out)
        return ExitCode.OK
    if isinstance(outcome, Rejected):
        if outcome.code is Code.ACTION_NOT_PENDING and action is not None:
            raise UsageError(f"{subject}: already {_decision(action)} [{outcome.code}]")
        if outcome.code is Code.CLOCK_REGRESSION:
            raise InfrastructureError(
                f"{subject}: this machine's clock is behind the request's last change; "
                f"try again later [{outcome.code}]"
            )
        raise refusal(subject, outcome.code)
    if isinstance(outcome, Raced):
        raise InfrastructureError(
            f"{subject}: the request changed while the decision was written; try again "
            f"[{outcome.code}]"
        )
    raise InfrastructureError(f"{subject}: unexpected outcome {outcome.kind}")  # pragma: no cover


def _decision(action: ApprovedAction) -> str:
    """`denied by alice at ...` / `approved by bob at ... (now started)`."""
    verb = "denied" if action.status is ActionStatus.DENIED else "approved"
    text = f"{verb} by {action.decided_by} at {format_time(action.decided_at_ms)}"
    if action.status not in (ActionStatus.DENIED, ActionStatus.APPROVED):
        text += f" (now {action.status.value})"
    return text
