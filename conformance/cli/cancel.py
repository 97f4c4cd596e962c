"""`qlk cancel RUN [--reason user|timeout]`: record a cancellation intent (SPEC §1.9).

    qlk cancel run-3f2a...

The intent is the kernel's `RequestCancel` (actor `user`), executed through the engine in one
transaction; nothing is stopped here. The running application (`qlk serve`) finishes the Run:
one that is not executing (queued, waiting for a retry, lost) converges to `cancelled`, one
that is running is stopped through execution control first. `--reason timeout` records a
deadline-style intent instead (B-06): the Run ends `timed_out`.

A Workflow Run (SPEC §4.1) is cancelled as a whole through the kernel's `RequestWorkflowCancel`
instead: the running application's cancellation convergence (§4.4 phase 1) ends its Task
Attempts, every StepRun and the Run. Which command applies is the kernel's answer, not a status
read here: the Workflow command is tried first, and its `RUN_NOT_FOUND` (no Workflow admission
for that Run) sends the ordinary `RequestCancel`.

Output, one line (decision CLI-16): the intent was recorded; it was already requested (when,
why); the Run is already terminal (its status). All three are exit 0: after each, the Run is
finished or will be. Exit status (SPEC E-7): 0 as said; 2 an unknown RUN or a bad flag (one
line naming it); 3 the database failed, or this machine's clock is behind the Run's last
change (`CLOCK_REGRESSION`).
"""

from __future__ import annotations

import argparse

from conformance.cli.common import (
    Commands,
    Context,
    ExitCode,
    InfrastructureError,
    add_command,
    add_db_argument,
)
from conformance.cli.durations import format_time
from conformance.cli.localdb import now_ms, open_store, refusal
from kernel import (
    Actor,
    Applied,
    CancelReason,
    CommandError,
    Outcome,
    Raced,
    Rejected,
    RequestCancel,
    RunStatus,
)
from kernel.specs import Code
from kernel.workflow import RequestWorkflowCancel, WorkflowApplied, WorkflowOutcome
from runners.edge.store import EdgeStore
from runners.engine import execute, execute_workflow
from runners.local.status import RunView, run_detail

__all__ = ["REASONS", "register"]

#: The reasons a person may give (the others are the runtime's own: policy, shutdown, reconcile).
REASONS = (CancelReason.USER.value, CancelReason.TIMEOUT.value)


def register(commands: Commands) -> None:
    parser = add_command(
        commands,
        "cancel",
        help="request the cancellation of a Run (the running application finishes it)",
        handler=run,
    )
    add_db_argument(parser)
    parser.add_argument("run", metavar="RUN", help="a Run id")
    parser.add_argument(
        "--reason",
        choices=REASONS,
        default=CancelReason.USER.value,
        help="user (default: the Run ends cancelled) or timeout (it ends timed_out)",
    )


def _final(reason: CancelReason | None) -> RunStatus:
    return RunStatus.TIMED_OUT if reason is CancelReason.TIMEOUT else RunStatus.CANCELLED


def run(args: argparse.Namespace, ctx: Context) -> int:
    run_id: str = args.run
    reason = CancelReason(args.reason)
    subject = f"RUN {run_id}"
    try:
        command = RequestCancel(run_id, reason, Actor.USER)
        workflow_command = RequestWorkflowCancel(run_id, reason, Actor.USER)
    except CommandError:
        raise refusal(subject, Code.RUN_NOT_FOUND) from None  # not a Run id at all
    with open_store(args.db) as store:
        outcome = _request(store, command, workflow_command, now_ms())
        detail = run_detail(store, run_id)
    if isinstance(outcome, Rejected):
        if outcome.code is Code.CLOCK_REGRESSION:
            raise InfrastructureError(
                f"{subject}: this machine's clock is behind the Run's last change; "
                f"try again later [{outcome.code}]"
            )
        raise refusal(subject, outcome.code)
    if isinstance(outcome, Raced):
        raise InfrastructureError(
            f"{subject}: the Run changed while the intent was written; try again [{outcome.code}]"
        )
    assert detail is not None  # the kernel found the Run
    print(_line(outcome, detail.run), file=ctx.out)
    return ExitCode.OK


def _request(
    store: EdgeStore, command: RequestCancel, workflow_command: RequestWorkflowCancel, now: int
) -> Outcome | WorkflowOutcome:
    """The intent through the kernel: the Workflow command first; the kernel's
    `RUN_NOT_FOUND` for it means the Run has no Workflow admission (an ordinary Run, or none at
    all), so the ordinary command decides."""
    outcome = execute_workflow(store, workflow_command, now)
    if isinstance(outcome, Rejected) and outcome.code is Code.RUN_NOT_FOUND:
        return execute(store, command, now)
    return outcome


def _line(outcome: object, r: RunView) -> str:
    if isinstance(outcome, Applied | WorkflowApplied):
        final = _final(r.cancel_reason).value
        return (
            f"{r.run_id}: cancellation requested ({r.cancel_reason}); the running application "
            f"(qlk serve) stops it if it is running and finishes it as {final}"
        )
    if r.status.terminal:
        return f"{r.run_id}: already {r.status.value}; nothing to cancel"
    return (
        f"{r.run_id}: cancellation already requested at {format_time(r.cancel_requested_at_ms)} "
        f"({r.cancel_reason}); the running application finishes it as "
        f"{_final(r.cancel_reason).value}"
    )
