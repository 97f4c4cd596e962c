"""Breadth-first exploration of the Workflow kernel (SPEC §4, ADR-0229) from nothing, through
`kernel.workflow.apply_workflow` only.

`enumerate_workflow_commands` lists a fixed, finite menu of Workflow commands for a state: every
Workflow command type in every state (from nothing too, where all but admission must be
refused), with the plausible arguments that state offers (each StepRun id at its current and its
stale epoch, each Task Attempt id, receipts and recovery evidence of every outcome and kind,
convergence with and without the stops, both intents) and a made-up id where the state has no
StepRun or Attempt yet. `explore_workflows` applies every menu item at two clock values, one step
on (explored further) and one step back (a clock regression, WF-12: tried, never explored), and
visits each distinct resulting aggregate once, up to a depth. The result is every
(state, command, time, outcome) step seen, which the Workflow table walks use
(`tests/test_state_tables.py`). Nothing here decides anything: the kernel does.

Three fixed plans: one step; two steps `a -> b`; one step with `max_attempts = 2` (the retry
epoch, decision WF-3). The deepest edge (a started Task converged under a deadline intent, and
the frontier finishing a Workflow) needs seven applied commands, hence `WORKFLOW_DEPTH`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import icontract

from kernel.commands import LocalReceipt
from kernel.evidence import (
    CompletedEvidence,
    Evidence,
    LiveEvidence,
    NotRunningEvidence,
    UnknownEvidence,
)
from kernel.specs.states import (
    AttemptStatus,
    CancelReason,
    CompletionOutcome,
    RunStatus,
    UnknownReason,
)
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
    WorkflowOutcome,
    apply_workflow,
)

__all__ = [
    "CALLBACK_DIGEST",
    "CLOCK_STEPS",
    "EXECUTOR",
    "PLANS",
    "RUN_ID",
    "START_MS",
    "WORKFLOW_DEPTH",
    "StoredStep",
    "WorkflowExploration",
    "WorkflowStep",
    "admit_command",
    "digest_of",
    "enumerate_workflow_commands",
    "explore_workflows",
    "stored_status_steps",
]

RUN_ID: Final = "wf-1"
EXECUTOR: Final = "local-shell"
START_MS: Final = 1_700_000_000_000
#: The callback token digest every prepare commits and every receipt carries (the kernel only
#: ever sees the SHA-256 of the token, L3).
CALLBACK_DIGEST: Final = hashlib.sha256(b"workflow-explore-callback").hexdigest()
#: One step on (explored) and one step back (a clock regression: tried, never explored).
CLOCK_STEPS: Final = (1, -1)
WORKFLOW_DEPTH: Final = 7
#: Stands for "no such Task Attempt" where a state has none: a well-formed `wta:` id.
NO_ATTEMPT: Final = "wta:" + "0" * 32
NO_STEP_RUN: Final = f"{RUN_ID}-a"


def digest_of(name: str) -> str:
    """A plan digest for a named fixed plan (any 64 lowercase hex is a well-formed digest)."""
    return hashlib.sha256(f"workflow-explore-plan:{name}".encode()).hexdigest()


def _pin(key: str, depends_on: tuple[str, ...] = (), max_attempts: int = 1) -> PinnedStep:
    return PinnedStep(
        step_key=key,
        step_run_id=f"{RUN_ID}-{key}",
        task_id=f"task-{key}",
        task_revision=1,
        executor_type=EXECUTOR,
        depends_on=depends_on,
        max_attempts=max_attempts,
    )


#: The fixed plans, by name: one step; `a -> b`; one step with a retry left (WF-3).
PLANS: Final[dict[str, tuple[PinnedStep, ...]]] = {
    "one": (_pin("a"),),
    "chain": (_pin("a"), _pin("b", ("a",))),
    "retry": (_pin("a", max_attempts=2),),
}


def admit_command(plan: str) -> AdmitWorkflow:
    return AdmitWorkflow(
        run_id=RUN_ID,
        project_id="proj",
        plan_name=f"plan-{plan}",
        plan_digest=digest_of(plan),
        steps=PLANS[plan],
    )


def _evidences(sequence: int, started: int | None) -> tuple[Evidence | None, ...]:
    """Every evidence kind (§2.1) for a Task Attempt: none, the two inspections' verdicts, an
    unknown one, and a receipt of every outcome with the Attempt's callback sequence."""
    return (
        None,
        NotRunningEvidence(),
        LiveEvidence(),
        UnknownEvidence(UnknownReason.PROBE_FAILED),
        *(CompletedEvidence(outcome, sequence, 0, started) for outcome in CompletionOutcome),
    )


def enumerate_workflow_commands(wf: WorkflowAggregate | None) -> Iterator[WorkflowCommand]:
    """The finite Workflow command menu for one state: every command type, with the arguments
    the state offers (see the module docstring)."""
    for plan in PLANS:  # from nothing: three admissions; later: one replay, two conflicts
        yield admit_command(plan)
    yield AdvanceFrontier(RUN_ID)
    steps = [(s.step_run_id, s.version) for s in wf.step_runs] if wf is not None else []
    for step_run_id, version in steps or [(NO_STEP_RUN, 1)]:
        for epoch in sorted({version, max(version - 1, 1)}, reverse=True):  # current, stale
            yield AdmitTask(RUN_ID, step_run_id, epoch)
    attempts = [
        (a.attempt_id, a.callback_sequence, a.started_at_ms, a.created_at_ms)
        for a in (wf.attempts if wf is not None else ())
    ]
    for attempt_id, sequence, started_at, created_at in attempts or [
        (NO_ATTEMPT, 0, None, START_MS)
    ]:
        # The handle fact: the recorded one, else the earliest valid (the Attempt's creation).
        started = started_at if started_at is not None else created_at
        yield PrepareTask(RUN_ID, attempt_id, EXECUTOR, sequence + 1, CALLBACK_DIGEST)
        yield RecordTaskHandle(RUN_ID, attempt_id, "pid:7", started)
        yield FailTaskStart(RUN_ID, attempt_id)
        for outcome in CompletionOutcome:
            receipt = LocalReceipt(
                RUN_ID, attempt_id, sequence, CALLBACK_DIGEST, outcome, started, 0
            )
            yield CompleteTask(RUN_ID, attempt_id, receipt)
        yield TimeOutTask(RUN_ID, attempt_id)
        for evidence in _evidences(sequence, started_at):
            yield RecoverTaskStartup(RUN_ID, attempt_id, evidence)
    for reason in (CancelReason.USER, CancelReason.TIMEOUT):
        yield RequestWorkflowCancel(RUN_ID, reason)
    yield ConvergeWorkflowCancel(RUN_ID)
    started_ids = tuple(
        a.attempt_id
        for a in (wf.attempts if wf is not None else ())
        if a.status in (AttemptStatus.STARTING, AttemptStatus.RUNNING)
    )
    if started_ids:
        yield ConvergeWorkflowCancel(RUN_ID, started_ids)


#: One tried step: the state before (None: nothing yet), the command, the time, the outcome.
WorkflowStep = tuple[WorkflowAggregate | None, WorkflowCommand, int, WorkflowOutcome]


@dataclass
class WorkflowExploration:
    states: int = 0
    steps: list[WorkflowStep] = field(default_factory=list)
    depth_reached: int = 0


def explore_workflows(
    max_depth: int = WORKFLOW_DEPTH, max_states: int = 100_000
) -> WorkflowExploration:
    """Visit every Workflow aggregate reachable within `max_depth` applied commands (at the
    onward clock step), trying the whole menu at both clock values in each."""
    result = WorkflowExploration()
    seen: set[WorkflowAggregate] = set()
    queue: deque[tuple[WorkflowAggregate | None, int, int]] = deque([(None, START_MS, 0)])
    while queue:
        wf, now, depth = queue.popleft()
        result.states += 1
        result.depth_reached = max(result.depth_reached, depth)
        for command in enumerate_workflow_commands(wf):
            for step in CLOCK_STEPS:
                at = now + step
                outcome = apply_workflow(wf, command, at)
                result.steps.append((wf, command, at, outcome))
                if step < 0 or not isinstance(outcome, WorkflowApplied):
                    continue
                if depth + 1 > max_depth or outcome.aggregate in seen:
                    continue
                if len(seen) >= max_states:
                    continue
                # Every Event time is the observation time, so the aggregate carries its clock.
                seen.add(outcome.aggregate)
                queue.append((outcome.aggregate, at, depth + 1))
    return result


#: A step on a stored aggregate: the outcome, or the precondition's refusal when the stored
#: aggregate breaks the Workflow invariants (a storage error, never a domain result).
StoredStep = tuple[
    WorkflowAggregate, WorkflowCommand, int, WorkflowOutcome | icontract.ViolationError
]


def stored_status_steps(exploration: WorkflowExploration) -> list[StoredStep]:
    """Steps only stored data reaches: a Workflow Run in a Run status the exploration never saw
    (a Workflow is admitted `running` and leaves it only for a terminal status, I-W3, so
    `created`, `queued`, `dispatching`, `lost` and `retry_wait` are never reached). For each
    such status and each command type, the first step of that type that applied on a `running`
    parent (the first one tried there, for `admit_workflow`, which applies only from nothing)
    is tried again with only the parent's status replaced."""
    reached = {wf.run.status for wf, _command, _at, _outcome in exploration.steps if wf is not None}
    firsts: dict[str, WorkflowStep] = {}
    for step in exploration.steps:
        wf, command, _at, outcome = step
        if wf is None or wf.run.status is not RunStatus.RUNNING:
            continue
        known = firsts.get(command.name)
        if known is None or (
            isinstance(outcome, WorkflowApplied) and not isinstance(known[3], WorkflowApplied)
        ):
            firsts[command.name] = step
    out: list[StoredStep] = []
    for status in RunStatus:
        if status in reached:
            continue
        for wf, command, at, _outcome in firsts.values():
            assert wf is not None
            run = dataclasses.replace(wf.run, status=status)
            stored = dataclasses.replace(wf, core=dataclasses.replace(wf.core, run=run))
            try:
                result: WorkflowOutcome | icontract.ViolationError = apply_workflow(
                    stored, command, at
                )
            except icontract.ViolationError as refused:
                result = refused
            out.append((stored, command, at, result))
    return out
