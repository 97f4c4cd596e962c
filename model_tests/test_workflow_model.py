"""The Workflow model (SPEC §4, issue 18 item 2) under the active Hypothesis profile, with a few
directed examples and the WF-06 differential.

`ci` (the default, derandomized): `WorkflowMachine` runs its `WORKFLOW_BUDGETS["ci"]` row
(150 examples of 80 steps); the figures (steps, commands, invariant checks, seconds) are
printed by the last test and in the "model checking" summary. `deep`
(`QL3_HYPOTHESIS_PROFILE=deep`) runs the larger row, randomized.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import Applied, RunAggregate, apply
from kernel.commands import LocalReceipt
from kernel.evidence import LiveEvidence, NotRunningEvidence, UnknownEvidence
from kernel.identity import workflow_task_attempt_id
from kernel.specs.codes import Code
from kernel.specs.states import AttemptStatus, CompletionOutcome, RunStatus, UnknownReason
from kernel.specs.workflow import StepRunStatus
from kernel.workflow import (
    AdmitTask,
    AdvanceFrontier,
    CompleteTask,
    PrepareTask,
    RecordTaskHandle,
    RecoverTaskStartup,
    WorkflowAggregate,
    WorkflowApplied,
    WorkflowCommand,
    apply_workflow,
)
from model_tests.harness import STATS
from model_tests.quality import mutants as scripts
from model_tests.workflow_machine import (
    NAME,
    START_MS,
    StepShape,
    WorkflowMachine,
    plan_command,
    workflow_settings,
)

pytestmark = pytest.mark.slow  # model checking: ~12,000 state-machine steps (10-20 s)

TIMED: dict[str, float] = {}
TOKEN = hashlib.sha256(b"directed-token").hexdigest()


@pytest.mark.spec("WF-04", "WF-05", "WF-08", "WF-10", "WF-11", "WF-12", "WF-16", "WF-17", "WF-18")
class TestWorkflowMachine(WorkflowMachine.TestCase):  # type: ignore[misc,valid-type]
    """Random DAG plans, several Workflows, every command, crash windows and restarts."""

    settings = workflow_settings()

    def runTest(self) -> None:
        counts = STATS.of(NAME)
        before = counts.steps
        started = time.perf_counter()
        try:
            super().runTest()
        finally:
            TIMED["seconds"] = TIMED.get("seconds", 0.0) + time.perf_counter() - started
            TIMED["steps"] = TIMED.get("steps", 0) + counts.steps - before


# -- directed examples ---------------------------------------------------------------------------
class Script:
    """One Workflow driven command by command through `apply_workflow` and its effects."""

    def __init__(self, shapes: Sequence[StepShape]) -> None:
        self.admission = plan_command("wfd", tuple(shapes))
        self.wf: WorkflowAggregate | None = None
        self.at = START_MS

    def do(self, command: WorkflowCommand, at: int | None = None) -> object:
        outcome = apply_workflow(self.wf, command, self.at if at is None else at)
        if isinstance(outcome, WorkflowApplied):
            self.wf = outcome.aggregate
        return outcome

    @property
    def agg(self) -> WorkflowAggregate:
        assert self.wf is not None
        return self.wf

    def ready_attempt(self, index: int = 0) -> str:
        """Frontier, admission of step `index` at its epoch; the Attempt id."""
        self.do(AdvanceFrontier("wfd"))
        step = self.agg.step_runs[index]
        outcome = self.do(AdmitTask("wfd", step.step_run_id, step.version))
        assert isinstance(outcome, WorkflowApplied)
        return self.agg.attempts[-1].attempt_id

    def running(self, index: int = 0, started_at: int = START_MS) -> str:
        attempt_id = self.ready_attempt(index)
        assert isinstance(
            self.do(PrepareTask("wfd", attempt_id, "local", 1, TOKEN)), WorkflowApplied
        )
        self.at += 5
        handle = RecordTaskHandle("wfd", attempt_id, "pid:1", started_at)
        assert isinstance(self.do(handle), WorkflowApplied)
        return attempt_id


def _admitted(shapes: Sequence[StepShape]) -> Script:
    script = Script(shapes)
    assert isinstance(script.do(script.admission), WorkflowApplied)
    return script


ONE = (StepShape((), 1, 0),)
TWO = (StepShape((), 1, 0), StepShape((0,), 1, 0))


@pytest.mark.spec("WF-17", "WF-10")
def test_admission_replay_returns_the_entry_and_no_second_attempt() -> None:
    script = _admitted(ONE)
    attempt_id = script.ready_attempt()
    step = script.agg.step_runs[0]
    expected = workflow_task_attempt_id(script.admission.plan_digest, step.step_run_id, 2)
    assert attempt_id == expected
    again = script.do(AdmitTask("wfd", step.step_run_id, step.version))
    assert (again.kind.value, again.code) == ("replayed", Code.EXISTING)  # type: ignore[attr-defined]
    stale = script.do(AdmitTask("wfd", step.step_run_id, 1))
    assert stale.kind.value == "raced"  # type: ignore[attr-defined]
    assert len(script.agg.attempts) == len(script.agg.ledger) == 1


@pytest.mark.spec("WF-04")
def test_prepare_twice_dispatches_once() -> None:
    script = _admitted(ONE)
    attempt_id = script.ready_attempt()
    first = script.do(PrepareTask("wfd", attempt_id, "local", 1, TOKEN))
    second = script.do(PrepareTask("wfd", attempt_id, "local", 2, TOKEN))
    assert isinstance(first, WorkflowApplied)
    assert second.kind.value != "applied"  # type: ignore[attr-defined]
    assert script.agg.attempts[0].status is AttemptStatus.STARTING


@pytest.mark.spec("WF-12")
def test_clock_regression_and_early_start_are_rejected_without_writing() -> None:
    script = _admitted(TWO)
    script.at += 100
    attempt_id = script.ready_attempt()
    before = script.wf
    regressed = script.do(AdvanceFrontier("wfd"), at=START_MS - 1)
    assert regressed.kind.value in ("rejected", "raced")  # type: ignore[attr-defined]
    prepared = script.do(PrepareTask("wfd", attempt_id, "local", 1, TOKEN), at=START_MS + 50)
    assert (prepared.kind.value, prepared.code) == (  # type: ignore[attr-defined]
        "rejected",
        Code.CLOCK_REGRESSION,
    )
    assert script.wf is before
    assert isinstance(script.do(PrepareTask("wfd", attempt_id, "local", 1, TOKEN)), WorkflowApplied)
    created = script.agg.attempts[0].created_at_ms
    early = script.do(RecordTaskHandle("wfd", attempt_id, "pid:1", created - 1))
    assert early.kind.value == "rejected"  # type: ignore[attr-defined]
    assert script.agg.attempts[0].started_at_ms is None


@pytest.mark.spec("WF-11")
def test_the_handle_fact_is_the_start_time_and_its_receipt_is_accepted() -> None:
    script = _admitted(ONE)
    started = START_MS + 102  # after the Attempt's creation, before the handle is recorded
    script.at += 100
    attempt_id = script.running(started_at=started)
    attempt = script.agg.attempts[0]
    assert attempt.started_at_ms == script.agg.step_runs[0].started_at_ms == started
    receipt = LocalReceipt("wfd", attempt_id, 1, TOKEN, CompletionOutcome.SUCCEEDED, started, 0)
    done = script.do(CompleteTask("wfd", attempt_id, receipt))
    assert isinstance(done, WorkflowApplied)
    assert script.agg.step_runs[0].status is StepRunStatus.SUCCEEDED
    assert script.agg.run.status is RunStatus.RUNNING  # only the frontier ends it (I-W3)
    assert isinstance(script.do(AdvanceFrontier("wfd")), WorkflowApplied)
    assert script.agg.run.status.value == "succeeded"


@pytest.mark.spec("WF-08")
def test_recovery_by_evidence_never_finalizes_the_parent() -> None:
    script = _admitted(TWO)
    claimed = script.ready_attempt()
    untouched = script.wf
    assert script.do(RecoverTaskStartup("wfd", claimed)).kind.value == "raced"  # type: ignore[attr-defined]
    assert script.wf is untouched  # decision WF-4: a claimed Attempt stays dispatchable
    script.do(PrepareTask("wfd", claimed, "local", 1, TOKEN))
    unknown = UnknownEvidence(UnknownReason.PROBE_FAILED)
    before = script.wf
    assert script.do(RecoverTaskStartup("wfd", claimed, unknown)).kind.value == "rejected"  # type: ignore[attr-defined]
    assert script.do(RecoverTaskStartup("wfd", claimed, LiveEvidence())).kind.value == "replayed"  # type: ignore[attr-defined]
    assert script.wf is before
    lost = script.do(RecoverTaskStartup("wfd", claimed, NotRunningEvidence()))
    assert isinstance(lost, WorkflowApplied)
    assert script.agg.attempts[0].status is AttemptStatus.LOST
    assert script.agg.step_runs[0].status is StepRunStatus.FAILED
    assert script.agg.run.status is RunStatus.RUNNING


# -- WF-06: ordinary Runs with and without Workflows present ---------------------------------------
ORDINARY_SCRIPTS = {
    "requeued": scripts.requeued,
    "exhaustion": scripts._probe_exhaustion,
    "cancel_converge": scripts._probe_converge,
    "revoked": scripts._probe_revoked,
    "completion_replay": scripts._probe_completion_with_older_fence,
    "intent_over_retry": scripts._probe_intent,
    "backoff": scripts._probe_early,
}


def _ordinary(
    script: Sequence[scripts.Step], workflow_before: Sequence[int]
) -> tuple[list[str], RunAggregate | None]:
    """Run the ordinary commands through `kernel.apply` with a shared store; before step i
    `workflow_before[i]` Workflow commands of a running Workflow are applied (0 everywhere:
    no Workflow present)."""
    store: dict[str, RunAggregate | WorkflowAggregate] = {}
    wf_machine = WorkflowMachine()
    seen: list[str] = []
    for i, (at, command) in enumerate(script):
        wf_machine.now = max(wf_machine.now, at)
        for n in range(workflow_before[i] if i < len(workflow_before) else 0):
            if not wf_machine.store:
                wf_machine.deliver(plan_command("wfx", TWO_STEPS))
            else:
                wf = wf_machine.store["wfx"]
                wf_machine.deliver(wf_machine.natural(wf, n + i))
            store["wfx"] = wf_machine.store["wfx"]
        assert not isinstance(command, WorkflowCommand)  # the scripts are ordinary ones
        before = store.get(command.run_id)
        assert not isinstance(before, WorkflowAggregate)
        outcome = apply(before, command, at)
        seen.append(f"{command.name} {outcome.kind.value} {outcome.code.value}")
        if isinstance(outcome, Applied):
            store[command.run_id] = outcome.aggregate
    final = store.get(scripts.RUN)
    assert not isinstance(final, WorkflowAggregate)
    return seen, final


TWO_STEPS = (StepShape((), 2, 0), StepShape((0,), 1, 0))


@pytest.mark.spec("WF-06")
@settings(max_examples=40)
@given(
    name=st.sampled_from(sorted(ORDINARY_SCRIPTS)),
    interleave=st.lists(st.integers(0, 3), min_size=1, max_size=8),
)
def test_ordinary_runs_behave_identically_with_workflows_present(
    name: str, interleave: list[int]
) -> None:
    script = ORDINARY_SCRIPTS[name]()
    alone = _ordinary(script, [0] * len(script))
    mixed = _ordinary(script, interleave)
    assert mixed == alone
    assert alone[1] is not None


# -- figures -----------------------------------------------------------------------------------
@pytest.mark.spec("WF-04")
def test_workflow_model_figures() -> None:
    """The budgeted run happened in this session (else it runs here) and reached the late
    states: completions, convergences, recoveries and replays; prints the figures."""
    if "steps" not in TIMED:
        from hypothesis.stateful import run_state_machine_as_test  # noqa: PLC0415

        started = time.perf_counter()
        before = STATS.of(NAME).steps
        run_state_machine_as_test(WorkflowMachine, settings=workflow_settings())
        TIMED["seconds"] = time.perf_counter() - started
        TIMED["steps"] = STATS.of(NAME).steps - before
    counts = STATS.of(NAME)
    outcomes = {k: v for k, v in STATS.outcomes.items() if k.startswith(f"{NAME} ")}

    def seen(prefix: str) -> int:
        return sum(v for k, v in outcomes.items() if k.startswith(f"{NAME} {prefix}"))

    print(
        f"\nworkflow model ({settings.get_current_profile_name()}): {int(TIMED['steps'])} steps, "
        f"{counts.commands} commands, {counts.invariant_checks} invariant checks in "
        f"{TIMED['seconds']:.1f} s; completions {seen('complete_task applied')}, "
        f"convergences {seen('converge_workflow_cancel applied')}, "
        f"recoveries {seen('recover_task_startup applied')}, "
        f"lost responses replayed {seen('lost response')}"
    )
    assert counts.invariant_checks > counts.steps > 0
    assert seen("complete_task applied") > 0
    assert seen("converge_workflow_cancel applied") > 0
    assert seen("recover_task_startup applied") > 0
    assert seen("lost response") > 0
    assert seen("admit_task replayed") > 0


def test_directed_script_replays_are_stable() -> None:
    """The directed `Script` helper itself: the same commands give the same aggregate."""
    first, second = _admitted(TWO), _admitted(TWO)
    first.ready_attempt()
    second.ready_attempt()
    assert dataclasses.asdict(first.agg) == dataclasses.asdict(second.agg)
