"""Planted bugs: one-token or one-line edits of the real kernel source that the models must catch
(issue 3; issue 14 item 5).

Each `Mutant` is a realistic small change of real kernel code, given as `SourcePatch`es
(`model_tests/quality/plant.py`): an exact text of a kernel module's source file and its
replacement. The text must occur exactly once in the current source and the replacement must
change it, so a kernel edit that removes or repeats the text fails loudly, naming the mutant
(`test_mutants.py::test_every_mutant_still_matches_the_kernel_source`), instead of a copied
function silently testing yesterday's kernel.

`Mutant.applied()` plants the patches in process (`plant.planted`): the top-level definition that
contains the text (a function with its decorators, or a table such as `LOST_REQUIRES_EVIDENCE`)
is edited and executed in the real module's namespace, so a transition gets the kernel's own
`@transition` contracts, and every reference the kernel looks up at call time is re-bound by
identity: the module attributes of every `kernel` module that imported the object (`mark_lost`
in `run_lease` and `run_recovery`; `is_lost_retry_eligible` in `run_lost_retry`, `selection` and
`aliases`) and the registries holding it (`kernel.transitions.TRANSITIONS`, which `apply`, and so
the engine, the reference store and the models, dispatches through).

`applied(contracts=False)` also strips the kernel's icontract pre/postconditions from every
contracted function of the kernel (the equivalent of `python -O`), so that a catch is known to
come from the models' own checks and not from the kernel checking itself.

Every mutant breaks a rule the SPEC states (its `spec` id is a registered property id; `rule`
names the row or sentence); none is an equivalent mutant: `probe` is a directed example on which
the mutated kernel answers differently (checked by `test_mutants.py`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import kernel.transitions as transitions_pkg
import kernel.workflow.transitions as workflow_transitions
from kernel.commands import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    AdmitRun,
    Command,
    CompleteWithLease,
    ConvergeCancel,
    ExpireWithLease,
    Fence,
    GrantLease,
    LocalReceipt,
    LostRetryStep,
    PolicyDefinition,
    RecoverRuntime,
    RenewLease,
    RequestCancel,
)
from kernel.entities import RunAggregate, WorkerSession
from kernel.evidence import CompletedEvidence, NotRunningEvidence, UnknownEvidence
from kernel.identity import Secret, workflow_task_attempt_id
from kernel.outcomes import Applied
from kernel.specs.states import (
    CancelReason,
    CompletionOutcome,
    Profile,
    Safety,
    UnknownReason,
    WorkerSessionStatus,
)
from kernel.workflow import (
    AdmitTask,
    AdvanceFrontier,
    CompleteTask,
    ConvergeWorkflowCancel,
    PrepareTask,
    RecordTaskHandle,
    RecoverTaskStartup,
    RequestWorkflowCancel,
    WorkflowAggregate,
    WorkflowApplied,
    WorkflowCommand,
)
from model_tests.quality.plant import SourcePatch, modules_in, planted, rebound
from model_tests.workflow_machine import StepShape, plan_command

__all__ = ["KERNEL", "MUTANTS", "Mutant", "by_name", "play", "without_contracts"]

# The package in whose modules a mutant is re-bound, and whose contracts `contracts=False` strips.
KERNEL = "kernel"

# The kernel modules the mutants edit.
LEASE = "kernel.transitions.run_lease"
LOST_RETRY = "kernel.transitions.run_lost_retry"
POLICY = "kernel.transitions.retry_policy"
CANCELLATION = "kernel.transitions.run_cancellation"
RECOVERY = "kernel.transitions.run_recovery"
PROFILES = "kernel.specs.profiles"
WF_ADMISSION = "kernel.workflow.admission"
WF_RULES = "kernel.workflow.rules"
WF_FRONTIER = "kernel.workflow.frontier"
WF_EXECUTION = "kernel.workflow.execution"
WF_CANCELLATION = "kernel.workflow.cancellation"
WF_RECOVERY = "kernel.workflow.recovery"


# -- how a mutant is applied --------------------------------------------------------------------
def is_contracted(value: object) -> bool:
    """An icontract-checked function (the checker carries the contracts)."""
    return callable(value) and hasattr(value, "__postconditions__")


@contextmanager
def without_contracts(scope: str = KERNEL) -> Iterator[None]:
    """Every icontract-checked function of `scope` replaced, wherever the modules of `scope`
    hold it (attributes, registries such as `TRANSITIONS`), by the function under the checker
    (`__wrapped__`); restored on exit. Taken after a plant, it strips the planted copies too."""
    found: dict[int, tuple[object, object]] = {}
    for module in modules_in(scope):
        for value in list(vars(module).values()):
            held = list(value.values()) if isinstance(value, Mapping) else []
            for candidate in (value, *held):
                if is_contracted(candidate):
                    found[id(candidate)] = (candidate, vars(candidate)["__wrapped__"])
    with rebound(found.values(), scope):
        yield


@dataclass(frozen=True, slots=True)
class Mutant:
    """One planted bug: what it breaks, the edit of the kernel source, and a directed example."""

    name: str
    spec: str  # a property id of kernel.specs.properties that the bug violates
    rule: str  # the SPEC rule or table row it breaks
    description: str  # the one change, in a line
    patches: tuple[SourcePatch, ...]  # the change, as exact edits of the kernel source
    probe: Callable[[], Sequence[Step]]  # a directed script on which the mutant differs
    # The model the hunt starts with, by what the mutated code does: "retry" for code that
    # loses Attempts or retries them (the RetryExhaustionMachine's subject), "lifecycle" for
    # fencing, completion, replays and cancellation. The other engines follow (`hunt`).
    aim: str = "lifecycle"

    @contextmanager
    def applied(self, *, contracts: bool = True) -> Iterator[None]:
        """Plant the mutant for the duration of the block (everything is restored after, also
        on an exception). `contracts=False` also turns the kernel's icontract checks off."""
        with ExitStack() as stack:
            stack.enter_context(planted(self.patches, scope=KERNEL))
            if not contracts:
                stack.enter_context(without_contracts(KERNEL))
            yield


# -- directed examples ---------------------------------------------------------------------------
T0 = 1_000_000
LEASE_MS = 5_000
RUN = "q1"
A1 = "q1-a1"
A2 = "q1-a2"
NEVER = 10**13
WORKER = WorkerSession("w1", "w1-s1", 1, WorkerSessionStatus.ONLINE, NEVER, ("shell",))
TOKEN = Secret.of("quality_probe_lease_token".ljust(40, "x"), "lease_token")
TOKEN_2 = Secret.of("quality_probe_lease_token_two".ljust(40, "x"), "lease_token")
RETRY = PolicyDefinition(2, True, Safety.IDEMPOTENT, 0, 0)
BACKOFF = PolicyDefinition(3, True, Safety.IDEMPOTENT, 1_000, 60_000)

Step = tuple[int, Command | WorkflowCommand]


def fence(version: int, *, session: str = "w1-s1", token: Secret = TOKEN) -> Fence:
    return Fence("w1", session, 1, 1, token, version)


def started(policy: PolicyDefinition | None = RETRY) -> list[Step]:
    """Admit, grant (lease version 1, expiring at T0 + LEASE_MS), acknowledge starting (v2)."""
    return [
        (T0, AdmitRun(RUN, A1, "proj", "task", 1, "shell", policy)),
        (T0, GrantLease(RUN, A1, WORKER, TOKEN, LEASE_MS)),
        (T0 + 1, AcknowledgeStarting(RUN, A1, fence(1), WORKER)),
    ]


def lost(policy: PolicyDefinition | None = RETRY) -> list[Step]:
    """Attempt 1 started, then lost by lease expiry on edge (T8) exactly at its expiry."""
    return [*started(policy), (T0 + LEASE_MS, ExpireWithLease(RUN, A1, 1, Profile.EDGE))]


def requeued(policy: PolicyDefinition = RETRY) -> list[Step]:
    """Attempt 1 lost, scheduled (R4, no backoff) and requeued (R5) as Attempt 2."""
    due = T0 + LEASE_MS
    return [
        *lost(policy),
        (due, LostRetryStep(RUN, A2)),
        (due, LostRetryStep(RUN, A2)),
    ]


def play(script: Sequence[Step]) -> tuple[str, ...]:
    """Apply a script through `kernel.transitions.apply` (the dispatch the engine uses), one
    aggregate carried along; the observable result: every outcome, then the final aggregate
    and its Events."""
    agg: RunAggregate | None = None
    wf: WorkflowAggregate | None = None  # a Workflow script goes through `apply_workflow`
    seen: list[str] = []
    events: list[str] = []
    for at, command in script:
        if isinstance(command, workflow_transitions.WORKFLOW_COMMAND_TYPES):
            done = workflow_transitions.apply_workflow(wf, command, at)  # type: ignore[arg-type]
            seen.append(f"{command.name} {done.kind.value} {done.code.value}")
            if isinstance(done, WorkflowApplied):
                wf = done.aggregate
                events += [f"{e.seq} {e.type} {e.actor.value} {e.attempt_id}" for e in done.events]
            continue
        assert not isinstance(command, WorkflowCommand)
        outcome = transitions_pkg.apply(agg, command, at)
        seen.append(f"{command.name} {outcome.kind.value} {outcome.code.value}")
        if isinstance(outcome, Applied):
            agg = outcome.aggregate
            events += [f"{e.seq} {e.type} {e.actor.value} {e.attempt_id}" for e in outcome.events]
    return (*seen, repr(agg), *(() if wf is None else (repr(wf),)), *events)


# -- directed Workflow examples (SPEC §4) ----------------------------------------------------------
WF_RUN = "wfq"
WF_TOKEN = "5" * 64
ONE_STEP = (StepShape((), 2, 0),)  # one step, a retry left
TWO_STEPS = (StepShape((), 1, 0), StepShape((0,), 1, 0))  # k1 waits for k0


def wf_running(shapes: tuple[StepShape, ...] = TWO_STEPS) -> list[Step]:
    """Admit, frontier (k0 ready at epoch 2), admit its Task, prepare, record the handle fact."""
    admission = plan_command(WF_RUN, shapes)
    attempt = wf_attempt(shapes)
    return [
        (T0, admission),
        (T0, AdvanceFrontier(WF_RUN)),
        (T0, AdmitTask(WF_RUN, f"{WF_RUN}-s0", 2)),
        (T0 + 1, PrepareTask(WF_RUN, attempt, "local", 1, WF_TOKEN)),
        (T0 + 5, RecordTaskHandle(WF_RUN, attempt, "pid:1", T0 + 2)),
    ]


def wf_attempt(shapes: tuple[StepShape, ...] = TWO_STEPS) -> str:
    return workflow_task_attempt_id(plan_command(WF_RUN, shapes).plan_digest, f"{WF_RUN}-s0", 2)


def wf_completed(
    outcome: CompletionOutcome, shapes: tuple[StepShape, ...] = TWO_STEPS
) -> list[Step]:
    attempt = wf_attempt(shapes)
    receipt = LocalReceipt(WF_RUN, attempt, 1, WF_TOKEN, outcome, T0 + 2, 0)
    return [*wf_running(shapes), (T0 + 6, CompleteTask(WF_RUN, attempt, receipt))]


def _probe_wf_failed_dependency() -> list[Step]:
    return [*wf_completed(CompletionOutcome.FAILED), (T0 + 7, AdvanceFrontier(WF_RUN))]


def _probe_wf_frontier_after_first() -> list[Step]:
    return [*wf_completed(CompletionOutcome.SUCCEEDED), (T0 + 7, AdvanceFrontier(WF_RUN))]


def _probe_wf_prepare_under_intent() -> list[Step]:
    script = wf_running()[:3]
    return [
        *script,
        (T0, RequestWorkflowCancel(WF_RUN, CancelReason.USER)),
        (T0 + 1, PrepareTask(WF_RUN, wf_attempt(), "local", 1, WF_TOKEN)),
    ]


def _probe_wf_converge_unstopped() -> list[Step]:
    return [
        *wf_running(),
        (T0 + 6, RequestWorkflowCancel(WF_RUN, CancelReason.USER)),
        (T0 + 7, ConvergeWorkflowCancel(WF_RUN, ())),
    ]


def _probe_wf_recover_not_running() -> list[Step]:
    attempt = wf_attempt(ONE_STEP)
    return [
        *wf_running(ONE_STEP),
        (T0 + 9, RecoverTaskStartup(WF_RUN, attempt, NotRunningEvidence())),
    ]


def _probe_wf_recover_unknown() -> list[Step]:
    unknown = UnknownEvidence(UnknownReason.PROBE_FAILED)
    return [*wf_running(), (T0 + 9, RecoverTaskStartup(WF_RUN, wf_attempt(), unknown))]


def _probe_wf_handle_fact() -> list[Step]:
    return wf_completed(CompletionOutcome.SUCCEEDED)


def _probe_wf_stale_admission_replay() -> list[Step]:
    return [
        *wf_completed(CompletionOutcome.FAILED, ONE_STEP),
        (T0 + 7, AdmitTask(WF_RUN, f"{WF_RUN}-s0", 2)),
    ]


# -- the registry ----------------------------------------------------------------------------------
def _probe_session() -> list[Step]:
    renew = RenewLease(RUN, A1, fence(2, session="w1-s0"), WORKER, LEASE_MS)
    return [*started(), (T0 + 2, renew)]


def _probe_offline() -> list[Step]:
    offline = dataclasses.replace(WORKER, status=WorkerSessionStatus.OFFLINE)
    return [*started(), (T0 + 2, RenewLease(RUN, A1, fence(2), offline, LEASE_MS))]


def _probe_renew_at_expiry() -> list[Step]:
    return [*started(), (T0 + LEASE_MS, RenewLease(RUN, A1, fence(2), WORKER, LEASE_MS))]


def _probe_cluster_expiry() -> list[Step]:
    return [*started(), (T0 + LEASE_MS, ExpireWithLease(RUN, A1, 1, Profile.CLUSTER))]


def _probe_renew() -> list[Step]:
    return [*started(), (T0 + 2, RenewLease(RUN, A1, fence(2), WORKER, LEASE_MS))]


def _probe_completion_after_recovery() -> list[Step]:
    # Cluster recovery applies a completion receipt (the lease is released, lease_expired);
    # then the old Worker's own completion arrives with the fence it had.
    running = AcknowledgeRunning(RUN, A1, fence(2), WORKER, "pid:1", T0 + 2)
    receipt = CompletedEvidence(CompletionOutcome.SUCCEEDED, 1, 0, T0 + 2)
    late = CompleteWithLease(RUN, A1, fence(3), WORKER, 1, CompletionOutcome.SUCCEEDED, 0)
    at = T0 + LEASE_MS
    return [
        *started(),
        (T0 + 2, running),
        (at, RecoverRuntime(RUN, A1, receipt)),
        (at + 1, late),
    ]


def _probe_completion_with_older_fence() -> list[Step]:
    running = AcknowledgeRunning(RUN, A1, fence(2), WORKER, "pid:1", T0 + 2)
    done = CompleteWithLease(RUN, A1, fence(3), WORKER, 1, CompletionOutcome.SUCCEEDED, 0)
    older = dataclasses.replace(done, fence=fence(2))
    return [*started(), (T0 + 2, running), (T0 + 3, done), (T0 + 4, older)]


def _probe_starting_replay() -> list[Step]:
    return [*started(), (T0 + 2, AcknowledgeStarting(RUN, A1, fence(1), WORKER))]


def _probe_exhaustion() -> list[Step]:
    grant = GrantLease(RUN, A2, WORKER, TOKEN_2, LEASE_MS)
    second = Fence("w1", "w1-s1", 1, 1, TOKEN_2, 1)
    at = T0 + LEASE_MS
    return [
        *requeued(),
        (at, grant),
        (at + 1, AcknowledgeStarting(RUN, A2, second, WORKER)),
        (at + LEASE_MS, ExpireWithLease(RUN, A2, 1, Profile.EDGE)),
        (at + LEASE_MS, LostRetryStep(RUN, "q1-a3")),
    ]


def _probe_intent() -> list[Step]:
    at = T0 + LEASE_MS
    return [*lost(), (at, RequestCancel(RUN, CancelReason.USER)), (at, LostRetryStep(RUN, A2))]


def _probe_backoff() -> list[Step]:
    return [*lost(BACKOFF), (T0 + LEASE_MS, LostRetryStep(RUN, A2))]


def _probe_early() -> list[Step]:
    # lost at T0 + LEASE_MS, due 1,000 ms later; one ms before that it is not due (R6)
    due = T0 + LEASE_MS + 1_000
    return [*_probe_backoff(), (due - 1, LostRetryStep(RUN, A2))]


def _probe_converge() -> list[Step]:
    at = T0 + 2
    return [*started(), (at, RequestCancel(RUN, CancelReason.USER)), (at, ConvergeCancel(RUN))]


def _probe_revoked() -> list[Step]:
    """Appendix E-1: cancel while starting, the lease expires (T9 releases it), converge."""
    at = T0 + LEASE_MS
    return [
        *started(),
        (T0 + 2, RequestCancel(RUN, CancelReason.USER)),
        (at, ExpireWithLease(RUN, A1, 1, Profile.EDGE)),
        (at + 1, ConvergeCancel(RUN)),
    ]


def _probe_recovery() -> list[Step]:
    return [*started(), (T0 + LEASE_MS, RecoverRuntime(RUN, A1, None))]


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "fence_session_unchecked",
        "LEASE-02",
        "§1.7 fence check 4: worker session, LEASE_WORKER_SESSION_MISMATCH",
        "fence_identity no longer compares the fence's worker session with the lease's",
        (
            SourcePatch(
                LEASE,
                "    if lease.worker_session_id != fence.worker_session_id:\n"
                "        return Rejected(Code.LEASE_WORKER_SESSION_MISMATCH)\n",
                "",
            ),
        ),
        _probe_session,
    ),
    Mutant(
        "fence_accepts_offline_worker",
        "LEASE-04",
        "§1.7 fence check 11: an offline Worker session is not current (WORKER_UNAVAILABLE)",
        "worker_is_current drops the `status is not offline` clause",
        (SourcePatch(LEASE, "        and worker.status is not WorkerSessionStatus.OFFLINE\n", ""),),
        _probe_offline,
    ),
    Mutant(
        "fence_live_at_expiry",
        "LEASE-04",
        "§1.4/§1.7 fence check 10: live only while expires_at_ms > observed_at_ms",
        "fence_live rejects LEASE_EXPIRED on `expires_at_ms < now` instead of `<=`",
        (SourcePatch(LEASE, "if lease.expires_at_ms <= now:", "if lease.expires_at_ms < now:"),),
        _probe_renew_at_expiry,
    ),
    Mutant(
        "expiry_one_ms_late",
        "LEASE-07",
        "§1.7 T7/T8 guard `expires_at_ms <= observed_at_ms` (T10 only while live)",
        "expire_with_lease answers not_expired on `expires_at_ms >= now` instead of `>`",
        (SourcePatch(LEASE, "if lease.expires_at_ms > now:", "if lease.expires_at_ms >= now:"),),
        lost,
        aim="retry",
    ),
    Mutant(
        "cluster_expiry_marks_lost",
        "LEASE-12",
        "E-1: on cluster expire_with_lease never makes a started Attempt lost",
        "LOST_REQUIRES_EVIDENCE[cluster] is False, so cluster expiry applies T8",
        (SourcePatch(PROFILES, "Profile.CLUSTER: True,", "Profile.CLUSTER: False,"),),
        _probe_cluster_expiry,
        aim="retry",
    ),
    Mutant(
        "lease_version_bumped_twice",
        "LEASE-01",
        "V-2: every successful lease mutation adds exactly 1 to the lease version",
        "renew_lease writes renewed_at and expires_at as two set_lease calls (+2)",
        (
            SourcePatch(
                LEASE,
                "        renewed_at_ms=observed_at_ms,\n",
                "        renewed_at_ms=observed_at_ms,\n"
                "    )\n"
                "    tx.set_lease(\n"
                "        attempt.attempt_id,\n"
                "        lease.lease_generation,\n",
            ),
        ),
        _probe_renew,
    ),
    Mutant(
        "completion_replay_on_released_lease",
        "LEASE-09",
        "T6r: exact replay only on a `completed` lease; after release the fence fails",
        "the T6r guard takes any final lease (`released` too), not only `completed`",
        (
            SourcePatch(
                LEASE,
                "lease.status is LeaseStatus.COMPLETED\n",
                "lease.status in (LeaseStatus.COMPLETED, LeaseStatus.RELEASED)\n",
            ),
        ),
        _probe_completion_after_recovery,
    ),
    Mutant(
        "completion_replay_older_fence",
        "LEASE-03",
        "T6r: replay iff lease.version == expected_version + 1; any other version is rejected",
        "the T6r version test is `>=` instead of `==`, so an older fence replays",
        (
            SourcePatch(
                LEASE,
                "lease.status is LeaseStatus.COMPLETED\n"
                "        and lease.version == command.fence.expected_version + 1",
                "lease.status is LeaseStatus.COMPLETED\n"
                "        and lease.version >= command.fence.expected_version + 1",
            ),
        ),
        _probe_completion_with_older_fence,
    ),
    Mutant(
        "starting_replay_appends_event",
        "RUN-03",
        "T2r: Replayed(already_applied), a replay appends no Event",
        "the T2r replay commits an `attempt.starting` Event (and a Run version)",
        (
            SourcePatch(
                LEASE,
                "AttemptStatus.STARTING and lease.status is LeaseStatus.LEASED:\n"
                "        return Replayed(Code.ALREADY_APPLIED)\n",
                "AttemptStatus.STARTING and lease.status is LeaseStatus.LEASED:\n"
                "        replay = Tx.begin(aggregate, command.name, observed_at_ms)\n"
                '        replay.event("attempt.starting", Actor.WORKER, attempt.attempt_id)\n'
                "        return replay.commit(Code.ALREADY_APPLIED)\n",
            ),
        ),
        _probe_starting_replay,
    ),
    Mutant(
        "max_attempts_off_by_one",
        "RETRY-05",
        "R3: latest.number >= max_attempts fails with RUN_LOST_RETRY_EXHAUSTED",
        "decide tests `latest.number > max_attempts`: one Attempt more than allowed",
        (
            SourcePatch(
                LOST_RETRY,
                "if latest.number >= policy.max_attempts:",
                "if latest.number > policy.max_attempts:",
            ),
        ),
        _probe_exhaustion,
        aim="retry",
    ),
    Mutant(
        "retry_ignores_cancel_intent",
        "RETRY-11",
        "§1.8.1 eligibility and §1.9: an intent always wins over retry",
        "is_lost_retry_eligible drops `not run.has_cancel_intent`",
        (SourcePatch(LOST_RETRY, "        and not run.has_cancel_intent\n", ""),),
        _probe_intent,
        aim="retry",
    ),
    Mutant(
        "backoff_exponent_off_by_one",
        "RETRY-06",
        "§1.8.1: next_attempt_at_ms = base + min(max, base_ms * 2 ** min(n - 1, 15))",
        "the backoff exponent is min(n, 15): every delay is doubled",
        (
            SourcePatch(
                POLICY,
                "exponent = min(attempt_number - 1, BACKOFF_EXPONENT_CAP)",
                "exponent = min(attempt_number, BACKOFF_EXPONENT_CAP)",
            ),
        ),
        _probe_backoff,
        aim="retry",
    ),
    Mutant(
        "retry_requeued_before_due",
        "RETRY-07",
        "R5/R6: requeue only when next_attempt_at_ms <= observed_at_ms, else NOT_DUE",
        "the R5 due check has 1 ms of tolerance (`<= observed_at_ms + 1`)",
        (
            SourcePatch(
                LOST_RETRY, "and due_at <= observed_at_ms:", "and due_at <= observed_at_ms + 1:"
            ),
        ),
        _probe_early,
        aim="retry",
    ),
    Mutant(
        "requeue_keeps_policy_cursor",
        "RETRY-08",
        "R5: the policy's next_attempt_at_ms is cleared (version+1) with the requeue; I-3",
        "the requeue forgets `tx.set_policy(next_attempt_at_ms=None)`",
        (
            SourcePatch(
                LOST_RETRY,
                "    tx.set_policy(next_attempt_at_ms=None)\n"
                "    tx.set_run(status=RunStatus.QUEUED",
                "    tx.set_run(status=RunStatus.QUEUED",
            ),
        ),
        requeued,
        aim="retry",
    ),
    Mutant(
        "requeue_creates_attempt_n_plus_2",
        "RUN-02",
        "R5: insert Attempt number = latest.number + 1 (no gap, I-1)",
        "the requeued Attempt is numbered latest.number + 2",
        (SourcePatch(LOST_RETRY, "number=latest.number + 1,", "number=latest.number + 2,"),),
        requeued,
        aim="retry",
    ),
    Mutant(
        "lost_retry_event_not_reconciler",
        "RETRY-19",
        "§1.8.1: every Event lost_retry_step appends carries actor `reconciler`",
        "the R4 `run.retry_wait` Event is attributed to the scheduler",
        (
            SourcePatch(
                LOST_RETRY,
                'tx.event("run.retry_wait", Actor.RECONCILER,',
                'tx.event("run.retry_wait", Actor.SCHEDULER,',
            ),
        ),
        _probe_backoff,
        aim="retry",
    ),
    Mutant(
        "converge_cancel_while_starting",
        "RUN-01",
        "§1.9: converge only with no live execution (dispatching only with a claimed Attempt)",
        "has_no_live_execution also accepts a dispatching Run whose Attempt is `starting`",
        (
            SourcePatch(
                CANCELLATION,
                "        and latest.status is AttemptStatus.CLAIMED\n    )",
                "        and latest.status in (AttemptStatus.CLAIMED, AttemptStatus.STARTING)\n"
                "    )",
            ),
        ),
        _probe_converge,
    ),
    Mutant(
        "converge_ignores_revoked_authority",
        "E-1",
        "Appendix E-1: a started remote Attempt whose lease T9 released has no live execution",
        "has_no_live_execution drops the E-1 clause: such a Run stays running forever (R-2)",
        (
            SourcePatch(
                CANCELLATION,
                "    return claimed or has_revoked_remote_authority(aggregate)\n",
                "    return claimed\n",
            ),
        ),
        _probe_revoked,
    ),
    Mutant(
        "revoked_convergence_keeps_attempt_started",
        "E-1",
        "Appendix E-1: one transaction ends the Attempt too (`cancelled` / `timed_out`)",
        "converge_cancel ends only a claimed Attempt: the revoked one stays started",
        (
            SourcePatch(
                CANCELLATION,
                "    ended = latest if claimed or revoked else None\n",
                "    ended = latest if claimed else None\n",
            ),
        ),
        _probe_revoked,
    ),
    Mutant(
        "recovery_without_evidence_marks_lost",
        "REC-03",
        "§2.3: a started Attempt becomes lost only with trusted not-running evidence",
        "recover_runtime reads missing evidence as not_running",
        (
            SourcePatch(
                RECOVERY,
                "    if command.evidence is None:\n"
                "        return Replayed(Code.EVIDENCE_REQUIRED)\n"
                "    return resolve_started(aggregate, latest, command.evidence,",
                "    evidence = command.evidence if command.evidence is not None "
                "else NotRunningEvidence()\n"
                "    return resolve_started(aggregate, latest, evidence,",
            ),
        ),
        _probe_recovery,
        aim="retry",
    ),
    Mutant(
        "lost_keeps_lease_leased",
        "LEASE-07",
        "§2.4 / I-4: lost and the lease release (lease_expired, version+1) are one fact",
        "mark_lost no longer releases the Attempt's leased lease",
        (
            SourcePatch(
                LEASE,
                "    release_current_lease(tx, attempt, ReleaseReason.LEASE_EXPIRED)\n"
                "    tx.set_attempt(\n"
                "        attempt.attempt_id,\n"
                "        status=AttemptStatus.LOST,",
                "    tx.set_attempt(\n"
                "        attempt.attempt_id,\n"
                "        status=AttemptStatus.LOST,",
            ),
        ),
        lost,
        aim="retry",
    ),
    # -- Workflow mutants (SPEC §4, ADR-0229), hunted by the Workflow model first -------------
    Mutant(
        "wf_frontier_ready_after_failed_dependency",
        "WF-14",
        "§4.4 frontier (decision WF-2): ready only when every dependency succeeded",
        "frontier_changes promotes a step whose dependencies are final, whatever their outcome",
        (
            SourcePatch(
                WF_RULES,
                "            if all(d is StepRunStatus.SUCCEEDED for d in deps):\n"
                "                target = StepRunStatus.READY\n",
                "            if all(d.final for d in deps):\n"
                "                target = StepRunStatus.READY\n",
            ),
        ),
        _probe_wf_failed_dependency,
        aim="workflow",
    ),
    Mutant(
        "wf_frontier_finishes_parent_early",
        "WF-05",
        "§4.4 / I-W3: the frontier ends the parent only when every StepRun is final",
        "advance_frontier ends the parent once any StepRun is final",
        (
            SourcePatch(
                WF_FRONTIER,
                "    if all(s.status.final for s in steps):\n",
                "    if any(s.status.final for s in steps):\n",
            ),
        ),
        _probe_wf_frontier_after_first,
        aim="workflow",
    ),
    Mutant(
        "wf_dispatch_under_cancel_intent",
        "WF-04",
        "§4.3: dispatchable only with a `running` parent without cancellation intent",
        "prepare_task and dispatchable check only that the parent is running",
        (
            SourcePatch(
                WF_EXECUTION,
                "    if wf.run.has_cancel_intent:\n"
                "        return Rejected(Code.CANCEL_REQUESTED)\n"
                "    if not dispatchable(wf, attempt):\n",
                "    if not dispatchable(wf, attempt):\n",
            ),
            SourcePatch(
                WF_RULES,
                "        and step.version == entry.step_run_version\n"
                "        and open_for_tasks(wf)\n",
                "        and step.version == entry.step_run_version\n"
                "        and wf.run.status is RunStatus.RUNNING\n",
            ),
        ),
        _probe_wf_prepare_under_intent,
        aim="workflow",
    ),
    Mutant(
        "wf_convergence_without_stop",
        "WF-16",
        "§4.4 phase 1 / §4.8: converge only after every started process was stopped exactly",
        "converge_workflow_cancel drops the LIVE_EXECUTION refusal",
        (
            SourcePatch(
                WF_CANCELLATION,
                "    if any(a.attempt_id not in stopped for a in started):\n"
                "        return Rejected(Code.LIVE_EXECUTION)\n",
                "",
            ),
        ),
        _probe_wf_converge_unstopped,
        aim="workflow",
    ),
    Mutant(
        "wf_recovery_not_running_retries_step",
        "WF-08",
        "§4.5 [decision]: not-running evidence: Attempt lost, StepRun failed, no new epoch",
        "recover_task_startup reads not_running as a failed run and retries the step",
        (
            SourcePatch(
                WF_RECOVERY,
                "tx, wf, attempt, step, AttemptStatus.LOST, actor=Actor.RECONCILER,\n"
                "            error_code=lost, retry=False,\n",
                "tx, wf, attempt, step, AttemptStatus.FAILED, actor=Actor.RECONCILER,\n"
                "            error_code=lost,\n",
            ),
        ),
        _probe_wf_recover_not_running,
        aim="workflow",
    ),
    Mutant(
        "wf_recovery_unknown_fails_open",
        "WF-08",
        "§4.5 / §2.1: unknown evidence writes nothing (fail closed)",
        "recover_task_startup reads unknown evidence as not_running",
        (
            SourcePatch(
                WF_RECOVERY,
                "    if isinstance(evidence, UnknownEvidence):\n"
                "        return Rejected(Code(evidence.reason.value))\n",
                "    if isinstance(evidence, UnknownEvidence):\n"
                "        evidence = NotRunningEvidence()\n",
            ),
        ),
        _probe_wf_recover_unknown,
        aim="workflow",
    ),
    Mutant(
        "wf_start_time_from_clock",
        "WF-11",
        "§4.7 / I-W5: the Attempt's started_at_ms is the handle fact, never a clock read",
        "record_task_handle stores the observation time as the Attempt's start",
        (
            SourcePatch(
                WF_EXECUTION,
                "        executor_handle=command.executor_handle,\n"
                "        started_at_ms=command.started_at_ms,\n",
                "        executor_handle=command.executor_handle,\n"
                "        started_at_ms=observed_at_ms,\n",
            ),
        ),
        _probe_wf_handle_fact,
        aim="workflow",
    ),
    Mutant(
        "wf_admission_replay_checks_current_epoch",
        "WF-17",
        "§4.3: the same (step_run_id, v) again returns the existing entry, whatever happened since",
        "admit_task looks the ledger up at the StepRun's current epoch, not the command's",
        (
            SourcePatch(
                WF_ADMISSION,
                "    if wf.admission_for(step.step_run_id, command.step_run_version)"
                " is not None:\n",
                "    if wf.admission_for(step.step_run_id, step.version) is not None:\n",
            ),
        ),
        _probe_wf_stale_admission_replay,
        aim="workflow",
    ),
)


def by_name(name: str) -> Mutant:
    for mutant in MUTANTS:
        if mutant.name == name:
            return mutant
    raise KeyError(name)
