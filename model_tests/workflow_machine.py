"""A Hypothesis `RuleBasedStateMachine` model of local Workflows (SPEC §4, ADR-0229; issue 18
item 2).

`WorkflowMachine` admits one to three Workflows over random DAG plans (1-6 steps, each depending
on a random subset of the earlier ones, `max_attempts` 1-3, a retry backoff of 0 or 50 ms) and
drives them with every Workflow command the kernel has: admission and its exact replay (and a
conflicting plan), the frontier, Task admission (the current epoch, a stale one, an exact
replay), prepare (also a second prepare of the same Attempt), the spawn, the handle (also one
dated before the Attempt's creation), process exits with each outcome and the completion with a
receipt built from the Attempt's callback digest (also a forged one), start failures, timeouts
(after the stop), cancellation requests at any point, convergence with and without the stops,
crash windows and restarts:

- crash before commit: the transaction's effects are lost, the store keeps the old aggregate
  (and the oracle its old model);
- crash after commit (a lost response): the effects are kept and the same command is replayed,
  which must be `replayed` or `raced` and change nothing (WF-17, WF-18);
- restart: every Task Attempt is resolved through `RecoverTaskStartup` with the evidence the
  machine knows to be true of its process (a receipt if the process finished, `live` while it
  runs, `not_running` when it never ran or was killed, `unknown` now and then); a `claimed` one
  must not be touched (decision WF-4);
- a clock regression: a command observed before the Workflow's last write (WF-12).

The store is the reference model of a runner, not a runner: `apply_workflow` decides, the
effects are applied with `apply_workflow_effects` exactly as SQL would, and the result must be
the aggregate the kernel returned (I-W4).

After every command the outcome kind and the resulting statuses are compared with the
independent oracle (`model_tests.workflow_oracle`); after every step the machine checks its own
§4.9 invariants on every stored aggregate, written without the kernel's predicates (I-W1..I-W3,
I-W5, I-W6; I-W2's "dispatched at most once" by counting applied prepares), and, unless
`KERNEL_PREDICATES` is off (the quality tier's "models alone" mode),
`kernel.workflow.check_workflow_invariants` and `workflow_step_violations` too. Every failure
raises `ModelViolation` naming a registered SPEC id. Counters go to `model_tests.harness.STATS`
under "workflow" (steps, commands, invariant checks), printed in the model checking summary.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kernel.commands import LocalReceipt
from kernel.evidence import (
    CompletedEvidence,
    Evidence,
    LiveEvidence,
    NotRunningEvidence,
    UnknownEvidence,
)
from kernel.identity import PORTABLE_ID_RE, workflow_task_attempt_id
from kernel.specs.states import (
    AttemptStatus,
    CancelReason,
    CompletionOutcome,
    RunStatus,
    UnknownReason,
)
from kernel.specs.workflow import StepRunStatus
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
    apply_workflow_effects,
    check_workflow_invariants,
    workflow_step_violations,
)
from model_tests.harness import STATS, ModelViolation, require
from model_tests.workflow_oracle import OWorkflow, Prediction, WorkflowOracle

__all__ = [
    "START_MS",
    "WORKFLOW_BUDGETS",
    "WorkflowMachine",
    "plan_command",
    "workflow_settings",
]

NAME: Final = "workflow"
START_MS: Final = 1_000_000
PROJECT: Final = "proj"
LOCAL: Final = "local"
WTA_RE: Final = re.compile(r"^wta:[0-9a-f]{32}$")
_STARTED: Final = frozenset({AttemptStatus.STARTING, AttemptStatus.RUNNING})
_ATTEMPT_FINAL: Final = frozenset(
    {
        AttemptStatus.SUCCEEDED,
        AttemptStatus.FAILED,
        AttemptStatus.CANCELLED,
        AttemptStatus.TIMED_OUT,
        AttemptStatus.LOST,
    }
)
_STEP_FINAL: Final = frozenset(
    {
        StepRunStatus.SUCCEEDED,
        StepRunStatus.FAILED,
        StepRunStatus.CANCELLED,
        StepRunStatus.TIMED_OUT,
    }
)
# The commands that may end the parent (I-W3): the frontier and the convergence, nothing else.
_PARENT_ENDERS: Final = (AdvanceFrontier, ConvergeWorkflowCancel)
# The SPEC id a disagreement with the oracle is reported under, by command.
_SPEC_OF: Final[dict[type, str]] = {
    AdmitWorkflow: "WF-17",
    AdvanceFrontier: "WF-05",
    AdmitTask: "WF-17",
    PrepareTask: "WF-04",
    RecordTaskHandle: "WF-11",
    FailTaskStart: "WF-05",
    CompleteTask: "WF-11",
    TimeOutTask: "WF-05",
    RequestWorkflowCancel: "WF-16",
    ConvergeWorkflowCancel: "WF-16",
    RecoverTaskStartup: "WF-08",
}


# -- budgets -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class WorkflowBudget:
    examples: int
    steps: int


WORKFLOW_BUDGETS: Final[dict[str, WorkflowBudget]] = {
    # ci: deterministic; about 12,000 steps in well under a minute on one core.
    "ci": WorkflowBudget(150, 80),
    "dev": WorkflowBudget(150, 80),
    "deep": WorkflowBudget(3_000, 100),
}


def workflow_settings(profile: str | None = None) -> settings:
    """The active (or named) profile's settings with the Workflow machine's budget."""
    name = profile if profile is not None else settings.get_current_profile_name()
    budget = WORKFLOW_BUDGETS.get(name, WORKFLOW_BUDGETS["ci"])
    return settings(
        settings.default if profile is None else settings.get_profile(profile),
        max_examples=budget.examples,
        stateful_step_count=budget.steps,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.large_base_example,
        ],
    )


# -- plans -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StepShape:
    deps: tuple[int, ...]  # indexes of earlier steps
    max_attempts: int
    backoff_ms: int


@st.composite
def plan_shapes(draw: st.DrawFn) -> tuple[StepShape, ...]:
    """A random DAG of 1-6 steps: each depends on a random subset of the earlier ones."""
    count = draw(st.integers(1, 6))
    shapes = []
    for i in range(count):
        deps = draw(st.sets(st.integers(0, i - 1), max_size=min(i, 3))) if i else set()
        attempts = draw(st.integers(1, 3))
        backoff = draw(st.sampled_from((0, 0, 50)))
        shapes.append(StepShape(tuple(sorted(deps)), attempts, backoff))
    return tuple(shapes)


def plan_command(run_id: str, shapes: tuple[StepShape, ...], salt: str = "") -> AdmitWorkflow:
    """The admission of a plan: step `k{i}` with StepRun id `{run_id}-s{i}`; the digest covers
    the shape (and `salt`, to make a conflicting plan under the same Run id)."""
    keys = [f"k{i}" for i in range(len(shapes))]
    steps = tuple(
        PinnedStep(
            step_key=keys[i],
            step_run_id=f"{run_id}-s{i}",
            task_id=f"task{i}",
            task_revision=1,
            executor_type=LOCAL,
            depends_on=tuple(sorted(keys[d] for d in shape.deps)),
            max_attempts=shape.max_attempts,
            retry_backoff_ms=shape.backoff_ms,
        )
        for i, shape in enumerate(shapes)
    )
    digest = hashlib.sha256(f"{run_id}|{shapes!r}|{salt}".encode()).hexdigest()
    return AdmitWorkflow(run_id, PROJECT, "plan", digest, steps)


# -- the process model -------------------------------------------------------------------------
@dataclass(slots=True)
class Process:
    """What the machine knows of one Task Attempt's process: spawned with a handle fact; then
    running, finished (a receipt exists) or dead (killed or stopped, no receipt)."""

    handle: str
    started_at_ms: int
    token_sha256: str
    callback_sequence: int
    state: str = "running"  # running | finished | dead
    outcome: CompletionOutcome | None = None
    exit_code: int | None = None


@dataclass(frozen=True, slots=True)
class Delivered:
    command: WorkflowCommand
    kind: str
    applied: bool


def _sha(token: bytes) -> str:
    return hashlib.sha256(token).hexdigest()


PICK = st.integers(0, 1 << 16)


class WorkflowMachine(RuleBasedStateMachine):
    """Several Workflows, their processes and every crash window (see the module docstring)."""

    NAME: ClassVar[str] = NAME
    MAX_WORKFLOWS: ClassVar[int] = 3
    # Off in the quality tier's "models alone" mode: then only the machine's own checks run.
    KERNEL_PREDICATES: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.counts = STATS.of(NAME)
        self.counts.instances += 1
        self.now = START_MS
        self.store: dict[str, WorkflowAggregate] = {}
        self.plans: dict[str, AdmitWorkflow] = {}
        self.oracle = WorkflowOracle()
        self.procs: dict[str, Process] = {}
        self.prepared: Counter[str] = Counter()  # applied prepares per Attempt (I-W2)
        self.handles = 0
        self.outcomes: Counter[str] = Counter()

    # -- delivery ------------------------------------------------------------------------------
    def deliver(
        self, command: WorkflowCommand, *, at: int | None = None, crash: str | None = None
    ) -> Delivered:
        """Decide with the kernel, predict with the oracle, compare, persist the effects (unless
        the crash is before commit), and for a crash after commit replay the command."""
        at = self.now if at is None else at
        run_id = command.run_id
        before = self.store.get(run_id)
        prediction, model = self.oracle.predict(command, at)
        outcome = apply_workflow(before, command, at)
        self.counts.commands += 1
        kind = outcome.kind.value
        self.outcomes[f"{command.name} {kind} {outcome.code.value}"] += 1
        spec = _SPEC_OF[type(command)]
        require(
            kind in prediction.kinds and (prediction.code in (None, outcome.code.value)),
            spec,
            f"{command!r} at {at}: the kernel answered {kind} {outcome.code.value}, the oracle "
            f"expects {sorted(prediction.kinds)} {prediction.code or ''} ({prediction.reason})",
        )
        if not isinstance(outcome, WorkflowApplied):
            require(self.store.get(run_id) is before, "WF-05", "a refusal wrote")
            return Delivered(command, kind, False)
        assert model is not None  # the oracle predicted an applied outcome
        if crash == "before_commit":
            return Delivered(command, kind, False)  # the effects are lost with the transaction
        after = apply_workflow_effects(before, outcome.effects)
        require(
            after == outcome.aggregate,
            "WF-05",
            f"I-W4: the effects of {command.name} do not reproduce the kernel's aggregate",
        )
        self._check_transition(command, before, after, prediction, at)
        if self.KERNEL_PREDICATES:
            found = workflow_step_violations(before, outcome, at)
            self.counts.invariant_checks += 1
            require(not found, "WF-05", f"kernel step predicates: {found}")
        self.store[run_id] = after
        self.oracle.commit(model)
        self._compare(after, model, spec, command)
        if isinstance(command, PrepareTask):
            self.prepared[command.attempt_id] += 1
        if crash == "after_commit":
            replay = apply_workflow(after, command, at)
            self.counts.commands += 1
            require(
                replay.kind.value in ("replayed", "raced"),
                "WF-18",
                f"the replay of {command.name} after a lost response was "
                f"{replay.kind.value} {replay.code.value}",
            )
            require(self.store[run_id] is after, "WF-18", "a replay wrote")
        return Delivered(command, kind, True)

    def _check_transition(
        self,
        command: WorkflowCommand,
        before: WorkflowAggregate | None,
        after: WorkflowAggregate,
        prediction: Prediction,
        at: int,
    ) -> None:
        """The step rules of §4.3/§4.4/§4.9 on one applied transition, own code."""
        self.counts.invariant_checks += 1
        if before is None:
            return
        require(after.run.version == before.run.version + 1, "WF-05", "Run version not +1")
        if not isinstance(command, _PARENT_ENDERS):
            require(
                after.run.status is before.run.status,
                "WF-05",
                f"I-W3: {command.name} changed the parent to {after.run.status}",
            )
        if isinstance(command, RecoverTaskStartup):
            require(after.run.status is RunStatus.RUNNING, "WF-08", "recovery ended the parent")
        for step in before.step_runs:
            later = after.step_run(step.step_run_id)
            require(later is not None, "WF-05", "a StepRun vanished")
            assert later is not None
            if later != step:
                require(
                    step.status not in _STEP_FINAL,
                    "WF-05",
                    f"final StepRun {step.step_key} changed",
                )
                require(
                    later.version == step.version + 1,
                    "WF-05",
                    f"StepRun {step.step_key} epoch {step.version} -> {later.version}",
                )
        for attempt in before.attempts:
            now_attempt = after.attempt(attempt.attempt_id)
            require(
                now_attempt is not None
                and (attempt.status not in _ATTEMPT_FINAL or now_attempt == attempt),
                "WF-05",
                f"final Attempt {attempt.attempt_id} changed or vanished",
            )
        require(after.ledger[: len(before.ledger)] == before.ledger, "WF-17", "ledger rewritten")
        if isinstance(command, PrepareTask):
            self._check_dispatch(command, before)

    def _check_dispatch(self, command: PrepareTask, before: WorkflowAggregate) -> None:
        """WF-04 / I-W2 on an applied prepare, read from the stored state before it."""
        entries = [e for e in before.ledger if e.attempt_id == command.attempt_id]
        attempt = before.attempt(command.attempt_id)
        require(len(entries) == 1 and attempt is not None, "WF-04", "dispatch without ledger")
        assert attempt is not None
        entry = entries[0]
        step = before.step_run(entry.step_run_id)
        require(
            step is not None
            and step.status is StepRunStatus.READY
            and step.version == entry.step_run_version,
            "WF-04",
            f"dispatch of {command.attempt_id} with its StepRun not ready at the ledger epoch",
        )
        require(
            before.run.status is RunStatus.RUNNING and before.run.cancel_requested_at_ms is None,
            "WF-04",
            "dispatch under a parent that is not running or has a cancellation intent",
        )
        require(attempt.status is AttemptStatus.CLAIMED, "WF-04", "dispatch of a started one")
        require(self.prepared[command.attempt_id] == 0, "WF-04", "I-W2: dispatched twice")

    def _compare(
        self, wf: WorkflowAggregate, model: OWorkflow, spec: str, command: object = None
    ) -> None:
        """The stored aggregate's statuses and epochs are the oracle's."""
        where = f"after {command!r}" if command is not None else ""
        intent = wf.run.cancel_requested_at_ms is not None
        require(
            (wf.run.status, intent) == (model.status, model.intent is not None),
            spec,
            f"parent {wf.run.status} intent={intent}, oracle {model.status} "
            f"intent={model.intent is not None} {where}",
        )
        for step in wf.step_runs:
            expected = model.steps[step.step_key]
            require(
                (step.status, step.version) == (expected.status, expected.version),
                spec,
                f"StepRun {step.step_key} {step.status}@{step.version}, oracle "
                f"{expected.status}@{expected.version} {where}",
            )
        got = {a.attempt_id: a.status for a in wf.attempts}
        want = {a.attempt_id: a.status for a in model.attempts.values()}
        require(got == want, spec, f"Attempts {got}, oracle {want} {where}")
        keys = {(e.step_run_id, e.step_run_version) for e in wf.ledger}
        require(keys == set(model.ledger), "WF-17", f"ledger {keys} != {set(model.ledger)}")

    # -- helpers -------------------------------------------------------------------------------
    def _wf(self, pick: int) -> WorkflowAggregate | None:
        ids = sorted(self.store)
        return self.store[ids[pick % len(ids)]] if ids else None

    def _attempts(self, pick: int, *statuses: AttemptStatus) -> Any:
        found = [
            a
            for run_id in sorted(self.store)
            for a in self.store[run_id].attempts
            if not statuses or a.status in statuses
        ]
        return found[pick % len(found)] if found else None

    def _proc(self, attempt_id: str) -> Process | None:
        return self.procs.get(attempt_id)

    def _receipt(self, attempt_id: str, run_id: str, forged: bool) -> LocalReceipt | None:
        proc = self.procs.get(attempt_id)
        if proc is None or proc.outcome is None:
            return None
        token = _sha(b"forged") if forged else proc.token_sha256
        return LocalReceipt(
            run_id, attempt_id, proc.callback_sequence, token, proc.outcome,
            proc.started_at_ms, proc.exit_code,
        )  # fmt: skip

    def natural(self, wf: WorkflowAggregate, pick: int) -> WorkflowCommand:
        """A plausible next command for one Workflow (for the crash and clock rules)."""
        run_id = wf.run.run_id
        options: list[WorkflowCommand] = [AdvanceFrontier(run_id), RequestWorkflowCancel(run_id)]
        for step in wf.step_runs:
            if step.status is StepRunStatus.READY:
                options.append(AdmitTask(run_id, step.step_run_id, step.version))
        for attempt in wf.attempts:
            aid = attempt.attempt_id
            if attempt.status is AttemptStatus.CLAIMED:
                seq = attempt.callback_sequence + 1
                options.append(PrepareTask(run_id, aid, LOCAL, seq, _sha(f"{aid}{seq}".encode())))
            proc = self.procs.get(aid)
            if attempt.status is AttemptStatus.STARTING:
                if proc is None:
                    options.append(FailTaskStart(run_id, aid))
                else:
                    options.append(RecordTaskHandle(run_id, aid, proc.handle, proc.started_at_ms))
            if attempt.status is AttemptStatus.RUNNING:
                receipt = self._receipt(aid, run_id, forged=False)
                if receipt is not None:
                    options.append(CompleteTask(run_id, aid, receipt))
                else:
                    options.append(TimeOutTask(run_id, aid))
        if wf.run.cancel_requested_at_ms is not None:
            stops = tuple(a.attempt_id for a in wf.attempts if a.status in _STARTED)
            options.append(ConvergeWorkflowCancel(run_id, stops))
        return options[pick % len(options)]

    def _stop(self, attempt_ids: tuple[str, ...]) -> None:
        """Execution control's exact stop (§4.8): the processes no longer run."""
        for attempt_id in attempt_ids:
            proc = self.procs.get(attempt_id)
            if proc is not None and proc.state == "running":
                proc.state = "dead"

    def _effects_of(self, command: WorkflowCommand) -> None:
        """The process side of a command delivered by the crash rules (the stops of a timeout
        or convergence happen before its transaction, so also when it is lost)."""
        if isinstance(command, TimeOutTask):
            self._stop((command.attempt_id,))
        if isinstance(command, ConvergeWorkflowCancel):
            self._stop(command.stopped_attempt_ids)

    # -- rules: the scheduler's own progress ---------------------------------------------------
    def _progress(self, pick: int, outcome: CompletionOutcome) -> None:
        """One step a no-fault cadence would take for one Workflow (frontier, admission,
        prepare, spawn, handle, process exit, completion), so that the walk reaches the late
        states; the fault rules take it off that path."""
        self.counts.steps += 1
        wf = self._wf(pick)
        assert wf is not None
        run_id = wf.run.run_id
        options: list[WorkflowCommand | str] = []
        model = self.oracle.workflows[run_id]
        if self.oracle.predict(AdvanceFrontier(run_id), self.now)[0].applies:
            options.append(AdvanceFrontier(run_id))
        for step in wf.step_runs:
            if step.status is StepRunStatus.READY:
                options.append(AdmitTask(run_id, step.step_run_id, step.version))
        for attempt in wf.attempts:
            aid = attempt.attempt_id
            proc = self.procs.get(aid)
            if attempt.status is AttemptStatus.CLAIMED and model.open:
                seq = attempt.callback_sequence + 1
                options.append(PrepareTask(run_id, aid, LOCAL, seq, _sha(f"{aid}{seq}".encode())))
            elif attempt.status is AttemptStatus.STARTING and proc is None:
                options.append(f"spawn {aid}")
            elif attempt.status is AttemptStatus.STARTING and proc is not None:
                options.append(RecordTaskHandle(run_id, aid, proc.handle, proc.started_at_ms))
            elif attempt.status is AttemptStatus.RUNNING and proc is not None:
                if proc.state == "running":
                    options.append(f"finish {aid}")
                elif proc.state == "finished":
                    receipt = self._receipt(aid, run_id, forged=False)
                    assert receipt is not None
                    options.append(CompleteTask(run_id, aid, receipt))
        if not options:
            return
        chosen = options[(pick >> 2) % len(options)]
        if isinstance(chosen, str):
            verb, aid = chosen.split()
            if verb == "spawn":
                self.spawn_attempt(aid, 0)
            else:
                proc = self.procs[aid]
                proc.state, proc.outcome, proc.exit_code = "finished", outcome, 0
            return
        self.deliver(chosen)

    _OUTCOMES = st.sampled_from((CompletionOutcome.SUCCEEDED,) * 4 + tuple(CompletionOutcome))

    @precondition(lambda self: bool(self.store))
    @rule(pick=PICK, outcome=_OUTCOMES)
    def progress(self, pick: int, outcome: CompletionOutcome) -> None:
        for burst in range(3):  # a cadence does several things
            self._progress(pick >> burst, outcome)

    @precondition(lambda self: bool(self.store))
    @rule(pick=PICK, outcome=_OUTCOMES)
    def progress_more(self, pick: int, outcome: CompletionOutcome) -> None:
        self._progress(pick, outcome)

    @precondition(lambda self: bool(self.store))
    @rule(pick=PICK, outcome=_OUTCOMES)
    def progress_again(self, pick: int, outcome: CompletionOutcome) -> None:
        self._progress(pick, outcome)

    # -- rules: admission and frontier ----------------------------------------------------------
    @precondition(lambda self: len(self.plans) < self.MAX_WORKFLOWS)
    @rule(shapes=plan_shapes())
    def admit(self, shapes: tuple[StepShape, ...]) -> None:
        self.counts.steps += 1
        run_id = f"wf{len(self.plans) + 1}"
        command = plan_command(run_id, shapes)
        self.plans[run_id] = command
        self.deliver(command)

    @precondition(lambda self: bool(self.plans))
    @rule(pick=PICK, conflicting=st.booleans())
    def readmit(self, pick: int, conflicting: bool) -> None:
        """§4.1: the same admission again is an exact replay; another plan is refused."""
        self.counts.steps += 1
        run_id = sorted(self.plans)[pick % len(self.plans)]
        command = self.plans[run_id]
        if conflicting:
            command = AdmitWorkflow(
                run_id, PROJECT, "plan", _sha(command.plan_digest.encode()), command.steps
            )
        self.deliver(command)

    @precondition(lambda self: bool(self.store))
    @rule(pick=PICK)
    def frontier(self, pick: int) -> None:
        self.counts.steps += 1
        wf = self._wf(pick)
        assert wf is not None
        self.deliver(AdvanceFrontier(wf.run.run_id))

    @precondition(lambda self: bool(self.store))
    @rule(pick=PICK, variant=st.sampled_from(("current", "current", "stale", "replay")))
    def admit_task(self, pick: int, variant: str) -> None:
        """§4.3: the current epoch, an older one, or an exact replay of a ledger key."""
        self.counts.steps += 1
        wf = self._wf(pick)
        assert wf is not None
        step = wf.step_runs[(pick >> 2) % len(wf.step_runs)]
        version = step.version
        if variant == "stale":
            version = max(1, step.version - 1 - (pick >> 5) % 2)
        elif variant == "replay" and wf.ledger:
            entry = wf.ledger[(pick >> 3) % len(wf.ledger)]
            step = wf.step_run(entry.step_run_id) or step
            version = entry.step_run_version
        self.deliver(AdmitTask(wf.run.run_id, step.step_run_id, version))

    # -- rules: dispatch and execution ----------------------------------------------------------
    @precondition(lambda self: bool(self.store))
    @rule(pick=PICK, token=st.binary(min_size=4, max_size=8), again=st.booleans())
    def prepare(self, pick: int, token: bytes, again: bool) -> None:
        """§4.3/§4.4: prepare a claimed Attempt; `again` also a second prepare of one that was
        prepared already (a lost answer seen by the scheduler as still to do)."""
        self.counts.steps += 1
        statuses = () if again else (AttemptStatus.CLAIMED,)
        attempt = self._attempts(pick, *statuses)
        if attempt is None:
            return
        seq = attempt.callback_sequence + 1
        command = PrepareTask(attempt.run_id, attempt.attempt_id, LOCAL, seq, _sha(token))
        self.deliver(command)

    @precondition(lambda self: bool(self.store))
    @rule(pick=PICK, ago=st.integers(0, 30))
    def spawn(self, pick: int, ago: int) -> None:
        """The launcher registers the handle fact, then spawns (§4.7); no kernel command."""
        self.counts.steps += 1
        attempt = self._attempts(pick, AttemptStatus.STARTING)
        if attempt is None or attempt.attempt_id in self.procs:
            return
        self.spawn_attempt(attempt.attempt_id, ago)

    def spawn_attempt(self, attempt_id: str, ago: int) -> None:
        attempt = self.store[attempt_id_run(self.store, attempt_id)].attempt(attempt_id)
        assert attempt is not None
        assert attempt.callback_token_sha256 is not None
        step = self.store[attempt.run_id].step_run(attempt.step_run_id or "")
        assert step is not None
        self.handles += 1
        # Registered after the prepare committed (the StepRun's last change), before the spawn.
        started = max(step.updated_at_ms, self.now - ago)
        self.procs[attempt.attempt_id] = Process(
            f"pid:{self.handles}", started, attempt.callback_token_sha256,
            attempt.callback_sequence,
        )  # fmt: skip

    @precondition(lambda self: bool(self.procs))
    @rule(pick=PICK, variant=st.sampled_from(("fact", "fact", "fact", "early", "other")))
    def record_handle(self, pick: int, variant: str) -> None:
        """§4.4 running with the handle fact; `early` dates it before the Attempt's creation
        (WF-12), `other` is another handle for an Attempt already running."""
        self.counts.steps += 1
        attempt_id = sorted(self.procs)[pick % len(self.procs)]
        proc = self.procs[attempt_id]
        run_id = attempt_id_run(self.store, attempt_id)
        attempt = self.store[run_id].attempt(attempt_id)
        assert attempt is not None
        started, handle = proc.started_at_ms, proc.handle
        if variant == "early":
            started = attempt.created_at_ms - 1
        elif variant == "other":
            handle = f"{handle}-other"
        self.deliver(RecordTaskHandle(run_id, attempt_id, handle, started))

    @precondition(lambda self: bool(self.procs))
    @rule(
        pick=PICK,
        outcome=st.sampled_from(tuple(CompletionOutcome)),
        code=st.integers(-2, 2),
        killed=st.booleans(),
    )
    def process_ends(self, pick: int, outcome: CompletionOutcome, code: int, killed: bool) -> None:
        """A running process exits with an outcome (the receipt is written) or is killed."""
        self.counts.steps += 1
        running = sorted(a for a, p in self.procs.items() if p.state == "running")
        if not running:
            return
        proc = self.procs[running[pick % len(running)]]
        if killed:
            proc.state = "dead"
            return
        proc.state, proc.outcome, proc.exit_code = "finished", outcome, code

    @precondition(lambda self: bool(self.procs))
    @rule(pick=PICK, forged=st.booleans())
    def complete(self, pick: int, forged: bool) -> None:
        """§4.4 completion with the receipt (forged: another token digest, L3)."""
        self.counts.steps += 1
        finished = sorted(a for a, p in self.procs.items() if p.state == "finished")
        if not finished:
            return
        attempt_id = finished[pick % len(finished)]
        run_id = attempt_id_run(self.store, attempt_id)
        receipt = self._receipt(attempt_id, run_id, forged)
        assert receipt is not None
        self.deliver(CompleteTask(run_id, attempt_id, receipt))

    @precondition(lambda self: bool(self.store))
    @rule(pick=PICK)
    def fail_start(self, pick: int) -> None:
        """§4.4 start failure: the spawn was refused (no process)."""
        self.counts.steps += 1
        attempt = self._attempts(pick, AttemptStatus.STARTING, AttemptStatus.RUNNING)
        if attempt is None or pick % 3 or (attempt.attempt_id in self.procs and pick % 4):
            return  # rarer than the progress rules, else few Tasks ever complete
        done = self.deliver(FailTaskStart(attempt.run_id, attempt.attempt_id))
        if done.applied:
            self._stop((attempt.attempt_id,))  # the runner gave up on that start

    @precondition(lambda self: bool(self.store))
    @rule(pick=PICK)
    def timeout(self, pick: int) -> None:
        """§4.4 timeout, issued after execution control stopped the process."""
        self.counts.steps += 1
        attempt = self._attempts(pick, AttemptStatus.RUNNING, AttemptStatus.STARTING)
        if attempt is None or pick % 3:
            return  # rarer than the progress rules
        self._stop((attempt.attempt_id,))
        self.deliver(TimeOutTask(attempt.run_id, attempt.attempt_id))

    # -- rules: cancellation -------------------------------------------------------------------
    @precondition(lambda self: bool(self.store))
    @rule(pick=PICK, reason=st.sampled_from((CancelReason.USER, CancelReason.TIMEOUT)))
    def request_cancel(self, pick: int, reason: CancelReason) -> None:
        self.counts.steps += 1
        if pick % 3:
            return  # one in three: cancellation at any point, but not before most progress
        wf = self._wf(pick)
        assert wf is not None
        self.deliver(RequestWorkflowCancel(wf.run.run_id, reason))

    @precondition(lambda self: bool(self.store))
    @rule(pick=PICK, stops=st.sampled_from(("all", "all", "none", "some")))
    def converge(self, pick: int, stops: str) -> None:
        """§4.4 phase 1: with every started process stopped exactly, none, or all but one."""
        self.counts.steps += 1
        wf = self._wf(pick)
        assert wf is not None
        started = tuple(a.attempt_id for a in wf.attempts if a.status in _STARTED)
        chosen = {"all": started, "none": (), "some": started[1:]}[stops]
        self._stop(chosen)
        self.deliver(ConvergeWorkflowCancel(wf.run.run_id, chosen))

    # -- rules: time, crashes, restart ---------------------------------------------------------
    @rule(ms=st.sampled_from((1, 10, 60, 500)))
    def advance_clock(self, ms: int) -> None:
        self.counts.steps += 1
        self.now += ms

    @precondition(lambda self: bool(self.store))
    @rule(pick=PICK, window=st.sampled_from(("before_commit", "after_commit")))
    def crash(self, pick: int, window: str) -> None:
        """A crash around the commit of a plausible next command (WF-05, WF-17, WF-18)."""
        self.counts.steps += 1
        wf = self._wf(pick)
        assert wf is not None
        command = self.natural(wf, pick >> 2)
        self._effects_of(command)
        before = self.store[wf.run.run_id]
        done = self.deliver(command, crash=window)
        if window == "before_commit":
            require(self.store[wf.run.run_id] is before, "WF-05", "a lost transaction wrote")
        elif done.applied:
            self.outcomes["lost response replayed"] += 1

    @precondition(lambda self: bool(self.store))
    @rule(pick=PICK, back=st.integers(1, 200))
    def clock_regression(self, pick: int, back: int) -> None:
        """WF-12: a command observed before the Workflow's last write must not write."""
        self.counts.steps += 1
        wf = self._wf(pick)
        assert wf is not None
        model = self.oracle.workflows[wf.run.run_id]
        command = self.natural(wf, pick >> 2)
        before = self.store[wf.run.run_id]
        self._effects_of(command)
        done = self.deliver(command, at=max(0, model.last_ms - back))
        require(not done.applied, "WF-12", f"{command.name} applied before the last write")
        require(self.store[wf.run.run_id] is before, "WF-12", "a regressed command wrote")

    @precondition(lambda self: bool(self.store))
    @rule(unknowns=st.integers(0, 7), seed=PICK)
    def restart(self, unknowns: int, seed: int) -> None:
        """A runner restart (§4.5): every Task Attempt goes through `RecoverTaskStartup` with
        the evidence that is true of its process; bit i of `unknowns` makes the i-th started
        Attempt's evidence `unknown` instead (fail closed). Processes keep running (adoption)."""
        self.counts.steps += 1
        index = 0
        for run_id in sorted(self.store):
            for attempt in self.store[run_id].attempts:
                if attempt.status in _ATTEMPT_FINAL:
                    continue
                evidence: Evidence | None = None
                if attempt.status in _STARTED:
                    evidence = self._evidence(attempt.attempt_id, unknowns >> index & 1, seed)
                    index += 1
                # WF-6: the launcher's journal line exists iff the machine spawned the process.
                launched = attempt.attempt_id in self.procs or attempt.executor_handle is not None
                command = RecoverTaskStartup(run_id, attempt.attempt_id, evidence, launched)
                self.deliver(command)

    def _evidence(self, attempt_id: str, unknown: int, seed: int) -> Evidence:
        proc = self.procs.get(attempt_id)
        if unknown:
            reasons = tuple(UnknownReason)
            return UnknownEvidence(reasons[seed % len(reasons)])
        if proc is not None and proc.state == "finished":
            assert proc.outcome is not None
            return CompletedEvidence(
                proc.outcome, proc.callback_sequence, proc.exit_code, proc.started_at_ms
            )
        if proc is not None and proc.state == "running":
            return LiveEvidence()
        return NotRunningEvidence()

    # -- invariants ----------------------------------------------------------------------------
    @invariant()
    def own_workflow_invariants(self) -> None:
        """§4.9 I-W1..I-W3, I-W5, I-W6 and the oracle's statuses, on every stored aggregate,
        written here without the kernel's predicates."""
        for run_id, wf in self.store.items():
            self.counts.invariant_checks += 6
            self._iw1(wf)
            self._iw2(wf)
            self._iw3(wf)
            self._iw5(wf)
            self._iw6(wf)
            self._compare(wf, self.oracle.workflows[run_id], "WF-17")

    @invariant()
    def kernel_workflow_invariants(self) -> None:
        """The kernel's own `check_workflow_invariants` (off in the models-alone mode)."""
        if not self.KERNEL_PREDICATES:
            return
        for wf in self.store.values():
            self.counts.invariant_checks += 1
            found = check_workflow_invariants(wf)
            require(not found, "WF-05", f"kernel Workflow invariants: {found}")

    def _iw1(self, wf: WorkflowAggregate) -> None:
        keys = [(e.step_run_id, e.step_run_version) for e in wf.ledger]
        require(len(set(keys)) == len(keys), "WF-17", f"I-W1: two entries for one key {keys}")
        ids = [a.attempt_id for a in wf.attempts]
        require(len(set(ids)) == len(ids), "WF-17", "I-W1: duplicate Attempt ids")
        by_attempt = {e.attempt_id: e for e in wf.ledger}
        require(
            set(by_attempt) == set(ids) and len(by_attempt) == len(wf.ledger),
            "WF-17",
            "I-W1: ledger entries and Task Attempts are not one to one",
        )
        for attempt in wf.attempts:
            entry = by_attempt[attempt.attempt_id]
            require(
                entry.step_run_id == attempt.step_run_id and entry.attempt_number == attempt.number,
                "WF-17",
                f"I-W1: the entry of {attempt.attempt_id} names another StepRun or number",
            )

    def _iw2(self, wf: WorkflowAggregate) -> None:
        for attempt in wf.attempts:
            require(self.prepared[attempt.attempt_id] <= 1, "WF-04", "I-W2: dispatched twice")
        for step in wf.step_runs:
            attempts = [a for a in wf.attempts if a.step_run_id == step.step_run_id]
            live = [a for a in attempts if a.status not in _ATTEMPT_FINAL]
            started = [a for a in live if a.status in _STARTED]
            where = f"StepRun {step.step_key} ({step.status})"
            require(len(live) <= 1, "WF-04", f"I-W2: {where} has {len(live)} live Attempts")
            if step.status is StepRunStatus.PENDING:
                require(not attempts, "WF-04", f"I-W2: {where} has Attempts")
            if step.status is StepRunStatus.READY:
                require(not started, "WF-04", f"I-W2: {where} has a started Attempt")
            if step.status is StepRunStatus.RUNNING:
                require(len(started) == 1, "WF-04", f"I-W2: {where} without its execution")
            if step.status in _STEP_FINAL:
                require(not live, "WF-04", f"I-W2: {where} has a live Attempt")

    def _iw3(self, wf: WorkflowAggregate) -> None:
        status = wf.run.status
        steps = wf.step_runs
        if status is RunStatus.RUNNING:
            return
        require(
            status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED,
                       RunStatus.TIMED_OUT),
            "WF-05",
            f"I-W3: a Workflow that is not terminal is {status}",
        )  # fmt: skip
        require(
            all(s.status in _STEP_FINAL for s in steps),
            "WF-05",
            f"I-W3: {status} Workflow with a StepRun not final",
        )
        if status is RunStatus.SUCCEEDED:
            ok = all(s.status is StepRunStatus.SUCCEEDED for s in steps)
            require(ok, "WF-05", "I-W3: succeeded Workflow with a StepRun not succeeded")
        if status in (RunStatus.CANCELLED, RunStatus.TIMED_OUT):
            ok = wf.run.cancel_requested_at_ms is not None
            require(ok, "WF-16", "I-W3: cancelled Workflow without an intent")
        if status is RunStatus.FAILED:
            ok = not all(s.status is StepRunStatus.SUCCEEDED for s in steps)
            require(ok, "WF-05", "I-W3: failed Workflow whose StepRuns all succeeded")

    def _iw5(self, wf: WorkflowAggregate) -> None:
        for attempt in wf.attempts:
            proc = self.procs.get(attempt.attempt_id)
            if attempt.started_at_ms is not None:
                require(
                    proc is not None and attempt.started_at_ms == proc.started_at_ms,
                    "WF-11",
                    f"I-W5: Attempt {attempt.attempt_id} start {attempt.started_at_ms} is not "
                    f"the handle fact {proc.started_at_ms if proc else None}",
                )
        for step in wf.step_runs:
            if step.status is not StepRunStatus.RUNNING:
                continue
            live = [
                a for a in wf.attempts if a.step_run_id == step.step_run_id and a.status in _STARTED
            ]
            if live:
                require(
                    step.started_at_ms == live[0].started_at_ms,
                    "WF-11",
                    f"I-W5: StepRun {step.step_key} start {step.started_at_ms} != its "
                    f"Attempt's {live[0].started_at_ms}",
                )

    def _iw6(self, wf: WorkflowAggregate) -> None:
        for entry in wf.ledger:
            derived = workflow_task_attempt_id(
                wf.admission.plan_digest, entry.step_run_id, entry.step_run_version
            )
            require(
                WTA_RE.fullmatch(entry.attempt_id) is not None
                and PORTABLE_ID_RE.fullmatch(entry.attempt_id) is not None
                and entry.attempt_id == derived,
                "WF-10",
                f"I-W6: Task Attempt id {entry.attempt_id} is not the derived wta: id",
            )

    def teardown(self) -> None:
        for name, count in self.outcomes.items():
            STATS.outcomes[f"{NAME} {name}"] += count


def attempt_id_run(store: dict[str, WorkflowAggregate], attempt_id: str) -> str:
    """The Workflow holding `attempt_id`."""
    for run_id, wf in store.items():
        if wf.attempt(attempt_id) is not None:
            return run_id
    raise ModelViolation(f"WF-17: Attempt {attempt_id} vanished from the store")
