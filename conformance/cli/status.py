"""`qlk status [RUN]`: what the local application holds, or one Run.

    qlk status                 # Runs by status; each source's backlog and oldest wait
    qlk status run-3f2a... --json
    qlk status --dsn postgresql://... [--schema NAME] [--json]   # the cluster profile's Runs

Without RUN: how many Runs have each status and, per source of work, how many items wait and
for how long the oldest has (queued Runs waiting for dispatch, `retry_wait` Runs whose retry is
due, `lost` Runs waiting for the lost-retry decision, `running` Runs, Runs with a cancellation
intent still to finish, task schedules whose fire is due). The counts are bounded aggregates
(`runners.local.status`, `sql/status.sql`; decision CLI-13): a count above 100000 is shown as
`100000+`. With RUN: the Run, its Attempts (number, id, status, exit code, times), its Events
(seq, type, actor, time) and where its latest Attempt's log is. No token or digest is read.
`--json` prints one JSON document with the same keys every time.

A Workflow is a Run of kind workflow (SPEC §4.1): it counts among the Runs above (`running`
until its frontier ends it), and `qlk status RUN` of one also shows its plan and a table of its
StepRuns in plan order (step key, status, epoch, Task Attempts admitted of the most allowed,
started, finished, error code); its Attempts are the steps' Task Attempts. Its `--json`
document has one more key, `workflow` (plan name and digest, admission time, `steps`).

With `--dsn DSN [--schema NAME]` (issue 17): the cluster profile's Runs by status (every
status, zeros included; `--json`: `{"schema", "runs", "total"}`); one Run's detail is not shown
on cluster yet (exit 2 says so).

[decision CLI-22] A Run of a task that requires approval (issue 19) does not exist until its
request is approved and admitted; until then `qlk status RUN` says where its request stands
instead of "no such run" (`run run-...: awaiting approval (qlk approve apr-...)`, or approved,
waiting for `qlk serve --approvals`, or denied: it never runs), exit 0; `--json` prints `{"run":
null, "approval": {...}}` (the request as `qlk approvals ID --json` prints it). The request is
found by its id, `approval_id(RUN)` (decision AA-D3), one indexed read.

Exit status (SPEC E-7): 0 shown; 2 an unknown RUN (one line naming it) or a bad flag; 3 the
database failed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from conformance.cli.common import (
    Commands,
    Context,
    ExitCode,
    UsageError,
    add_command,
    add_store_arguments,
)
from conformance.cli.durations import format_duration, format_time
from conformance.cli.localdb import now_ms, open_store, refusal, table
from kernel.approved_action import ActionEvent, ApprovedAction, approval_id
from kernel.specs import Code, RunStatus
from runners.local.launcher import LocalLayout
from runners.local.status import (
    AttemptView,
    Backlog,
    BacklogSource,
    Overview,
    RunDetail,
    StepRunView,
    WorkflowView,
    overview,
    run_detail,
)

__all__ = ["register"]

#: What each backlog row counts, and what its oldest time is.
SOURCE_TEXT = {
    BacklogSource.DISPATCH: ("queued Runs waiting for dispatch", "queued"),
    BacklogSource.RETRY_DUE: ("retry_wait Runs whose retry is due", "due"),
    BacklogSource.LOST: ("lost Runs waiting for the retry decision", "lost"),
    BacklogSource.RUNNING: ("running Runs", "started"),
    BacklogSource.CANCELLING: ("Runs with a cancel request still to finish", "requested"),
    BacklogSource.SCHEDULE: ("task schedules whose fire is due", "due"),
}


def register(commands: Commands) -> None:
    parser = add_command(
        commands,
        "status",
        help="Runs by status and the backlogs, or one Run with its Attempts and Events",
        handler=run,
    )
    add_store_arguments(parser)
    parser.add_argument("run", metavar="RUN", nargs="?", default=None, help="a Run id")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace, ctx: Context) -> int:
    if args.dsn is not None or args.schema is not None:
        return _cluster(args, ctx)
    if args.run is None:
        with open_store(args.db) as store:
            summary = overview(store, now_ms())
        if args.json:
            _print_json(ctx, overview_document(summary))
        else:
            _print_overview(ctx, summary)
        return ExitCode.OK
    with open_store(args.db) as store:
        layout = LocalLayout(store.path)
        detail = run_detail(store, args.run)
        # A Run not admitted may be one whose approval request waits (issue 19).
        request = None if detail is not None else store.action(approval_id(args.run))
    if detail is None and request is not None and request[0].run_id == args.run:
        return _print_request(ctx, args, *request)
    if detail is None:
        raise refusal(f"RUN {args.run}", Code.RUN_NOT_FOUND)
    if args.json:
        _print_json(ctx, run_document(detail, layout))
    else:
        _print_run(ctx, detail, layout)
    return ExitCode.OK


def _print_request(
    ctx: Context, args: argparse.Namespace, action: ApprovedAction, events: list[ActionEvent]
) -> int:
    """A Run not admitted (yet, or ever): where its approval request stands."""
    # Imported here: only this case needs the approvals command's document.
    from conformance.cli.approvals import action_document  # noqa: PLC0415

    if args.json:
        _print_json(ctx, {"run": None, "approval": action_document(action, None, events)})
        return ExitCode.OK
    print(f"run {action.run_id}: {_request_state(action)}", file=ctx.out)
    return ExitCode.OK


def _request_state(action: ApprovedAction) -> str:
    """What a Run not admitted waits for, from its request's status (a `starting` request is
    the lifecycle's, between its start barrier and the admission)."""
    who = f"{action.decided_by} at {format_time(action.decided_at_ms)}"
    status = action.status.value
    if status == "pending":
        return f"awaiting approval (qlk approve {action.action_id})"
    if status in ("approved", "starting"):
        return (
            f"approved by {who}; not admitted yet: qlk serve --approvals admits it "
            f"({action.action_id})"
        )
    if status == "denied":
        return f"denied by {who}; it never runs ({action.action_id})"
    code = f", {action.code}" if action.code else ""
    return f"not admitted: its approval request {action.action_id} is {status}{code}"


def _cluster(args: argparse.Namespace, ctx: Context) -> int:
    """`qlk status --dsn`: the cluster schema's Runs by status."""
    # Imported here: a local command never loads psycopg (docs/performance.md).
    from conformance.cli.cluster import cluster_target, counts, open_cluster  # noqa: PLC0415

    target = cluster_target(args)
    assert target is not None  # --schema alone was refused
    if args.run is not None:
        raise UsageError(f"RUN {args.run}: one Run's detail is shown for --db only (not --dsn)")
    with open_cluster(target) as store:
        by_status = counts(store)
    every = {status.value: by_status.get(status, 0) for status in RunStatus}
    total = sum(every.values())
    if args.json:
        _print_json(ctx, {"schema": target.schema, "runs": every, "total": total})
        return ExitCode.OK
    print(f"{total} runs in {target.where} schema {target.schema}", file=ctx.out)
    runs = table(ctx.console)
    runs.add_column("status")
    runs.add_column("runs", justify="right")
    for status, count in every.items():
        runs.add_row(status, str(count))
    ctx.console.print(runs)
    return ExitCode.OK


def _print_json(ctx: Context, document: dict[str, Any]) -> None:
    print(json.dumps(document, indent=2, ensure_ascii=False), file=ctx.out)


def _age(backlog: Backlog, now: int) -> str:
    age = backlog.oldest_age_ms(now)
    if age is None:
        return "-"
    return "<1s" if age < 1_000 else format_duration(age - age % 1_000)


def _count(count: int, capped: bool) -> str:
    return f"{count}+" if capped else str(count)


# -- the overview ------------------------------------------------------------------------------


def overview_document(summary: Overview) -> dict[str, Any]:
    """`status --json` without RUN: every status and every source, zero included."""
    now = summary.observed_at_ms
    return {
        "observed_at_ms": now,
        "count_cap": summary.cap,
        "runs": {c.status.value: c.count for c in summary.counts},
        "runs_capped": [c.status.value for c in summary.counts if c.capped],
        "total": summary.total,
        "backlog": {
            b.source.value: {
                "count": b.count,
                "capped": b.capped,
                "oldest_at_ms": b.oldest_at_ms,
                "oldest_age_ms": b.oldest_age_ms(now),
            }
            for b in summary.backlogs
        },
    }


def _print_overview(ctx: Context, summary: Overview) -> None:
    now = summary.observed_at_ms
    total = _count(summary.total, summary.capped)
    print(f"{total} runs at {format_time(now)}", file=ctx.out)
    runs = table(ctx.console)
    runs.add_column("status")
    runs.add_column("runs", justify="right")
    for count in summary.counts:
        runs.add_row(count.status.value, _count(count.count, count.capped))
    ctx.console.print(runs)
    backlog = table(ctx.console)
    for column in ("source", "waiting", "oldest", "what"):
        backlog.add_column(column, justify="right" if column == "waiting" else "left")
    for item in summary.backlogs:
        what, since = SOURCE_TEXT[item.source]
        oldest = _age(item, now)
        backlog.add_row(
            item.source.value,
            _count(item.count, item.capped),
            "-" if oldest == "-" else f"{oldest} ago ({since})",
            what,
        )
    ctx.console.print(backlog)


# -- one Run -----------------------------------------------------------------------------------


def _log(layout: LocalLayout, attempt: AttemptView | None) -> Path | None:
    return None if attempt is None else layout.log_path(attempt.attempt_id)


def _step_document(step: StepRunView) -> dict[str, Any]:
    return {
        "step_key": step.step_key,
        "step_run_id": step.step_run_id,
        "status": step.status.value,
        "epoch": step.version,
        "task": step.task_id,
        "task_revision": step.task_revision,
        "after": list(step.depends_on),
        "attempts_admitted": step.admitted,
        "max_attempts": step.max_attempts,
        "created_at_ms": step.created_at_ms,
        "updated_at_ms": step.updated_at_ms,
        "ready_at_ms": step.ready_at_ms,
        "started_at_ms": step.started_at_ms,
        "finished_at_ms": step.finished_at_ms,
        "error_code": step.error_code,
    }


def workflow_document(workflow: WorkflowView) -> dict[str, Any]:
    """The `workflow` key of a Workflow Run's `status RUN --json`: its admission and every
    StepRun in plan order, always these keys (None where a fact is absent)."""
    return {
        "plan_name": workflow.plan_name,
        "plan_digest": workflow.plan_digest,
        "admitted_at_ms": workflow.admitted_at_ms,
        "steps": [_step_document(step) for step in workflow.steps],
    }


def run_document(detail: RunDetail, layout: LocalLayout) -> dict[str, Any]:
    """`status RUN --json`: the Run, its Attempts (each with its log path), its Events and the
    latest Attempt's log; always these keys (None where a fact is absent), and `workflow` too
    for a Workflow Run (an ordinary Run's document stays as it was)."""
    document = _run_document(detail, layout)
    if detail.workflow is not None:
        document["workflow"] = workflow_document(detail.workflow)
    return document


def _run_document(detail: RunDetail, layout: LocalLayout) -> dict[str, Any]:
    r = detail.run
    log = _log(layout, detail.latest_attempt)
    return {
        "run": {
            "run_id": r.run_id,
            "status": r.status.value,
            "task": r.task_id,
            "task_revision": r.task_revision,
            "created_at_ms": r.created_at_ms,
            "queued_at_ms": r.queued_at_ms,
            "started_at_ms": r.started_at_ms,
            "finished_at_ms": r.finished_at_ms,
            "updated_at_ms": r.updated_at_ms,
            "cancel_requested_at_ms": r.cancel_requested_at_ms,
            "cancel_reason": None if r.cancel_reason is None else r.cancel_reason.value,
            "error_code": r.error_code,
            "retry_of_run_id": r.retry_of_run_id,
        },
        "attempts": [
            {
                "number": a.number,
                "attempt_id": a.attempt_id,
                "status": a.status.value,
                "exit_code": a.exit_code,
                "error_code": a.error_code,
                "created_at_ms": a.created_at_ms,
                "started_at_ms": a.started_at_ms,
                "finished_at_ms": a.finished_at_ms,
                "log": str(layout.log_path(a.attempt_id)),
            }
            for a in detail.attempts
        ],
        "events": [
            {
                "seq": e.seq,
                "type": e.type,
                "actor": e.actor.value,
                "at_ms": e.at_ms,
                "attempt_id": e.attempt_id,
                "code": e.code,
            }
            for e in detail.events
        ],
        "events_truncated": detail.events_truncated,
        "log": None if log is None else str(log),
        "log_exists": log is not None and log.is_file(),
    }


def _print_run(ctx: Context, detail: RunDetail, layout: LocalLayout) -> None:
    r = detail.run
    out = ctx.out
    workflow = detail.workflow
    # A Workflow Run's task id is its plan name (admit_workflow); say so rather than show a
    # task revision that is no task's.
    subject = (
        ("task", f"{r.task_id} (revision {r.task_revision})")
        if workflow is None
        else ("workflow", f"{workflow.plan_name} (plan {workflow.plan_digest[:12]})")
    )
    facts = [
        subject,
        ("created", format_time(r.created_at_ms)),
        ("queued", format_time(r.queued_at_ms)),
        ("started", format_time(r.started_at_ms)),
        ("finished", format_time(r.finished_at_ms)),
    ]
    if r.cancel_requested_at_ms is not None:
        reason = "" if r.cancel_reason is None else f" ({r.cancel_reason.value})"
        facts.append(("cancel", f"requested {format_time(r.cancel_requested_at_ms)}{reason}"))
    if r.error_code is not None:
        facts.append(("error", r.error_code))
    if r.retry_of_run_id is not None:
        facts.append(("retry of", r.retry_of_run_id))
    log = _log(layout, detail.latest_attempt)
    if log is not None:
        facts.append(("log", str(log) + ("" if log.is_file() else " (not written yet)")))
    print(f"run {r.run_id}: {r.status.value}", file=out)
    for label, value in facts:
        print(f"  {label:<10}{value}", file=out)
    if workflow is not None:
        _print_steps(ctx, workflow)
    attempts = table(ctx.console)
    for column in ("#", "attempt", "status", "exit", "started", "took"):
        attempts.add_column(column, no_wrap=True)
    numbers: dict[str, int] = {}
    for a in detail.attempts:
        numbers[a.attempt_id] = a.number
        took = (
            "-"
            if a.started_at_ms is None or a.finished_at_ms is None
            else format_duration(max(0, a.finished_at_ms - a.started_at_ms))
        )
        attempts.add_row(
            str(a.number),
            a.attempt_id,
            a.status.value,
            "-" if a.exit_code is None else str(a.exit_code),
            format_time(a.started_at_ms),
            took,
        )
    print("attempts", file=out)
    ctx.console.print(attempts)
    for a in detail.attempts:
        if a.error_code is not None:
            print(f"  #{a.number} error {a.error_code}", file=out)
    events = table(ctx.console)
    for column in ("seq", "type", "actor", "at", "attempt", "code"):
        events.add_column(column, no_wrap=column != "code", overflow="fold")
    for e in detail.events:
        number = None if e.attempt_id is None else numbers.get(e.attempt_id)
        attempt = (
            "-" if e.attempt_id is None else (e.attempt_id if number is None else f"#{number}")
        )
        events.add_row(
            str(e.seq), e.type, e.actor.value, format_time(e.at_ms), attempt, e.code or "-"
        )
    print("events", file=out)
    ctx.console.print(events)
    if detail.events_truncated:
        print(f"(the first {len(detail.events)} events; --json has the same)", file=out)


def _print_steps(ctx: Context, workflow: WorkflowView) -> None:
    """The StepRuns of a Workflow Run in plan order: `attempts` is Task Attempts admitted of
    the most the step allows; `epoch` is the StepRun's version (§4.1)."""
    steps = table(ctx.console)
    for column in ("step", "status", "epoch", "attempts", "started", "finished", "error"):
        steps.add_column(column, no_wrap=column != "error", overflow="fold")
    for step in workflow.steps:
        steps.add_row(
            step.step_key,
            step.status.value,
            str(step.version),
            f"{step.admitted}/{step.max_attempts}",
            format_time(step.started_at_ms),
            format_time(step.finished_at_ms),
            step.error_code or "-",
        )
    print("steps", file=ctx.out)
    ctx.console.print(steps)
