"""`qlk workflow submit PLAN`: admit one Workflow Run of a TOML plan file and print its Run id
(SPEC §4, ADR-0229; issue 18 item 5).

    RUN=$(qlk workflow submit plan.toml)
    qlk status "$RUN"            # the Run and one row per StepRun
    qlk cancel "$RUN"            # the whole Workflow (RequestWorkflowCancel)

The plan file (format: `kernel.workflow.plan`) is read and validated before the database is
opened (`conformance.cli.workflow_plan.load_plan`), so a bad file writes nothing, not even a new
database file. Each step's command becomes its implicit task (`adhoc:<16 hex>`, as `qlk submit
-- CMD` does, TK-5) and the Workflow is admitted through the kernel
(`runners.workflow_submit.submit_workflow`): the Run `running`, one `pending` StepRun per step,
with a fresh Run id (`run-<32 hex>`, decision CLI-11) and StepRun ids derived from it. The
running application (`qlk serve`) makes steps ready, admits and runs their Task Attempts.

Only the local database (`--db FILE`, `$QL3_DB`, `./ql3.db`): the cluster profile dispatches no
Workflow Task yet (issue 18 leaves remote Task dispatch out), so `--dsn` is refused (exit 2)
rather than admitting a Workflow nothing would run.

Stdout is the Run id alone, one line. Exit status (SPEC E-7): 0 admitted; 2 a bad plan file or a
refused admission (one line naming the file), a bad flag, `--dsn`; 3 the database failed.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Final

from conformance.cli.common import (
    Commands,
    Context,
    ExitCode,
    InfrastructureError,
    UsageError,
    add_command,
    add_store_arguments,
    subcommands,
)
from conformance.cli.localdb import now_ms, open_store
from conformance.cli.submit import fresh_ids
from conformance.cli.workflow_plan import load_plan
from kernel import CommandError, Raced, Rejected, Replayed
from kernel.task import TaskRefused
from kernel.workflow import WorkflowApplied
from runners.edge.tasks import EdgeTaskStore
from runners.workflow_submit import submit_workflow

__all__ = ["CLUSTER_REFUSAL", "register"]

#: Why `--dsn` is refused (one line, exit 2).
CLUSTER_REFUSAL: Final = (
    "workflow submit --dsn: the cluster profile runs no Workflow Task yet "
    "(issue 18 leaves remote Task dispatch out)"
)


def register(commands: Commands) -> None:
    group = add_command(commands, "workflow", help="submit Workflows (plans of dependent steps)")
    actions = subcommands(group, dest="workflow_command")
    submit = add_command(
        actions,
        "submit",
        help="admit a Workflow Run of a TOML plan file; prints its Run id",
        handler=run_submit,
    )
    submit.usage = "qlk workflow submit [--db FILE] PLAN"
    add_store_arguments(submit)
    submit.add_argument("plan", metavar="PLAN", help="the plan file (TOML)")


def run_submit(args: argparse.Namespace, ctx: Context) -> int:
    if args.dsn is not None or args.schema is not None:
        raise UsageError(CLUSTER_REFUSAL)
    path = Path(args.plan)
    plan = load_plan(path)  # before the database: a bad file writes nothing
    run_id, _ = fresh_ids()  # a Workflow Run has no Attempt of its own (§4.1)
    with open_store(args.db) as store:
        try:
            outcome = submit_workflow(
                store, EdgeTaskStore(store), plan, now_ms=now_ms(), run_id=run_id
            )
        except CommandError as exc:
            # The plan is valid but the kernel cannot admit it as written (e.g. a plan name
            # longer than a portable id, §0.4); nothing was written.
            raise UsageError(f"{path}: the kernel refuses the plan: {exc}") from None
    if isinstance(outcome, TaskRefused):
        key, _, field = outcome.field.partition(".")
        what = f"{field} " if field else ""
        raise UsageError(f'{path}: step "{key}": {what}refused [{outcome.code}]')
    if isinstance(outcome, Rejected):
        raise UsageError(f"{path}: the Workflow admission is refused [{outcome.code}]")
    if isinstance(outcome, Raced):
        raise InfrastructureError(
            f"{path}: the database changed under the admission; submit again [{outcome.code}]"
        )
    assert isinstance(outcome, WorkflowApplied | Replayed)
    print(run_id, file=ctx.out)
    return ExitCode.OK
