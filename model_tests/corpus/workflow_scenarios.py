"""The Workflow traces (SPEC §4.10, §7 component `workflow`; issue 18 item 3).

One named trace or more per CONF item of §4.10 (WF-05, WF-07, WF-08, WF-14 .. WF-18) and of
Appendix D (WF-19), each recorded through the reference store by `WorkflowScenario` and checking
its own expectations while recording (as `model_tests.corpus.dsl` does for Runs), plus a few
seeded random Workflows (`generated/`). Every trace needs the `workflow` capability: a runner
whose adapter does not persist Workflows reports them not applicable, never passed. The files
under `conformance/traces/workflow/` are the data; `python -m model_tests.corpus` regenerates
them.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import random
from collections.abc import Callable, Iterator

from conformance.run.faults import Fault, FaultKind
from conformance.run.projection import Projection
from conformance.run.trace import Trace
from kernel import (
    ActivateLocal,
    AdmitRun,
    CompletedEvidence,
    CompletionOutcome,
    LiveEvidence,
    LocalReceipt,
    NotRunningEvidence,
    PolicyDefinition,
    RecordLocalHandle,
    Safety,
    UnknownEvidence,
    UnknownReason,
    token_digest,
)
from kernel.specs.states import Profile
from kernel.workflow import (
    AdmitTask,
    AdmitWorkflow,
    AdvanceFrontier,
    CompleteTask,
    ConvergeWorkflowCancel,
    FailTaskStart,
    PinnedStep,
    PrepareTask,
    RecordTaskHandle,
    RecoverTaskStartup,
    RequestWorkflowCancel,
    TimeOutTask,
    WorkflowAggregate,
    WorkflowApplied,
    WorkflowCommand,
    apply_workflow,
)
from model_tests.corpus.dsl import Scenario, ScenarioError
from runners.engine import load_workflow_for

Builder = Callable[[], Trace]
WORKFLOW_SCENARIOS: dict[str, Builder] = {}

LOCAL = "local"
CALLBACK = token_digest("workflow-callback".ljust(40, "w"))
NO_BACKOFF = PolicyDefinition(3, True, Safety.IDEMPOTENT, 0, 0)
CRASH_AFTER = Fault(FaultKind.CRASH_AFTER_COMMIT)
CRASH_BEFORE = Fault(FaultKind.CRASH_BEFORE_COMMIT)
REOPEN = Fault(FaultKind.REOPEN)
#: The seeded random Workflows of `generated/` (cheap: a few dozen steps each).
GENERATED_SEEDS = tuple(range(4_000, 4_012))


def plan_digest(name: str) -> str:
    return hashlib.sha256(f"ql3-workflow-trace-plan\0{name}".encode()).hexdigest()


def step(key: str, *deps: str, max_attempts: int = 1) -> PinnedStep:
    """A plan step whose StepRun id and Task are derived from its key."""
    return PinnedStep(
        key, f"sr-{key}", f"task-{key}", 1, LOCAL, tuple(sorted(deps)), max_attempts=max_attempts
    )


class WorkflowScenario(Scenario):
    """A named Workflow trace being recorded (component `workflow`)."""

    def __init__(self, name: str, description: str, *, profile: Profile = Profile.EDGE) -> None:
        super().__init__(name, description, profile=profile, component="workflow")

    # -- state ---------------------------------------------------------------------------------
    def wf(self, run_id: str) -> WorkflowAggregate:
        for found in self.recorder.adapter.store.workflows():
            if found.run.run_id == run_id:
                return found
        raise ScenarioError(f"{self.recorder.header.name}: no Workflow {run_id}")

    def projection(self) -> Projection:
        return self.recorder.adapter.project()

    def version(self, run_id: str, key: str) -> int:
        found = self.wf(run_id).step_run(f"sr-{key}")
        assert found is not None
        return found.version

    def attempt_of(self, run_id: str, key: str) -> str:
        """The latest Task Attempt of step `key` (admission derives its `wta:` id, §4.6)."""
        attempts = [a for a in self.wf(run_id).attempts if a.step_run_id == f"sr-{key}"]
        if not attempts:
            raise ScenarioError(f"{self.recorder.header.name}: step {key} has no Attempt")
        return attempts[-1].attempt_id

    def statuses(self, run_id: str) -> dict[str, str]:
        wf = self.wf(run_id)
        out = {"run": wf.run.status.value}
        out.update({s.step_key: s.status.value for s in wf.step_runs})
        return out

    def expect_state(self, run_id: str, **want: str) -> None:
        got = self.statuses(run_id)
        wrong = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
        if wrong:
            raise ScenarioError(f"{self.recorder.header.name}: {run_id} (got, want) {wrong}")

    def workflow_effects(self, command: WorkflowCommand) -> int:
        """How many statements (kernel effects) `command` would write now (D-3)."""
        with self.recorder.adapter.store.transaction() as tx:
            outcome = apply_workflow(load_workflow_for(tx, command), command, self.now)
        if not isinstance(outcome, WorkflowApplied):
            raise ScenarioError(f"{command.name} would not apply now: {outcome.code}")
        return len(outcome.effects)

    def workflow_faults(self, command: WorkflowCommand) -> None:
        """A crash before commit, then an I/O error at every statement: nothing changes (I-W4)."""
        before = self.projection()
        self.do(command, "crashed", fault=CRASH_BEFORE)
        for k in range(1, self.workflow_effects(command) + 1):
            self.do(command, "error", fault=Fault(FaultKind.IO_ERROR, at_effect=k))
        if self.projection() != before:
            raise ScenarioError(f"{self.recorder.header.name}: a fault of {command.name} wrote")

    # -- the protocol --------------------------------------------------------------------------
    def admit_workflow(
        self, run_id: str, steps: tuple[PinnedStep, ...], expect: str = "applied:admitted"
    ) -> AdmitWorkflow:
        command = AdmitWorkflow(run_id, "project", run_id, plan_digest(run_id), steps)
        self.do(command, expect)
        return command

    def admit_task(self, run_id: str, key: str, expect: str | None = "applied:admitted") -> str:
        self.do(AdmitTask(run_id, f"sr-{key}", self.version(run_id, key)), expect)
        return self.attempt_of(run_id, key)

    def prepare(self, run_id: str, aid: str, sequence: int = 1) -> PrepareTask:
        return PrepareTask(run_id, aid, LOCAL, sequence, CALLBACK)

    def handle(self, run_id: str, aid: str, started_at_ms: int) -> RecordTaskHandle:
        return RecordTaskHandle(run_id, aid, f"pid:{aid[-6:]}", started_at_ms)

    def complete(
        self,
        run_id: str,
        aid: str,
        started_at_ms: int,
        outcome: CompletionOutcome = CompletionOutcome.SUCCEEDED,
    ) -> CompleteTask:
        exit_code = 0 if outcome is CompletionOutcome.SUCCEEDED else 1
        receipt = LocalReceipt(run_id, aid, 1, CALLBACK, outcome, started_at_ms, exit_code)
        return CompleteTask(run_id, aid, receipt)

    def started(self, run_id: str, key: str) -> tuple[str, int]:
        """Admit, prepare and record the handle of step `key`: a running Task."""
        aid = self.admit_task(run_id, key)
        self.tick(10)
        self.do(self.prepare(run_id, aid), "applied")
        started = self.tick(5)
        self.tick(10)
        self.do(self.handle(run_id, aid, started), "applied")
        return aid, started

    def run_to_success(self, run_id: str, key: str) -> str:
        aid, started = self.started(run_id, key)
        self.tick(100)
        self.do(self.complete(run_id, aid, started), "applied:completed")
        return aid


def workflow_scenario(
    name: str, description: str, *, profile: Profile = Profile.EDGE
) -> Callable[[Callable[[WorkflowScenario], None]], Builder]:
    """Register `body` as the builder of the Workflow trace `name`."""

    def register(body: Callable[[WorkflowScenario], None]) -> Builder:
        def build() -> Trace:
            s = WorkflowScenario(name, description, profile=profile)
            body(s)
            return s.trace()

        WORKFLOW_SCENARIOS[name] = build
        return build

    return register


TWO_STEPS = (step("build"), step("test", "build"))


# -- WF-05 -------------------------------------------------------------------------------------
@workflow_scenario(
    "WF-05-task-execution-faults-write-nothing",
    "WF-05: a crash before commit, and an I/O error at each statement, of every Task execution "
    "transaction (prepare, handle, completion, start failure, timeout) leaves the Attempt, the "
    "StepRun, the Run counters (version, event_seq) and the Events unchanged; each clean "
    "delivery then applies, and the parent stays running until the frontier aggregates.",
)
def wf_05(s: WorkflowScenario) -> None:
    steps = (step("a"), step("b"), step("c"))
    s.admit_workflow("wf", steps)
    s.tick(10)
    s.do(AdvanceFrontier("wf"), "applied")
    for key in ("a", "b", "c"):
        s.admit_task("wf", key)
    a, b, c = (s.attempt_of("wf", key) for key in ("a", "b", "c"))
    s.tick(10)
    for aid in (a, b, c):
        s.workflow_faults(s.prepare("wf", aid))
        s.do(s.prepare("wf", aid), "applied")
    started = s.tick(5)
    s.tick(10)
    for aid in (a, c):
        s.workflow_faults(s.handle("wf", aid, started))
        s.do(s.handle("wf", aid, started), "applied")
    s.workflow_faults(FailTaskStart("wf", b))
    s.do(FailTaskStart("wf", b), "applied")
    s.expect_state("wf", run="running", b="failed")
    s.tick(100)
    s.workflow_faults(s.complete("wf", a, started))
    s.do(s.complete("wf", a, started), "applied:completed")
    s.workflow_faults(TimeOutTask("wf", c))
    s.do(TimeOutTask("wf", c), "applied")
    s.expect_state("wf", run="running", a="succeeded", b="failed", c="timed_out")
    s.tick(10)
    s.workflow_faults(AdvanceFrontier("wf"))
    s.do(AdvanceFrontier("wf"), "applied")
    s.expect_state("wf", run="failed")


@workflow_scenario(
    "WF-05-cancellation-convergence-faults-write-nothing",
    "WF-05: a crash before commit, and an I/O error at each statement, of the cancellation "
    "convergence of a Workflow with a running Task leaves every Attempt, StepRun, the Run "
    "counters and the Events unchanged; the parent stays running with its intent until one "
    "clean convergence ends everything cancelled.",
)
def wf_05_cancel(s: WorkflowScenario) -> None:
    s.admit_workflow("wf", TWO_STEPS)
    s.tick(10)
    s.do(AdvanceFrontier("wf"), "applied")
    aid, _ = s.started("wf", "build")
    s.tick(10)
    s.do(RequestWorkflowCancel("wf"), "applied")
    s.tick(10)
    converge = ConvergeWorkflowCancel("wf", (aid,))
    s.workflow_faults(converge)
    s.expect_state("wf", run="running", build="running", test="pending")
    s.do(converge, "applied:converged")
    s.expect_state("wf", run="cancelled", build="cancelled", test="cancelled")


# -- WF-07 -------------------------------------------------------------------------------------
def _ordinary_local_running(s: WorkflowScenario, run_id: str) -> None:
    """An ordinary local Run, activated and running: what ordinary recovery must select."""
    aid = f"{run_id}-a1"
    s.do(AdmitRun(run_id, aid, "project", "task", 1, LOCAL, NO_BACKOFF), "applied")
    s.do(ActivateLocal(run_id, aid, LOCAL, 1, CALLBACK), "applied")
    s.do(RecordLocalHandle(run_id, aid, f"pid:{run_id}", s.now), "applied")


def _workflows_with_started_tasks(s: WorkflowScenario) -> None:
    steps = (step("a"), step("b"), step("c"))
    s.admit_workflow("wf", steps)
    s.tick(10)
    s.do(AdvanceFrontier("wf"), "applied")
    s.started("wf", "a")  # running
    aid = s.admit_task("wf", "b")
    s.do(s.prepare("wf", aid), "applied")  # starting
    s.admit_task("wf", "c")  # claimed, never started
    s.tick(10)
    _ordinary_local_running(s, "ordinary")


@workflow_scenario(
    "WF-07-ordinary-local-startup-selects-no-workflow",
    "WF-07: with Workflow Task Attempts running, starting and claimed, ordinary local startup "
    "recovery (and the orphaned-created and local dispatch sources) select no Workflow Run, "
    "before and after a restart; the ordinary local Run is selected. The Workflow's own "
    "recovery source selects its started Task Attempts.",
)
def wf_07(s: WorkflowScenario) -> None:
    _workflows_with_started_tasks(s)
    s.query("local_startup", ["ordinary"])
    s.reopen()
    s.tick(1_000)
    s.query("local_startup", ["ordinary"])
    s.query("local_startup", ["ordinary"], limit=1)
    s.query("orphaned_created", [], process_started_at_ms=s.now)
    s.query("local_dispatch", [], local_executor_type=LOCAL)
    s.query("cancel_convergence", [])
    s.query("task_recovery", ["wf", "wf"])
    s.query("task_dispatch", ["wf"], local_executor_type=LOCAL)


@workflow_scenario(
    "WF-07-cluster-runtime-recovery-selects-no-workflow",
    "WF-07 on the cluster source: with Workflow Task Attempts running, starting and claimed, "
    "the runtime recovery source and the lost-retry source select no Workflow Run; the ordinary "
    "started Run without a lease is selected.",
    profile=Profile.CLUSTER,
)
def wf_07_cluster(s: WorkflowScenario) -> None:
    _workflows_with_started_tasks(s)
    s.reopen()
    s.tick(1_000)
    s.query("runtime_recovery", ["ordinary"])
    s.query("lost_retry", [])


# -- WF-08 -------------------------------------------------------------------------------------
@workflow_scenario(
    "WF-08-task-recovery-by-evidence",
    "WF-08: after a restart, Workflow Task recovery resolves each started Task Attempt by its "
    "evidence: none is refused (evidence_required), unknown writes nothing, live (two "
    "consistent inspections) adopts without a write, a completion receipt completes (also for "
    "an Attempt still starting, taking the receipt's start time), trusted not-running makes "
    "the Attempt lost and the StepRun failed without a new epoch, except for an Attempt proven "
    "never launched (decision WF-6: lost, and a new ready epoch that admission gives a new "
    "Attempt). A claimed Attempt is not orphaned (decision WF-4): it stays dispatchable. "
    "Recovery never finalizes the parent; the frontier does.",
)
def wf_08(s: WorkflowScenario) -> None:
    keys = ("done", "live", "gone", "unsure", "fresh", "unlaunched", "new")
    steps = tuple(step(key) for key in keys)
    s.admit_workflow("wf", steps)
    s.tick(10)
    s.do(AdvanceFrontier("wf"), "applied")
    done, _ = s.started("wf", "done")
    live, _ = s.started("wf", "live")
    gone, _ = s.started("wf", "gone")
    unsure, _ = s.started("wf", "unsure")
    fresh = s.admit_task("wf", "fresh")
    s.do(s.prepare("wf", fresh), "applied")  # starting: the handle was never recorded
    fresh_started = s.tick(5)
    unlaunched = s.admit_task("wf", "unlaunched")
    s.do(s.prepare("wf", unlaunched), "applied")  # killed before the launch: never ran
    claimed = s.admit_task("wf", "new")
    s.tick(1_000)
    s.reopen()
    s.tick(1_000)
    s.query("task_recovery", ["wf"] * 6)
    s.query("local_startup", [])
    s.do(RecoverTaskStartup("wf", unsure), "replayed:evidence_required")
    for reason in (UnknownReason.HANDLE_MISSING, UnknownReason.INCONSISTENT_INSPECTIONS):
        s.do(RecoverTaskStartup("wf", unsure, UnknownEvidence(reason)), "rejected")
    s.do(RecoverTaskStartup("wf", live, LiveEvidence()), "replayed:live")
    done_started = s.wf("wf").attempt(done)
    assert done_started is not None
    assert done_started.started_at_ms is not None
    receipt = CompletedEvidence(CompletionOutcome.SUCCEEDED, 1, 0, done_started.started_at_ms)
    s.do(RecoverTaskStartup("wf", done, receipt), "applied:completed")
    s.do(RecoverTaskStartup("wf", done, receipt), "raced:NOT_ELIGIBLE")  # replayed: no write
    late = CompletedEvidence(CompletionOutcome.FAILED, 1, 3, fresh_started)
    s.do(RecoverTaskStartup("wf", fresh, late), "applied:completed")
    s.do(RecoverTaskStartup("wf", gone, NotRunningEvidence()), "applied:lost")
    s.do(RecoverTaskStartup("wf", claimed, NotRunningEvidence()), "raced:NOT_ELIGIBLE")
    epoch = s.version("wf", "unlaunched")
    never = RecoverTaskStartup("wf", unlaunched, NotRunningEvidence(), launched=False)
    s.do(never, "applied:lost")
    assert s.version("wf", "unlaunched") > epoch
    s.expect_state(
        "wf", run="running", done="succeeded", fresh="failed", gone="failed", new="ready",
        unlaunched="ready",
    )  # fmt: skip
    s.query("task_recovery", ["wf", "wf"])
    s.query("task_dispatch", ["wf"], local_executor_type=LOCAL)
    # (The Task admission source offering the new epoch is `never_launched_admission`'s.)
    assert len(s.wf("wf").attempts) == 7  # no new epoch but the never-launched one's
    relaunched = s.run_to_success("wf", "unlaunched")
    assert relaunched != unlaunched
    # The still-live and unsure Tasks end by their own receipts; only then the frontier ends it.
    for aid in (live, unsure):
        found = s.wf("wf").attempt(aid)
        assert found is not None
        assert found.started_at_ms is not None
        s.do(s.complete("wf", aid, found.started_at_ms), "applied:completed")
    s.do(s.prepare("wf", claimed), "applied")
    started = s.tick(5)
    s.do(s.handle("wf", claimed, started), "applied")
    s.tick(50)
    s.do(s.complete("wf", claimed, started), "applied:completed")
    s.expect_state("wf", run="running")
    s.tick(10)
    s.do(AdvanceFrontier("wf"), "applied")
    s.expect_state("wf", run="failed")


def never_launched_admission() -> Trace:
    """WF-08 with decision WF-6: the new epoch of a never-launched Task is due for admission
    (the runners' Task admission source does not count the never-launched Attempt against
    `max_attempts`, as the kernel's `retry_left` does not)."""
    s = WorkflowScenario(
        "WF-08-never-launched-task-new-epoch-is-due-for-admission",
        "WF-08, decision WF-6: a started Task Attempt proven never launched, with not-running "
        "evidence, ends lost and its StepRun gets a new ready epoch that the Task admission "
        "source offers (the never-launched Attempt does not count against max_attempts); the "
        "new Attempt then runs the step to success.",
    )
    s.admit_workflow("wf", (step("only"),))
    s.tick(10)
    s.do(AdvanceFrontier("wf"), "applied")
    aid = s.admit_task("wf", "only")
    s.do(s.prepare("wf", aid), "applied")
    s.reopen()
    s.tick(1_000)
    s.query("task_recovery", ["wf"])
    s.do(RecoverTaskStartup("wf", aid, NotRunningEvidence(), launched=False), "applied:lost")
    s.query("task_admission", ["wf"])
    relaunched = s.run_to_success("wf", "only")
    assert relaunched != aid
    s.tick(10)
    s.do(AdvanceFrontier("wf"), "applied")
    s.expect_state("wf", run="succeeded", only="succeeded")
    return s.trace()


WORKFLOW_SCENARIOS["WF-08-never-launched-task-new-epoch-is-due-for-admission"] = (
    never_launched_admission
)


# -- WF-14 -------------------------------------------------------------------------------------
@workflow_scenario(
    "WF-14-two-step-workflow-succeeds-once-per-step",
    "WF-14: a two-step Workflow (test depends on build) ends with both steps succeeded, exactly "
    "one Attempt per step, exactly two admissions and no duplicate dispatch: the replays of the "
    "Workflow admission and of each Task admission answer the existing entry, a second prepare "
    "is refused, and the dispatch source offers each Attempt once.",
)
def wf_14(s: WorkflowScenario) -> None:
    admit = s.admit_workflow("wf", TWO_STEPS)
    s.do(admit, "replayed:existing")
    s.query("workflow_frontier", ["wf"])
    s.query("task_admission", [])
    s.tick(10)
    s.do(AdvanceFrontier("wf"), "applied")
    s.expect_state("wf", run="running", build="ready", test="pending")
    for key in ("build", "test"):
        s.query("task_admission", ["wf"])
        aid = s.admit_task("wf", key)
        s.do(AdmitTask("wf", f"sr-{key}", s.version("wf", key)), "replayed:existing")
        s.query("task_admission", [])
        s.query("task_dispatch", ["wf"], local_executor_type=LOCAL)
        s.tick(10)
        s.do(s.prepare("wf", aid), "applied")
        s.do(s.prepare("wf", aid, 2), "raced:NOT_ELIGIBLE")
        s.query("task_dispatch", [], local_executor_type=LOCAL)
        started = s.tick(5)
        s.tick(10)
        s.do(s.handle("wf", aid, started), "applied")
        s.tick(100)
        s.do(s.complete("wf", aid, started), "applied:completed")
        s.expect_state("wf", run="running", **{key: "succeeded"})
        s.tick(10)
        s.do(AdvanceFrontier("wf"), "applied")
    s.expect_state("wf", run="succeeded", build="succeeded", test="succeeded")
    s.query("workflow_frontier", [])
    wf = s.wf("wf")
    assert len(wf.attempts) == 2
    assert len(wf.ledger) == 2


# -- WF-15 -------------------------------------------------------------------------------------
@workflow_scenario(
    "WF-15-cancelled-before-start-converges-at-once",
    "WF-15: a Workflow cancelled before any Task started (one with a claimed Task Attempt, one "
    "not yet through its frontier) converges to cancelled in one convergence each, without "
    "starting any Attempt; the replayed convergence writes nothing, a late prepare is refused, "
    "and ordinary startup recovery scans 0 rows.",
)
def wf_15(s: WorkflowScenario) -> None:
    s.admit_workflow("wf", TWO_STEPS)
    s.admit_workflow("wf-early", (step("only"),))
    s.tick(10)
    s.do(AdvanceFrontier("wf"), "applied")
    aid = s.admit_task("wf", "build")
    s.tick(10)
    s.do(RequestWorkflowCancel("wf"), "applied")
    s.do(RequestWorkflowCancel("wf-early"), "applied")
    s.query("workflow_cancel", ["wf", "wf-early"])
    s.query("task_dispatch", [], local_executor_type=LOCAL)
    s.query("task_admission", [])
    s.do(s.prepare("wf", aid), "rejected:CANCEL_REQUESTED")
    s.tick(10)
    s.do(ConvergeWorkflowCancel("wf"), "applied:converged")
    s.do(ConvergeWorkflowCancel("wf-early"), "applied:converged")
    s.query("workflow_cancel", [])
    s.do(ConvergeWorkflowCancel("wf"), "replayed:already_terminal")
    s.do(s.prepare("wf", aid), "rejected")
    s.query("local_startup", [])
    s.query("task_recovery", [])
    s.expect_state("wf", run="cancelled", build="cancelled", test="cancelled")
    s.expect_state("wf-early", run="cancelled", only="cancelled")
    attempt = s.wf("wf").attempt(aid)
    assert attempt is not None
    assert attempt.started_at_ms is None
    assert attempt.status.value == "cancelled"


# -- WF-16 -------------------------------------------------------------------------------------
@workflow_scenario(
    "WF-16-cancel-running-task-stops-before-convergence",
    "WF-16: cancelling a Workflow with a running and a starting Task: the convergence is refused "
    "with LIVE_EXECUTION (nothing written) until execution control names every started Attempt "
    "as stopped; then one transaction makes both Attempts, every StepRun and the parent "
    "cancelled. Task commands after the intent are refused.",
)
def wf_16(s: WorkflowScenario) -> None:
    steps = (step("a"), step("b"), step("c", "a"))
    s.admit_workflow("wf", steps)
    s.tick(10)
    s.do(AdvanceFrontier("wf"), "applied")
    a, started = s.started("wf", "a")
    b = s.admit_task("wf", "b")
    s.do(s.prepare("wf", b), "applied")
    s.tick(10)
    s.do(RequestWorkflowCancel("wf"), "applied")
    s.do(RequestWorkflowCancel("wf"), "replayed:already_applied")
    s.query("workflow_cancel", ["wf"])
    s.tick(10)
    before = s.projection()
    s.do(ConvergeWorkflowCancel("wf"), "rejected:LIVE_EXECUTION")
    s.do(ConvergeWorkflowCancel("wf", (a,)), "rejected:LIVE_EXECUTION")
    if s.projection() != before:
        raise ScenarioError("a refused convergence wrote")
    s.expect_state("wf", run="running", a="running", b="running", c="pending")
    s.tick(10)
    s.do(ConvergeWorkflowCancel("wf", (a, b)), "applied:converged")
    s.expect_state("wf", run="cancelled", a="cancelled", b="cancelled", c="cancelled")
    assert {x.status.value for x in s.wf("wf").attempts} == {"cancelled"}
    s.do(s.complete("wf", a, started), "replayed:already_terminal")
    s.query("workflow_cancel", [])


# -- WF-17 -------------------------------------------------------------------------------------
def _happy_path(s: WorkflowScenario) -> Iterator[Callable[[], WorkflowCommand]]:
    """The two-step Workflow's every write, in order, each built from the state before it."""

    def admit_task(key: str) -> WorkflowCommand:
        return AdmitTask("wf", f"sr-{key}", s.version("wf", key))

    def prepare(key: str) -> WorkflowCommand:
        return s.prepare("wf", s.attempt_of("wf", key))

    def handle(key: str) -> WorkflowCommand:
        return s.handle("wf", s.attempt_of("wf", key), s.now)

    def complete(key: str) -> WorkflowCommand:
        aid = s.attempt_of("wf", key)
        attempt = s.wf("wf").attempt(aid)
        assert attempt is not None
        assert attempt.started_at_ms is not None
        return s.complete("wf", aid, attempt.started_at_ms)

    yield lambda: AdmitWorkflow("wf", "project", "wf", plan_digest("wf"), TWO_STEPS)
    yield lambda: AdvanceFrontier("wf")
    for key in ("build", "test"):
        for build in (admit_task, prepare, handle, complete):
            yield functools.partial(build, key)
        yield lambda: AdvanceFrontier("wf")


def _no_crash_final() -> Projection:
    s = WorkflowScenario("no-crash", "")
    for build in _happy_path(s):
        s.tick(100)
        s.do(build(), "applied")
    return s.projection()


def _equals_no_crash(s: WorkflowScenario) -> None:
    s.expect_state("wf", run="succeeded", build="succeeded", test="succeeded")
    if s.projection() != _no_crash_final():
        raise ScenarioError(f"{s.recorder.header.name}: final state differs from the no-crash one")


@workflow_scenario(
    "WF-17-lost-response-and-reopen-at-every-step-then-exact-replay",
    "WF-17: every write of a two-step Workflow (admission, frontier, Task admission, prepare, "
    "handle, completion, frontier) commits and loses its response (a kill after commit), the "
    "runner reopens, and the exact command is replayed: each replay writes nothing, and the "
    "final state equals the no-crash state (no duplicate admission, Attempt or dispatch).",
)
def wf_17_after(s: WorkflowScenario) -> None:
    for build in _happy_path(s):
        s.tick(100)
        command = build()
        s.do(command, "applied", fault=CRASH_AFTER)  # committed; the caller saw nothing
        s.reopen()
        after = s.projection()
        result = s.do(command, None, at=s.now + 1)
        if result.kind == "applied" or s.projection() != after:
            raise ScenarioError(f"the replay of {command.name} wrote")
    _equals_no_crash(s)


@workflow_scenario(
    "WF-17-kill-before-commit-and-reopen-at-every-step-then-redelivery",
    "WF-17: every write of a two-step Workflow is killed before its commit (nothing written), "
    "the runner reopens and the command is delivered again, then once more as a duplicate: the "
    "final state equals the no-crash state.",
    profile=Profile.STANDALONE,
)
def wf_17_before(s: WorkflowScenario) -> None:
    for build in _happy_path(s):
        s.tick(100)
        command = build()
        before = s.projection()
        s.do(command, "crashed", fault=CRASH_BEFORE)
        if s.projection() != before:
            raise ScenarioError(f"a crash before the commit of {command.name} wrote")
        s.reopen()
        # Delivered twice: the first applies, the duplicate (whose answer the step shows) not.
        again = s.do(command, None, fault=Fault(FaultKind.DUPLICATE_DELIVERY))
        if again.kind == "applied" or s.projection() == before:
            raise ScenarioError(f"{command.name}: not applied exactly once")
    _equals_no_crash(s)


# -- WF-18 -------------------------------------------------------------------------------------
@workflow_scenario(
    "WF-18-lost-completion-and-convergence-responses-replayed",
    "WF-18: the response of a Task completion, of the frontier that ends the parent and of a "
    "cancellation convergence is lost (committed, then the runner reopens, as after a failover); "
    "each replay answers already_terminal and writes nothing.",
)
def wf_18(s: WorkflowScenario) -> None:
    s.admit_workflow("wf", (step("only"),))
    s.tick(10)
    s.do(AdvanceFrontier("wf"), "applied")
    aid, started = s.started("wf", "only")
    s.tick(100)
    completion = s.complete("wf", aid, started)
    s.do(completion, "applied:completed", fault=CRASH_AFTER)
    s.reopen()
    s.do(completion, "replayed:already_terminal")
    s.do(completion, "replayed:already_terminal", fault=Fault(FaultKind.DUPLICATE_DELIVERY))
    s.tick(10)
    s.do(AdvanceFrontier("wf"), "applied", fault=CRASH_AFTER)
    s.reopen()
    s.do(AdvanceFrontier("wf"), "replayed:already_terminal")
    s.expect_state("wf", run="succeeded")
    s.admit_workflow("wf-cancel", TWO_STEPS)
    s.tick(10)
    s.do(AdvanceFrontier("wf-cancel"), "applied")
    running, _ = s.started("wf-cancel", "build")
    s.do(RequestWorkflowCancel("wf-cancel"), "applied")
    s.tick(10)
    converge = ConvergeWorkflowCancel("wf-cancel", (running,))
    s.do(converge, "applied:converged", fault=CRASH_AFTER)
    s.reopen()
    s.do(converge, "replayed:already_terminal")
    s.do(AdvanceFrontier("wf-cancel"), "replayed:already_terminal")
    s.expect_state("wf-cancel", run="cancelled", build="cancelled", test="cancelled")


# -- WF-19 -------------------------------------------------------------------------------------
@workflow_scenario(
    "WF-19-task-admission-atomic-and-exact-replay",
    "WF-19 (a PostgreSQL property; every runner replays it): a crash before commit or an I/O "
    "error at any statement of the Workflow admission and of a Task Attempt admission leaves no "
    "row (no StepRun, ledger entry, Attempt or Event without the others); the clean admission "
    "applies once; its exact replay, also after a lost response, returns the existing entry; an "
    "admission at a stale epoch is refused.",
    profile=Profile.CLUSTER,
)
def wf_19(s: WorkflowScenario) -> None:
    admit = AdmitWorkflow("wf", "project", "wf", plan_digest("wf"), TWO_STEPS)
    s.workflow_faults(admit)
    s.do(admit, "applied:admitted")
    s.tick(10)
    s.do(AdvanceFrontier("wf"), "applied")
    version = s.version("wf", "build")
    task = AdmitTask("wf", "sr-build", version)
    s.tick(10)
    s.workflow_faults(task)
    s.do(task, "applied:admitted", fault=CRASH_AFTER)
    s.do(task, "replayed:existing")
    s.reopen()
    s.do(task, "replayed:existing")
    s.do(AdmitTask("wf", "sr-build", version + 1), "raced:STEP_RUN_EPOCH_MISMATCH")
    s.do(AdmitTask("wf", "sr-test", s.version("wf", "test")), "raced:NOT_ELIGIBLE")
    wf = s.wf("wf")
    assert len(wf.ledger) == 1
    assert len(wf.attempts) == 1


# -- seeded random Workflows -------------------------------------------------------------------
OUTCOMES = {CompletionOutcome.SUCCEEDED: 8, CompletionOutcome.FAILED: 2}


def random_workflow(seed: int) -> Trace:
    """A random plan of 1..4 steps driven by random eligible commands, with random lost
    responses, reopens and duplicates, until the Workflow ends (or 80 steps)."""
    rng = random.Random(seed)
    keys = [f"s{i}" for i in range(rng.randint(1, 4))]
    steps = tuple(
        step(key, *rng.sample(keys[:i], rng.randint(0, min(i, 2))), max_attempts=rng.randint(1, 2))
        for i, key in enumerate(keys)
    )
    name = f"random-{seed}"
    s = WorkflowScenario(name, f"a random Workflow of {len(steps)} steps, seed {seed}")
    s.recorder.header = dataclasses.replace(s.recorder.header, seed=seed)
    s.admit_workflow("wf", steps)
    cancel = rng.random() < 0.25
    for _ in range(80):
        s.tick(rng.choice((1, 10, 100)))
        wf = s.wf("wf")
        if wf.run.status.terminal:
            break
        menu: list[WorkflowCommand] = [AdvanceFrontier("wf")]
        for sr in wf.step_runs:
            if sr.status.value == "ready" and not any(
                e.step_run_id == sr.step_run_id and e.step_run_version == sr.version
                for e in wf.ledger
            ):
                menu.append(AdmitTask("wf", sr.step_run_id, sr.version))
        for a in wf.attempts:
            match a.status.value:
                case "claimed":
                    menu.append(s.prepare("wf", a.attempt_id))
                case "starting" if rng.random() < 0.15:
                    menu.append(FailTaskStart("wf", a.attempt_id))
                case "starting":
                    menu.append(s.handle("wf", a.attempt_id, s.now))
                case "running" if rng.random() < 0.1:
                    menu.append(TimeOutTask("wf", a.attempt_id))
                case "running":
                    # Mostly successes, so that many random Workflows reach their later steps.
                    outcome = rng.choices(list(OUTCOMES), weights=list(OUTCOMES.values()))[0]
                    assert a.started_at_ms is not None
                    menu.append(s.complete("wf", a.attempt_id, a.started_at_ms, outcome))
        if cancel and rng.random() < 0.1:
            menu.append(RequestWorkflowCancel("wf"))
        if wf.run.has_cancel_intent:
            stopped = tuple(a.attempt_id for a in wf.attempts if a.status.value == "running")
            menu.append(ConvergeWorkflowCancel("wf", stopped))
        command = rng.choice(menu)
        roll = rng.random()
        if roll < 0.1:
            s.reopen()
        fault = None
        if roll > 0.9:
            fault = rng.choice((CRASH_AFTER, CRASH_BEFORE, Fault(FaultKind.DUPLICATE_DELIVERY)))
        s.do(command, None, fault=fault)
    return s.trace()


def generated() -> Iterator[tuple[str, Trace]]:
    for seed in GENERATED_SEEDS:
        yield f"generated/random-{seed}.jsonl.gz", random_workflow(seed)


def named() -> Iterator[tuple[str, Trace]]:
    for name, build in WORKFLOW_SCENARIOS.items():
        yield f"{name}.jsonl", build()
