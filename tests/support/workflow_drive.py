"""A scripted Workflow driven through `runners.engine.execute_workflow` on any store (the edge,
cluster and reference stores): the two-step plan of WF-14, a retry, a cancellation with a running
Task (WF-16), and the replays of §4.3. Returns the outcome kinds and codes, in order."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from kernel.commands import LocalReceipt
from kernel.specs import CompletionOutcome
from kernel.workflow import (
    AdmitTask,
    AdmitWorkflow,
    AdvanceFrontier,
    CompleteTask,
    ConvergeWorkflowCancel,
    PinnedStep,
    PrepareTask,
    RecordTaskHandle,
    RequestWorkflowCancel,
    WorkflowCommand,
)
from runners.engine import WorkflowStorage, execute_workflow

LOCAL = "local.posix"
PLAN_DIGEST = hashlib.sha256(b"two-step plan").hexdigest()
TOKEN_DIGEST = hashlib.sha256(b"a callback token of the test").hexdigest()
TWO_STEPS = (
    PinnedStep("build", "sr-build", "task-build", 1, LOCAL),
    PinnedStep("test", "sr-test", "task-test", 1, LOCAL, ("build",), max_attempts=2),
)


class Driver:
    """Drives one or more stores in lockstep: every command goes to each, every store must
    answer the same, and `after_step(now)` runs after each command (source checks)."""

    def __init__(
        self,
        *stores: WorkflowStorage,
        start_ms: int = 1_000,
        after_step: Callable[[int], None] | None = None,
    ) -> None:
        self.stores = stores
        self.store = stores[0]
        self.now = start_ms
        self.seen: list[str] = []
        self.after_step = after_step

    def do(self, command: WorkflowCommand) -> str:
        self.now += 7
        lines = set()
        for store in self.stores:
            outcome = execute_workflow(store, command, self.now)
            lines.add(f"{command.name}:{outcome.kind.value}:{outcome.code.value}")
        assert len(lines) == 1, lines
        (line,) = lines
        self.seen.append(line)
        if self.after_step is not None:
            self.after_step(self.now)
        return line

    def version(self, run_id: str, step_run_id: str) -> int:
        with self.store.transaction() as tx:
            wf = tx.load_workflow(run_id)
        assert wf is not None
        step = wf.step_run(step_run_id)
        assert step is not None
        return step.version

    def latest_attempt(self, run_id: str) -> str:
        with self.store.transaction() as tx:
            wf = tx.load_workflow(run_id)
        assert wf is not None
        return wf.attempts[-1].attempt_id

    def run_step(self, run_id: str, step_run_id: str, outcome: CompletionOutcome) -> None:
        version = self.version(run_id, step_run_id)
        self.do(AdmitTask(run_id, step_run_id, version))
        self.do(AdmitTask(run_id, step_run_id, version))  # exact replay (§4.3)
        attempt_id = self.latest_attempt(run_id)
        self.do(PrepareTask(run_id, attempt_id, LOCAL, 1, TOKEN_DIGEST))
        self.do(PrepareTask(run_id, attempt_id, LOCAL, 2, TOKEN_DIGEST))  # a second spawn: no
        started = self.now
        self.do(RecordTaskHandle(run_id, attempt_id, "pid:4242", started))
        receipt = LocalReceipt(run_id, attempt_id, 1, TOKEN_DIGEST, outcome, started, 0)
        self.do(CompleteTask(run_id, attempt_id, receipt))
        self.do(CompleteTask(run_id, attempt_id, receipt))  # the lost response, replayed
        self.do(AdvanceFrontier(run_id))


def drive(*stores: WorkflowStorage, after_step: Callable[[int], None] | None = None) -> list[str]:
    """Run the script on every store in lockstep; each must answer every command the same."""
    d = Driver(*stores, after_step=after_step)
    d.do(AdmitWorkflow("wf-ok", "project", "two-step", PLAN_DIGEST, TWO_STEPS))
    d.do(AdmitWorkflow("wf-ok", "project", "two-step", PLAN_DIGEST, TWO_STEPS))
    d.do(AdvanceFrontier("wf-ok"))
    d.run_step("wf-ok", "sr-build", CompletionOutcome.SUCCEEDED)
    d.run_step("wf-ok", "sr-test", CompletionOutcome.FAILED)  # retried: a new epoch
    d.run_step("wf-ok", "sr-test", CompletionOutcome.SUCCEEDED)
    # A Workflow cancelled while its first step runs: the stop first, then one convergence.
    steps = (
        PinnedStep("only", "sr-only", "task-only", 1, LOCAL),
        PinnedStep("next", "sr-next", "task-next", 1, LOCAL, ("only",)),
    )
    d.do(AdmitWorkflow("wf-cancel", "project", "cancel-me", PLAN_DIGEST, steps))
    d.do(AdvanceFrontier("wf-cancel"))
    d.do(AdmitTask("wf-cancel", "sr-only", d.version("wf-cancel", "sr-only")))
    attempt_id = d.latest_attempt("wf-cancel")
    d.do(PrepareTask("wf-cancel", attempt_id, LOCAL, 1, TOKEN_DIGEST))
    d.do(RecordTaskHandle("wf-cancel", attempt_id, "pid:77", d.now))
    d.do(RequestWorkflowCancel("wf-cancel"))
    d.do(ConvergeWorkflowCancel("wf-cancel"))  # refused: the process is not stopped yet
    d.do(ConvergeWorkflowCancel("wf-cancel", (attempt_id,)))
    d.do(ConvergeWorkflowCancel("wf-cancel", (attempt_id,)))  # replayed: nothing more
    return d.seen
