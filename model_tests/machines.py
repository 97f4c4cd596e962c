"""Hypothesis `RuleBasedStateMachine` models of the Run domain (SPEC §1, §2; issue 3 item 2).

- `RunLifecycleMachine`: several Runs (random policies, rejected ones included), two or three
  Workers whose sessions and generations change (restart, drain, offline, session expiry: the
  control plane's registry, passed in with each command as a `WorkerSession`), and the dispatch
  fences held in a `Bundle`, so old fences keep colliding with live ones. Faults are ordinary
  rules: lost response, duplicate delivery, crash before commit, I/O error at effect k, stale
  fence, clock skew and reopen.
- `RetryExhaustionMachine`: policies over `max_attempts` 1..16, every safety level and a range of
  backoffs; Runs whose Attempts keep getting lost (lease expiry on edge, runtime recovery on
  cluster, local startup recovery) must end with exactly the code of the §1.8.1 precedence after
  at most `max_attempts` Attempts, and never leave `retry_wait` early.

Every command goes through a `conformance.run.recorder.Recorder`, so the reference store is the
system under model and every machine run can be written as a trace (`write_trace`,
`record_trace`). The properties are checked by `@invariant`s after every step (see
`model_tests.harness`); `STATS` counts steps, commands and invariant checks.

The machines run under Hypothesis (`Machine.TestCase`, settings from `machine_settings`) and,
for long model checking and trace generation, under a seeded driver (`drive`, `random_step`)
that picks the same rules with the same argument domains (`DRIVER` tables).

Using them elsewhere (for example with a planted kernel bug):

    run_state_machine_as_test(RunLifecycleMachine, settings=machine_settings(RunLifecycleMachine))

raises when the bug is caught (a `ModelViolation` naming the SPEC id, or the kernel's own
icontract `ViolationError`); add `phases=[Phase.generate]` to the settings to skip shrinking.
`drive(RetryExhaustionMachine(seed=s), random.Random(s), steps)` is the faster seeded
alternative. Class-level knobs: `Machine.configured(MAX_LIVE_RUNS=1, EXPIRY_PROFILES=(...,))`.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    rule,
)

from conformance.run.pages import SourceQuery
from conformance.run.trace import Trace, TraceHeader, dumps
from kernel import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    ActivateLocal,
    AdmitRun,
    Applied,
    CancelReason,
    CompletedEvidence,
    CompleteLocal,
    CompleteWithLease,
    CompletionOutcome,
    ConvergeCancel,
    Evidence,
    ExpireWithLease,
    FailStart,
    Fence,
    GrantLease,
    LiveEvidence,
    LocalReceipt,
    LostRetryStep,
    NotRunningEvidence,
    PolicyDefinition,
    Profile,
    RecordLocalHandle,
    RecordLocalStop,
    RecoverLocalStartup,
    RecoverRuntime,
    RenewLease,
    RequestCancel,
    RunAggregate,
    RunRetryPolicy,
    Safety,
    Secret,
    StopResult,
    UnknownEvidence,
    UnknownReason,
    WorkerSession,
    WorkerSessionStatus,
    apply,
)
from kernel.commands import Command
from kernel.specs.codes import Code
from kernel.specs.states import AttemptStatus, LeaseStatus, RunStatus
from model_tests import oracle
from model_tests.harness import (
    STATS,
    Harness,
    MachineCounts,
    ModelStats,
    ModelViolation,
    Record,
    require,
)
from model_tests.oracle import FENCED_TYPES, FencedCommand

__all__ = [
    "BUDGETS",
    "MACHINES",
    "MIN_TOTAL_STEPS",
    "STATS",
    "Budget",
    "MachineCounts",
    "ModelMachine",
    "ModelStats",
    "ModelViolation",
    "RetryExhaustionMachine",
    "RunLifecycleMachine",
    "active_profile",
    "drive",
    "machine_settings",
    "record_trace",
    "write_trace",
]

T = TypeVar("T")

REMOTE = "shell"
LOCAL = "local"
PROJECT = "proj"
TASK = "task"
NEVER_MS = 10**13  # a session that does not expire within any model run


# -- argument domains (shared by the Hypothesis rules and the seeded driver) -------------------
class _Ref:
    """A driver domain that is drawn from the machine's state (a Bundle's mirror)."""

    def __init__(self, name: str) -> None:
        self.name = name


RUNS_REF = _Ref("runs")
FENCES_REF = _Ref("fences")
PICKS_REF = _Ref("picks")  # six small integers (`PICKS` for Hypothesis)
Domain = Sequence[Any] | _Ref

DURATIONS = (5_000, 5_000, 30_000, 4_999)
TICKS = (1, 7, 100, 1_000, 4_999, 5_000, 31_000, 31_000)
BOUNDARY = (-1, 0, 1)
HANDLES = ("pid:1", "pid:2")
START_OFFSETS = (0, 0, 1)
SEQUENCES = (1, 1, 2)
OUTCOMES = tuple(CompletionOutcome)
EXIT_CODES = (None, 0, 1)
CANCEL_REASONS = tuple(CancelReason)
EXPIRY_PROFILES = (Profile.EDGE, Profile.CLUSTER)
BOOLS = (True, False)
PREFER = (True, True, True, False)
WORKER_INDEXES = (0, 1, 2)
WORKER_CHANGES = (
    "restart",
    "online",
    "online",
    "draining",
    "offline",
    "session_expires_now",
    "session_expires_soon",
    "session_renewed",
)
SKEWS = (1, 1_000, 60_000)
STOP_RESULTS = tuple(StopResult)
EXECUTORS = (REMOTE, REMOTE, REMOTE, LOCAL)
EVIDENCE: tuple[Evidence | None, ...] = (
    NotRunningEvidence(),
    NotRunningEvidence(),
    LiveEvidence(),
    UnknownEvidence(UnknownReason.PROBE_FAILED),
    UnknownEvidence(UnknownReason.RECEIPT_CONFLICT),
    CompletedEvidence(CompletionOutcome.SUCCEEDED, 1, 0),
    CompletedEvidence(CompletionOutcome.FAILED, 1, 1),
    CompletedEvidence(CompletionOutcome.SUCCEEDED, 0, 0),
    CompletedEvidence(CompletionOutcome.CANCELLED, 2, None),
    None,
)
FENCED_KINDS = ("ack_starting", "ack_running", "renew", "complete", "fail_start")
COMMAND_KINDS = (
    *FENCED_KINDS,
    "admit",
    "grant",
    "expire",
    "request_cancel",
    "converge",
    "lost_retry",
    "recover_startup",
    "recover_runtime",
    "activate_local",
    "local_handle",
    "complete_local",
    "local_stop",
)
# Commands the fault rules wrap: "next" (the natural next command of some Run) most often, so
# faults hit commands that would commit.
FAULT_KINDS = ("next",) * len(COMMAND_KINDS) + COMMAND_KINDS
FENCE_FIELDS = ("worker_id", "session", "worker_generation", "lease_generation", "token", "version")
REPLAY_VARIANTS = (
    "exact",
    "exact",
    "exact_earlier",
    "sequence",
    "outcome",
    "exit_code",
    "version",
    "older_version",  # LEASE-03: an older fence of the same lease is a change, not a replay
    "token",
    "session",
)
PICK_RANGE = 256
PAGE_LIMITS = (1, 2, 16)  # page sizes (P-1): 1 and 2 make has_more and the cut-off matter
PICKS = st.tuples(*(st.integers(0, PICK_RANGE - 1) for _ in range(6)))

LIFECYCLE_POLICIES: tuple[PolicyDefinition | None, ...] = (
    None,
    PolicyDefinition(3, True, Safety.IDEMPOTENT, 0, 0),
    PolicyDefinition(3, True, Safety.IDEMPOTENT, 0, 0),
    PolicyDefinition(2, True, Safety.DEDUPLICATED, 1_000, 60_000),
    PolicyDefinition(4, True, Safety.IDEMPOTENT, 1_000, 60_000),
    PolicyDefinition(4, True, Safety.DEDUPLICATED, 0, 0),
    PolicyDefinition(1, True, Safety.IDEMPOTENT, 0, 0),
    PolicyDefinition(3, False, Safety.UNKNOWN, 0, 0),
    PolicyDefinition(3, True, Safety.UNKNOWN, 0, 0),  # enabled + unknown: admission refused
    PolicyDefinition(0, True, Safety.IDEMPOTENT, 0, 0),  # invalid
    PolicyDefinition(17, True, Safety.IDEMPOTENT, 0, 0),  # invalid
    PolicyDefinition(2, True, Safety.IDEMPOTENT, 5_000, 1_000),  # invalid: base > max
)
BACKOFFS = (
    (0, 0),
    (0, 60_000),
    (1, 1),
    (1_000, 60_000),
    (30_000, 30_000),
    (1_000, 86_400_000),
    (86_400_000, 86_400_000),
)
RETRY_POLICIES: tuple[PolicyDefinition | None, ...] = (
    None,
    *(
        PolicyDefinition(m, on_lost, safety, base, top)
        for m in range(1, 17)
        for on_lost in (True, False)
        for safety in (Safety.IDEMPOTENT, Safety.DEDUPLICATED, Safety.UNKNOWN)
        for base, top in BACKOFFS
    ),
)
RETRY_WAITS: tuple[tuple[str, int], ...] = (
    ("tick", 0),
    ("tick", 1_000),
    ("tick", 3_600_000),
    ("due", -1),
    ("due", 0),
    ("due", 0),
    ("due", 1),
)
LOSS_PATHS = ("edge", "edge", "cluster")
RETRY_MODES = ("normal", "normal", "normal", "normal", "duplicate", "lost_response")
RARE_CANCEL: tuple[CancelReason | None, ...] = (
    *([None] * 19),
    CancelReason.USER,
    CancelReason.TIMEOUT,
)


def _s(domain: Sequence[T]) -> st.SearchStrategy[T]:
    return st.sampled_from(tuple(domain))


class Picks:
    """Choices from a tuple of small integers: the same code serves Hypothesis (which draws the
    integers and can shrink them) and the seeded driver."""

    def __init__(self, values: Sequence[int]) -> None:
        self._values = tuple(values) or (0,)
        self._i = 0

    def next(self) -> int:
        value = self._values[self._i % len(self._values)]
        self._i += 1
        return value

    def choice(self, seq: Sequence[T]) -> T:
        return seq[self.next() % len(seq)]


@dataclass(frozen=True, slots=True)
class Held:
    """A fence a Worker holds: issued at grant time and refreshed from each reply."""

    serial: int
    run_id: str
    attempt_id: str
    fence: Fence

    def __repr__(self) -> str:  # the token stays redacted (S-1); ids make shrunk runs readable
        f = self.fence
        return (
            f"Held#{self.serial}({self.attempt_id} g{f.lease_generation} v{f.expected_version} "
            f"{f.worker_session_id})"
        )


@dataclass(frozen=True, slots=True)
class DriverRule:
    """One rule as the seeded driver sees it: its method, argument domains and precondition."""

    name: str
    params: Mapping[str, Domain]
    enabled: str | None = None  # name of a `() -> bool` method
    weight: int = 1


# -- budgets and profiles ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Budget:
    examples: int
    steps: int  # `stateful_step_count`


BUDGETS: Mapping[str, Mapping[str, Budget]] = {
    # ci: deterministic (the profile is derandomized); about 59,000 steps, ~75 s on one core.
    "ci": {"lifecycle": Budget(400, 100), "retry": Budget(300, 70)},
    "dev": {"lifecycle": Budget(400, 100), "retry": Budget(300, 70)},
    # deep: randomized, >= 1,000,000 steps; `python -m model_tests.deep` is the faster way.
    "deep": {"lifecycle": Budget(5_000, 150), "retry": Budget(5_000, 80)},
}
MIN_TOTAL_STEPS: Mapping[str, int] = {"ci": 50_000, "dev": 50_000, "deep": 1_000_000}


def active_profile() -> str:
    """The loaded Hypothesis profile (root conftest: `QL3_HYPOTHESIS_PROFILE`, default ci)."""
    return settings.get_current_profile_name()


def machine_settings(machine: type[ModelMachine], profile: str | None = None) -> settings:
    """The active profile's settings with the machine's step budget for that profile."""
    name = profile if profile is not None else active_profile()
    budget = BUDGETS.get(name, BUDGETS["ci"])[machine.NAME]
    return budget_settings(budget, profile)


def budget_settings(budget: Budget, profile: str | None = None) -> settings:
    """`profile`'s settings (the active ones when None) with `budget`'s examples and steps,
    no deadline, and the health checks a long stateful run trips suppressed."""
    parent = settings.default
    if profile is not None:
        try:
            parent = settings.get_profile(profile)
        except InvalidArgument:
            parent = settings.default
    return settings(
        parent,
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


# -- the shared machine ------------------------------------------------------------------------
class ModelMachine(RuleBasedStateMachine):
    """The harness and the generic `@invariant`s every model shares."""

    NAME: ClassVar[str] = "model"
    DRIVER: ClassVar[tuple[DriverRule, ...]] = ()
    EXPIRY_PROFILES: ClassVar[tuple[Profile, ...]] = EXPIRY_PROFILES

    def __init__(self, *, seed: int = 0, trace_name: str | None = None) -> None:
        super().__init__()
        # The header names one deployment profile (the trace schema allows exactly one): the
        # first the machine's expiry commands use. Each `expire_with_lease` carries its own.
        profiles = ", ".join(p.value for p in self.EXPIRY_PROFILES)
        header = TraceHeader(
            name=trace_name or f"model-{self.NAME}-{seed}",
            component="run",
            profile=self.EXPIRY_PROFILES[0].value,
            seed=seed,
            description=(
                f"{type(self).__name__} run (model_tests.machines); expiry profiles: {profiles}"
            ),
        )
        self.h = Harness(self.NAME, header, known_stale=self.fence_is_stale)
        self.h.counts.instances += 1
        self.seed = seed

    @classmethod
    def configured(cls, **knobs: object) -> type[ModelMachine]:
        """A subclass with some class-level knobs changed (e.g. `MAX_LIVE_RUNS`, `MAX_RUNS`,
        `EXPIRY_PROFILES`, `LEASE_MS`), for the quality tier or a focused run:
        `RunLifecycleMachine.configured(EXPIRY_PROFILES=(Profile.CLUSTER,)).TestCase`."""
        unknown = sorted(k for k in knobs if not k.isupper() or not hasattr(cls, k))
        if unknown:
            raise TypeError(f"{cls.__name__} has no knob(s) {unknown}")
        return type(f"{cls.__name__}Configured", (cls,), dict(knobs))

    # -- hooks --
    def fence_is_stale(self, command: FencedCommand) -> bool:
        return False

    def _step(self) -> None:
        self.h.counts.steps += 1

    @property
    def now(self) -> int:
        return self.h.now

    def agg(self, run_id: str) -> RunAggregate | None:
        return self.h.state.agg(run_id)

    def trace(self) -> Trace:
        """The recorded trace, its header's capabilities listing what the steps need (the
        capability names of `conformance.run.adapter.ReferenceAdapter`). Every runner persists
        every kernel command, recovery commands included (the kernel decides, the store keeps
        rows); capabilities name what only some runners have: fault injection and the sources
        and page semantics of page steps (decision M-3; the recorder adds them)."""
        return self.h.trace()

    # -- invariants (run by Hypothesis after every step; `check_all` for the driver) --
    @invariant()
    def kernel_invariants_hold(self) -> None:
        """RUN-01: I-1..I-9 (I-7 with the stored Events) for every Run in the store."""
        self.h.checked(self.h.check_kernel_invariants())

    @invariant()
    def final_rows_never_change(self) -> None:
        """RUN-08, I-5, LEASE-01: lost/terminal Attempts, final leases, terminal Runs, Events."""
        self.h.checked(self.h.check_finality())

    @invariant()
    def faults_and_refusals_write_nothing(self) -> None:
        """RUN-06 (model side), RUN-03: crash before commit, I/O error, reopen and every
        non-applied outcome leave the projection byte-for-byte unchanged."""
        self.h.checked(self.h.check_no_write())

    @invariant()
    def replays_never_add_attempts(self) -> None:
        """RUN-02, RETRY-09: gapless numbering; replays and duplicates converge."""
        self.h.checked(self.h.check_replays())

    @invariant()
    def stale_fences_never_apply(self) -> None:
        """LEASE-02, LEASE-04, LEASE-09."""
        self.h.checked(self.h.check_fences())

    @invariant()
    def completion_replay_converges(self) -> None:
        """LEASE-03."""
        self.h.checked(self.h.check_completion_replays())

    @invariant()
    def cancellation_beats_retry(self) -> None:
        """RETRY-11."""
        self.h.checked(self.h.check_cancel_beats_retry())

    @invariant()
    def transitions_follow_the_spec(self) -> None:
        """T1, T7..T10, R1..R6, §1.9, §2: the model's own reading of each transition."""
        self.h.checked(self.h.check_transitions())

    GENERIC_INVARIANTS: ClassVar[tuple[str, ...]] = (
        "kernel_invariants_hold",
        "final_rows_never_change",
        "faults_and_refusals_write_nothing",
        "replays_never_add_attempts",
        "stale_fences_never_apply",
        "completion_replay_converges",
        "cancellation_beats_retry",
        "transitions_follow_the_spec",
    )
    EXTRA_INVARIANTS: ClassVar[tuple[str, ...]] = ()

    def check_all(self) -> None:
        for name in (*self.GENERIC_INVARIANTS, *self.EXTRA_INVARIANTS):
            getattr(self, name)()

    # -- the seeded driver --
    def draw_param(self, rng: random.Random, domain: Domain) -> Any:
        raise NotImplementedError

    def start(self, rng: random.Random) -> None:
        """Run the initialize rules (the driver's counterpart of Hypothesis's)."""

    def random_step(self, rng: random.Random) -> None:
        """One step: an enabled rule with arguments drawn from its domains, then every
        invariant."""
        enabled = [
            r
            for r in self.DRIVER
            if r.enabled is None or bool(getattr(self, r.enabled)())
            if not any(d is FENCES_REF for d in r.params.values()) or self._has_fences()
            if not any(d is RUNS_REF for d in r.params.values()) or self._has_runs()
        ]
        chosen = rng.choices(enabled, weights=[r.weight for r in enabled])[0]
        kwargs = {name: self.draw_param(rng, domain) for name, domain in chosen.params.items()}
        getattr(self, chosen.name)(**kwargs)
        self.check_all()

    def _has_fences(self) -> bool:
        return False

    def _has_runs(self) -> bool:
        return False


def _expect(rec: Record, spec: str, kind: str, code: Code | None = None) -> None:
    """A scripted step's exact outcome."""
    ok = rec.kind == kind and (code is None or rec.code == code.value)
    want = f"{kind} {code.value if code is not None else ''}".rstrip()
    require(ok, spec, f"expected {want}: {rec.where()}")


# -- RunLifecycleMachine -----------------------------------------------------------------------
class RunLifecycleMachine(ModelMachine):
    """Several Runs, two or three Workers, fences in a Bundle, faults as rules.

    Every rule that cannot do its own thing in the current state takes the natural next step of
    some Run instead (`progress`), so an example never stalls when Hypothesis's swarm testing
    switches rules off: Runs reach `lost`, `retry_wait` and later Attempts in most examples.
    """

    NAME: ClassVar[str] = "lifecycle"
    MAX_LIVE_RUNS: ClassVar[int] = 3  # non-terminal Runs at a time
    MAX_RUNS: ClassVar[int] = 8  # Runs per machine run
    MAX_CANCELS: ClassVar[int] = 2  # cancellation intents the rules add per machine run
    runs: Bundle[str] = Bundle("runs")
    fences: Bundle[Held] = Bundle("fences")

    def __init__(self, *, seed: int = 0, trace_name: str | None = None) -> None:
        super().__init__(seed=seed, trace_name=trace_name)
        self.workers: dict[str, WorkerSession] = {}
        self.run_ids: list[str] = []
        self.issued: list[Held] = []
        self.stale: set[Fence] = set()
        self.tokens: dict[tuple[str, int], Secret] = {}  # the Worker's copy of each lease token
        self._serial = 0
        self._fresh = 0
        self.cancels = 0

    # -- model knowledge -----------------------------------------------------------------------
    def fence_is_stale(self, command: FencedCommand) -> bool:
        self._refresh_stale()
        return command.fence in self.stale

    def _refresh_stale(self) -> None:
        """A fence is stale for good once its lease row is final, its version has moved on, or
        its Worker's session was replaced (versions only grow, final rows never change, and the
        registry never goes back to an old session)."""
        for held in self.issued:
            fence = held.fence
            if fence in self.stale:
                continue
            agg = self.agg(held.run_id)
            row = agg.lease(held.attempt_id, fence.lease_generation) if agg is not None else None
            worker = self.workers.get(fence.worker_id)
            if (
                row is None
                or row.status is not LeaseStatus.LEASED
                or row.version > fence.expected_version
                or worker is None
                or worker.session_id != fence.worker_session_id
                or worker.generation != fence.worker_generation
            ):
                self.stale.add(fence)

    def _issue(self, run_id: str, attempt_id: str, fence: Fence) -> Held:
        self._serial += 1
        held = Held(self._serial, run_id, attempt_id, fence)
        self.issued.append(held)
        return held

    def _live_fence(self, agg: RunAggregate) -> tuple[Fence, WorkerSession] | None:
        """The fence of the latest Attempt's live lease as its Worker knows it (its token, and
        the version from the last reply), with the control plane's view of that Worker."""
        latest = agg.latest_attempt
        row = agg.current_lease(latest) if latest is not None else None
        if latest is None or row is None or row.status is not LeaseStatus.LEASED:
            return None
        token = self.tokens.get((row.attempt_id, row.lease_generation))
        if token is None:
            return None
        fence = Fence(
            row.worker_id,
            row.worker_session_id,
            row.worker_generation,
            row.lease_generation,
            token,
            row.version,
        )
        return fence, self.workers.get(row.worker_id, self._worker(0))

    def _fresh_held(self, run_id: str) -> Held | None:
        """A Bundle entry for the live fence of `run_id` after a reply (or a re-read)."""
        agg = self.agg(run_id)
        live = self._live_fence(agg) if agg is not None else None
        if agg is None or live is None:
            return None
        fence = live[0]
        if any(h.fence == fence for h in self.issued[-8:]):
            return None
        latest = agg.latest_attempt
        assert latest is not None
        return self._issue(run_id, latest.attempt_id, fence)

    def deliver(self, command: Command, mode: str = "normal", arg: int = 1) -> Record:
        rec = self.h.deliver(command, mode, arg=arg)
        if isinstance(command, GrantLease):
            agg = self.agg(command.run_id)
            attempt = agg.attempt(command.attempt_id) if agg is not None else None
            if attempt is not None and attempt.lease_generation is not None:
                row = agg.current_lease(attempt) if agg is not None else None
                if row is not None and row.token_digest == command.lease_token.digest():
                    self.tokens[(attempt.attempt_id, attempt.lease_generation)] = (
                        command.lease_token
                    )
        if (
            isinstance(command, AdmitRun)
            and command.run_id not in self.run_ids
            and self.agg(command.run_id) is not None
        ):
            self.run_ids.append(command.run_id)
        return rec

    def _aggs(self) -> list[RunAggregate]:
        return [a for r in self.run_ids if (a := self.agg(r)) is not None]

    def _live_runs(self) -> list[RunAggregate]:
        return [a for a in self._aggs() if not a.run.status.terminal]

    def can_admit(self) -> bool:
        return len(self._live_runs()) < self.MAX_LIVE_RUNS and len(self.run_ids) < self.MAX_RUNS

    def may_cancel(self) -> bool:
        """At most one unconverged cancellation intent at a time (and few per run), so Runs
        live long enough to be lost and retried."""
        live = self._live_runs()
        return (
            self.cancels < self.MAX_CANCELS
            and bool(live)
            and not any(a.run.has_cancel_intent for a in live)
        )

    def _pick_run(
        self, run_id: str | None, p: Picks, wanted: Callable[[RunAggregate], bool]
    ) -> str | None:
        """A Run that `wanted` accepts: the drawn one if it does, else one chosen by `p`."""
        if run_id is not None and (a := self.agg(run_id)) is not None and wanted(a):
            return run_id
        matching = [a.run.run_id for a in self._aggs() if wanted(a)]
        return p.choice(matching) if matching else None

    def _worker(self, index: int) -> WorkerSession:
        ids = sorted(self.workers)
        return self.workers[ids[index % len(ids)]]

    def _online_worker(self, p: Picks) -> WorkerSession:
        usable = [
            w
            for w in self.workers.values()
            if w.status is WorkerSessionStatus.ONLINE and w.session_expires_at_ms > self.now
        ]
        return p.choice(sorted(usable, key=lambda w: w.worker_id)) if usable else self._worker(0)

    def _session_of(self, fence: Fence) -> WorkerSession:
        worker = self.workers.get(fence.worker_id)
        return worker if worker is not None else self._worker(0)

    def _new_attempt_id(self, run_id: str) -> str:
        self._fresh += 1
        return f"{run_id}-n{self._fresh}"

    def _token(self, attempt_id: str, generation: int) -> Secret:
        self._serial += 1
        return self.h.names.token(f"{attempt_id}.g{generation}.t{self._serial}")

    def _has_fences(self) -> bool:
        return bool(self.issued)

    def _has_runs(self) -> bool:
        return bool(self.run_ids)

    def has_completions(self) -> bool:
        return bool(self.h.completions)

    # -- command builders ----------------------------------------------------------------------
    def cmd_admit(self, policy: PolicyDefinition | None, executor: str) -> AdmitRun:
        run_id = f"r{len(self.run_ids) + 1}"
        return AdmitRun(
            run_id=run_id,
            attempt_id=f"{run_id}-a1",
            project_id=PROJECT,
            task_id=TASK,
            task_revision=1,
            executor_type=executor,
            provider_policy=policy,
        )

    def cmd_grant(self, run_id: str, worker: WorkerSession, duration: int) -> GrantLease | None:
        agg = self.agg(run_id)
        latest = agg.latest_attempt if agg is not None else None
        if agg is None or latest is None:
            return None
        generation = 1 + max(
            (x.lease_generation for x in agg.leases if x.attempt_id == latest.attempt_id),
            default=0,
        )
        return GrantLease(
            run_id=run_id,
            attempt_id=latest.attempt_id,
            worker=worker,
            lease_token=self._token(latest.attempt_id, generation),
            lease_duration_ms=duration,
        )

    def cmd_fenced(
        self,
        kind: str,
        held: Held,
        p: Picks,
        run_id: str | None = None,
        worker: WorkerSession | None = None,
    ) -> Command:
        base: dict[str, Any] = {
            "run_id": held.run_id if run_id is None else run_id,
            "attempt_id": held.attempt_id,
            "fence": held.fence,
            "worker": self._session_of(held.fence) if worker is None else worker,
        }
        if kind == "ack_starting":
            return AcknowledgeStarting(**base)
        if kind == "ack_running":
            return AcknowledgeRunning(
                **base,
                executor_handle=p.choice(HANDLES),
                started_at_ms=max(0, self.now - p.choice(START_OFFSETS)),
            )
        if kind == "renew":
            return RenewLease(**base, lease_duration_ms=p.choice(DURATIONS))
        if kind == "complete":
            return CompleteWithLease(
                **base,
                callback_sequence=p.choice(SEQUENCES),
                outcome=p.choice(OUTCOMES),
                exit_code=p.choice(EXIT_CODES),
            )
        return FailStart(**base)

    def cmd_expire(self, run_id: str, profile: Profile, older: bool) -> ExpireWithLease | None:
        agg = self.agg(run_id)
        latest = agg.latest_attempt if agg is not None else None
        if agg is None or latest is None:
            return None
        if older and agg.leases:
            oldest = agg.leases[0]
            return ExpireWithLease(run_id, oldest.attempt_id, oldest.lease_generation, profile)
        return ExpireWithLease(run_id, latest.attempt_id, latest.lease_generation or 1, profile)

    def cmd_evidence(self, run_id: str, evidence: Evidence | None, with_start: bool) -> Evidence:
        if evidence is None:
            evidence = NotRunningEvidence()
        if isinstance(evidence, CompletedEvidence) and with_start:
            agg = self.agg(run_id)
            latest = agg.latest_attempt if agg is not None else None
            if latest is not None:
                started = latest.started_at_ms or latest.created_at_ms
                evidence = dataclasses.replace(evidence, started_at_ms=started)
        return evidence

    def cmd_recover(
        self, run_id: str, runtime: bool, evidence: Evidence | None, with_start: bool
    ) -> Command | None:
        agg = self.agg(run_id)
        latest = agg.latest_attempt if agg is not None else None
        if latest is None:
            return None
        if runtime:
            chosen = None if evidence is None else self.cmd_evidence(run_id, evidence, with_start)
            return RecoverRuntime(run_id, latest.attempt_id, chosen)
        chosen_local = self.cmd_evidence(run_id, evidence, with_start)
        return RecoverLocalStartup(run_id, latest.attempt_id, chosen_local)

    def cmd_local(self, kind: str, run_id: str, p: Picks) -> Command | None:
        agg = self.agg(run_id)
        latest = agg.latest_attempt if agg is not None else None
        if latest is None:
            return None
        attempt_id = latest.attempt_id
        digest = self.h.names.token(f"callback.{attempt_id}").digest()
        if kind == "activate_local":
            return ActivateLocal(run_id, attempt_id, LOCAL, p.choice(SEQUENCES), digest)
        if kind == "local_handle":
            started = max(0, self.now - p.choice(START_OFFSETS))
            return RecordLocalHandle(run_id, attempt_id, p.choice(HANDLES), started)
        if kind == "complete_local":
            forged = p.next() % 5 == 0
            token = self.h.names.token(f"forged.{attempt_id}").digest() if forged else digest
            started = latest.started_at_ms or latest.created_at_ms
            receipt = LocalReceipt(
                run_id,
                attempt_id,
                latest.callback_sequence,
                token,
                p.choice(OUTCOMES),
                started,
                p.choice(EXIT_CODES),
            )
            return CompleteLocal(run_id, attempt_id, receipt)
        return RecordLocalStop(run_id, attempt_id, p.choice(STOP_RESULTS))

    def natural_command(self, run_id: str, p: Picks) -> Command | None:
        """What the control plane or the Worker would most plausibly do next for this Run."""
        agg = self.agg(run_id)
        latest = agg.latest_attempt if agg is not None else None
        if agg is None or latest is None or agg.run.status.terminal:
            return None
        run = agg.run
        local = run.executor_type == LOCAL
        live = self._live_fence(agg)
        lost = run.status in (RunStatus.LOST, RunStatus.RETRY_WAIT)
        if run.has_cancel_intent:
            if lost and p.next() % 2:
                # The retry page meets the Run before convergence does (RETRY-11: raced).
                return LostRetryStep(run_id, self._new_attempt_id(run_id))
            if oracle.no_live_execution(agg):
                return ConvergeCancel(run_id)
            if local:
                if latest.status in (AttemptStatus.STARTING, AttemptStatus.RUNNING) and (
                    p.next() % 3 == 0
                ):
                    # The child's receipt arrives first: it finished on its own, or it was
                    # stopped and a crash lost the L4/L5 record (decision R-27).
                    if p.next() % 2:
                        return self.cmd_recover(run_id, False, p.choice(EVIDENCE), True)
                    return self.cmd_local("complete_local", run_id, Picks((1, p.next(), p.next())))
                return self.cmd_local("local_stop", run_id, p)
            if live is not None and latest.status is AttemptStatus.RUNNING:
                fence, worker = live
                outcome = (
                    CompletionOutcome.TIMED_OUT
                    if run.cancel_reason is CancelReason.TIMEOUT
                    else CompletionOutcome.CANCELLED
                )
                return CompleteWithLease(
                    run_id, latest.attempt_id, fence, worker, 1, outcome, p.choice(EXIT_CODES)
                )
        if lost:
            return LostRetryStep(run_id, self._new_attempt_id(run_id))
        if run.status is RunStatus.QUEUED:
            if local:
                return self.cmd_local("activate_local", run_id, p)
            return self.cmd_grant(run_id, self._online_worker(p), p.choice(DURATIONS[:3]))
        if local:
            if latest.status is AttemptStatus.STARTING and p.next() % 3:
                return self.cmd_local("local_handle", run_id, Picks((0, p.next())))
            if p.next() % 3 == 0:
                return self.cmd_recover(run_id, False, p.choice(EVIDENCE), True)
            return self.cmd_local("complete_local", run_id, Picks((1, p.next(), p.next())))
        row = agg.current_lease(latest)
        late = p.next() % 4 == 0  # the Worker acts just too late (the `<=` edge of LEASE_EXPIRED)
        if (
            row is not None
            and row.status is LeaseStatus.LEASED
            and row.expires_at_ms <= self.now
            and not (late and live is not None)
        ):
            profile = p.choice(self.EXPIRY_PROFILES)
            started = latest.status is not AttemptStatus.CLAIMED
            if profile not in oracle.LOST_ON_EXPIRY and started and p.next() % 2:
                return self.cmd_recover(run_id, True, p.choice(EVIDENCE), True)
            return ExpireWithLease(run_id, latest.attempt_id, row.lease_generation, profile)
        if live is None:
            return self.cmd_recover(run_id, True, p.choice(EVIDENCE), True)
        fence, worker = live
        held = Held(0, run_id, latest.attempt_id, fence)
        if latest.status is AttemptStatus.CLAIMED:
            return self.cmd_fenced("ack_starting", held, p, worker=worker)
        roll = p.next() % 10
        if latest.status is AttemptStatus.STARTING:
            kind = "fail_start" if roll == 0 else "renew" if roll < 3 else "ack_running"
        else:
            kind = "renew" if roll < 3 else "complete"
        if kind == "complete":
            return CompleteWithLease(
                run_id,
                latest.attempt_id,
                fence,
                worker,
                latest.callback_sequence + 1,
                p.choice(OUTCOMES),
                p.choice(EXIT_CODES),
            )
        return self.cmd_fenced(kind, held, p, worker=worker)

    def build(self, kind: str, p: Picks, *, stale_only: bool = False) -> Command | None:
        """Any command of `kind`, its target and arguments chosen by `p` (the fault rules);
        `next` is the natural next command of some Run."""
        if kind in FENCED_KINDS:
            pool = self.issued
            if stale_only:
                self._refresh_stale()
                pool = [h for h in self.issued if h.fence in self.stale] or self.issued
            if not pool:
                return None
            recent = pool[-3:] if p.next() % 2 else pool
            return self.cmd_fenced(kind, p.choice(recent), p)
        if kind == "admit":
            if self.run_ids and (p.next() % 2 or not self.can_admit()):
                agg = self.agg(p.choice(self.run_ids))
                assert agg is not None
                # the exact admission again (a retried request): Replayed(existing)
                return AdmitRun(
                    agg.run.run_id,
                    agg.attempts[0].attempt_id,
                    PROJECT,
                    TASK,
                    1,
                    agg.run.executor_type,
                    None,
                )
            if not self.can_admit():
                return None
            return self.cmd_admit(p.choice(LIFECYCLE_POLICIES), p.choice(EXECUTORS))
        if not self.run_ids:
            return None
        if kind == "next":
            live = [a.run.run_id for a in self._live_runs()]
            return self.natural_command(p.choice(live), p) if live else None
        run_id = p.choice(self.run_ids)
        if kind == "grant":
            return self.cmd_grant(run_id, self._worker(p.next()), p.choice(DURATIONS))
        if kind == "expire":
            return self.cmd_expire(run_id, p.choice(self.EXPIRY_PROFILES), p.next() % 4 == 0)
        if kind == "request_cancel":
            if not self.may_cancel():  # keep intents rare: repeat one (a Replayed request)
                settled = [a.run.run_id for a in self._aggs() if a.run.has_cancel_intent]
                run_id = p.choice(settled) if settled else run_id
            return RequestCancel(run_id, p.choice(CANCEL_REASONS))
        if kind == "converge":
            return ConvergeCancel(run_id)
        if kind == "lost_retry":
            return LostRetryStep(run_id, self._new_attempt_id(run_id))
        if kind in ("recover_startup", "recover_runtime"):
            return self.cmd_recover(
                run_id, kind == "recover_runtime", p.choice(EVIDENCE), p.next() % 2 == 0
            )
        return self.cmd_local(kind, run_id, p)

    # -- rules: set-up and progress ------------------------------------------------------------
    @initialize(count=st.sampled_from((2, 3)))
    def workers_join(self, count: int) -> None:
        self._step()
        for i in range(1, count + 1):
            worker_id = f"w{i}"
            self.workers[worker_id] = WorkerSession(
                worker_id=worker_id,
                session_id=f"{worker_id}-s1",
                generation=1,
                status=WorkerSessionStatus.ONLINE,
                session_expires_at_ms=NEVER_MS,
                executor_types=(REMOTE,),
            )

    def _progress(self, p: Picks) -> Held | None:
        """The natural next step of a live Run (admitting one when there is none): the control
        plane dispatches, Workers acknowledge, renew and complete, leases run out and are
        expired or recovered, lost Runs are retried and cancellations converge."""
        live = self._live_runs()
        if not live or (self.can_admit() and p.next() % 4 == 0):
            if self.can_admit():
                self.deliver(self.cmd_admit(p.choice(LIFECYCLE_POLICIES), p.choice(EXECUTORS)))
            return None
        agg = p.choice(live)
        run_id = agg.run.run_id
        latest = agg.latest_attempt
        assert latest is not None
        # Let time pass where only time makes progress: a retry that is not yet due, or (now
        # and then) a lease that is left to run out.
        if agg.run.status is RunStatus.RETRY_WAIT and agg.policy is not None:
            due = agg.policy.next_attempt_at_ms
            if due is not None and due > self.now:
                self.h.now = due + p.choice(BOUNDARY)
        row = agg.current_lease(latest)
        if row is not None and row.status is LeaseStatus.LEASED and p.next() % 4 == 0:
            self.h.now = max(self.now, row.expires_at_ms + p.choice(BOUNDARY))
        else:
            self.h.now += p.choice((0, 1, 10, 100))
        command = self.natural_command(run_id, p)
        if command is None:
            return None
        self.deliver(command)
        return self._fresh_held(run_id)

    @rule(target=fences, picks=PICKS)
    def progress(self, picks: tuple[int, ...]) -> Any:
        """The natural next step of some Run."""
        self._step()
        fresh = self._progress(Picks(picks))
        return multiple() if fresh is None else fresh

    @rule(target=runs, policy=_s(LIFECYCLE_POLICIES), executor=_s(EXECUTORS), picks=PICKS)
    def admit(self, policy: PolicyDefinition | None, executor: str, picks: tuple[int, ...]) -> Any:
        """A-2..A-5: admission with a random provider policy (invalid and unsafe included)."""
        self._step()
        if not self.can_admit():
            self._progress(Picks(picks))
            return multiple()
        command = self.cmd_admit(policy, executor)
        self.deliver(command)
        return command.run_id if command.run_id in self.run_ids else multiple()

    # -- rules: dispatch and the Worker's fenced commands --------------------------------------
    @rule(target=fences, run=runs, worker=_s(WORKER_INDEXES), duration=_s(DURATIONS), picks=PICKS)
    def grant(self, run: str, worker: int, duration: int, picks: tuple[int, ...]) -> Any:
        """T1, to any Worker (offline, draining, expired or foreign-typed ones included)."""
        self._step()
        p = Picks(picks)
        chosen = self._pick_run(
            run, p, lambda a: a.run.status is RunStatus.QUEUED and a.run.executor_type == REMOTE
        )
        if chosen is None or p.next() % 8 == 0:
            chosen = run  # also grant where the Run is not eligible (Raced / Rejected)
        command = self.cmd_grant(chosen, self._worker(worker), duration)
        if command is not None:
            self.deliver(command)
        fresh = self._fresh_held(chosen)
        return multiple() if fresh is None else fresh

    def _current_held(self, held: Held) -> Held:
        """The newest fence that is still the live authority, preferably for `held`'s Run."""
        self._refresh_stale()
        live = [h for h in reversed(self.issued) if h.fence not in self.stale]
        own = [h for h in live if h.run_id == held.run_id]
        return (own or live or [held])[0]

    @rule(target=fences, held=fences, kind=_s(FENCED_KINDS), picks=PICKS)
    def worker_command(self, held: Held, kind: str, picks: tuple[int, ...]) -> Any:
        """T2..T6 (with their replays T2r, T2x, T4r, T6r) with a fence from the Bundle: the
        Worker's current one, or an old one, so stale fences collide with live ones (LEASE-02,
        LEASE-09)."""
        self._step()
        p = Picks(picks)
        if p.next() % 3:
            held = self._current_held(held)
        self.deliver(self.cmd_fenced(kind, held, p))
        fresh = self._fresh_held(held.run_id)
        return multiple() if fresh is None else fresh

    @rule(held=fences, field=_s(FENCE_FIELDS), kind=_s(("renew", "complete", "ack_running")))
    def mismatch_one_fence_field(self, held: Held, field: str, kind: str) -> None:
        """LEASE-02: one mismatched fence field is rejected with that field's code (exactly,
        when the fence was otherwise the live one)."""
        self._step()
        fence = held.fence
        agg = self.agg(held.run_id)
        row = agg.lease(held.attempt_id, fence.lease_generation) if agg is not None else None
        expected: Code
        if field == "worker_id":
            changed = dataclasses.replace(fence, worker_id="w-foreign")
            expected = Code.LEASE_WORKER_MISMATCH
        elif field == "session":
            changed = dataclasses.replace(fence, worker_session_id=fence.worker_session_id + "x")
            expected = Code.LEASE_WORKER_SESSION_MISMATCH
        elif field == "worker_generation":
            changed = dataclasses.replace(fence, worker_generation=fence.worker_generation + 7)
            expected = Code.LEASE_WORKER_GENERATION_MISMATCH
        elif field == "lease_generation":
            changed = dataclasses.replace(fence, lease_generation=fence.lease_generation + 50)
            expected = Code.LEASE_MISSING
        elif field == "token":
            changed = dataclasses.replace(fence, lease_token=self.h.names.token("forged-token"))
            expected = Code.LEASE_TOKEN_MISMATCH
        else:
            changed = dataclasses.replace(fence, expected_version=fence.expected_version + 1)
            expected = Code.LEASE_VERSION_MISMATCH
        original = self.cmd_fenced(kind, held, Picks((0,)))
        assert isinstance(original, FENCED_TYPES)
        live = (
            row is not None
            and row.status is LeaseStatus.LEASED
            and row.version == fence.expected_version
            and oracle.fence_identity_code(agg, original) is None
        )
        command = self.cmd_fenced(kind, dataclasses.replace(held, fence=changed), Picks((0,)))
        rec = self.deliver(command, "stale_fence")
        if live and not (field == "version" and kind == "ack_running"):
            _expect(rec, "LEASE-02", "rejected", expected)

    @rule(held=fences, run=runs, kind=_s(FENCED_KINDS))
    def fence_of_another_run(self, held: Held, run: str, kind: str) -> None:
        """A fence presented under another Run id: `LEASE_RUN_MISMATCH` (LEASE-02)."""
        self._step()
        mode = "normal" if run == held.run_id else "stale_fence"
        self.deliver(self.cmd_fenced(kind, held, Picks((1,)), run_id=run), mode)

    # -- rules: expiry, clock, cancellation, retry, recovery, local path -----------------------
    @rule(
        run=runs,
        profile=_s(EXPIRY_PROFILES),
        older=_s((False, False, False, True)),
        picks=PICKS,
    )
    def expire(self, run: str, profile: Profile, older: bool, picks: tuple[int, ...]) -> None:
        """T7..T10 on edge and cluster (E-1); mostly on a lease that has run out."""
        self._step()
        p = Picks(picks)

        def expired(a: RunAggregate) -> bool:
            return any(
                x.status is LeaseStatus.LEASED and x.expires_at_ms <= self.now for x in a.leases
            )

        chosen = self._pick_run(run, p, expired) if p.next() % 4 else run
        if chosen is None:
            self._progress(p)
            return
        profile = profile if profile in self.EXPIRY_PROFILES else self.EXPIRY_PROFILES[0]
        command = self.cmd_expire(chosen, profile, older)
        if command is not None:
            self.deliver(command)

    @rule(ms=_s(TICKS), boundary=_s((None, None, -1, 0, 1)), pick=st.integers(0, 7))
    def advance_clock(self, ms: int, boundary: int | None, pick: int) -> None:
        """Time passes; or it jumps exactly to (or one ms around) a lease expiry, a retry due
        time or a session expiry: the `<` versus `<=` edges."""
        self._step()
        if boundary is None:
            self.h.now += ms
            return
        marks: set[int] = set()
        for agg in self.h.state.aggregates.values():
            marks.update(x.expires_at_ms for x in agg.leases if x.status is LeaseStatus.LEASED)
            if agg.policy is not None and agg.policy.next_attempt_at_ms is not None:
                marks.add(agg.policy.next_attempt_at_ms)
        marks.update(w.session_expires_at_ms for w in self.workers.values())
        future = sorted(m + boundary for m in marks if m + boundary > self.now and m < NEVER_MS)
        self.h.now = future[pick % len(future)] if future else self.now + ms

    @rule(run=runs, reason=_s(CANCEL_REASONS), picks=PICKS)
    def cancellation(self, run: str, reason: CancelReason, picks: tuple[int, ...]) -> None:
        """§1.9: request a cancellation (rarely), or converge one."""
        self._step()
        p = Picks(picks)
        if self.may_cancel() and p.next() % 3 == 0:
            self.cancels += 1
            # Half the time on a lost / retry_wait Run: the intent must beat the retry.
            wanted = (
                (RunStatus.LOST, RunStatus.RETRY_WAIT)
                if p.next() % 2
                else tuple(s for s in RunStatus if not s.terminal)
            )
            target = self._pick_run(run, p, lambda a: a.run.status in wanted)
            self.deliver(RequestCancel(target or run, reason))
            return
        target = self._pick_run(
            run, p, lambda a: a.run.has_cancel_intent and not a.run.status.terminal
        )
        if target is None:
            self._progress(p)
            return
        self.deliver(ConvergeCancel(target))

    @rule(run=runs, picks=PICKS)
    def lost_retry(self, run: str, picks: tuple[int, ...]) -> None:
        """§1.8.1: one lost-retry step, on a lost / retry_wait Run when there is one."""
        self._step()
        p = Picks(picks)
        target = self._pick_run(
            run, p, lambda a: a.run.status in (RunStatus.LOST, RunStatus.RETRY_WAIT)
        )
        if target is None and p.next() % 4:
            self._progress(p)
            return
        chosen = target or run
        self.deliver(LostRetryStep(chosen, self._new_attempt_id(chosen)))

    @rule(limit=_s(PAGE_LIMITS), picks=PICKS)
    def lost_retry_page(self, limit: int, picks: tuple[int, ...]) -> None:
        """§1.8.2: one lost-retry page: the source's page, checked against the model's own
        reading (eligibility, lost before due retry_wait, never a Run before it is due, at most
        `limit`, exact `has_more`), then one transaction per candidate in page order, each
        with its own checks; sometimes a candidate's response is lost and it is delivered
        again."""
        self._step()
        p = Picks(picks)
        page = self.h.query(SourceQuery("lost_retry", limit))
        expected = oracle.lost_retry_source(self.h.state.aggregates, self.now)
        got = [item[0] for item in page["items"]]
        require(
            got == expected[:limit],
            "RETRY-15",
            f"lost-retry page {got}, the SPEC's order and eligibility give {expected[:limit]}",
        )
        require(
            page["has_more"] == (len(expected) > limit),
            "RETRY-13",
            f"has_more {page['has_more']} with {len(expected)} candidates and limit {limit}",
        )
        for run_id in got:
            mode = "lost_response" if p.next() % 5 == 0 else "normal"
            self.deliver(LostRetryStep(run_id, self._new_attempt_id(run_id)), mode)

    @rule(
        run=runs,
        runtime=_s(BOOLS),
        evidence=_s(EVIDENCE),
        with_start=_s(BOOLS),
        picks=PICKS,
    )
    def recover(
        self,
        run: str,
        runtime: bool,
        evidence: Evidence | None,
        with_start: bool,
        picks: tuple[int, ...],
    ) -> None:
        """§2.2 local startup and §2.3 runtime recovery, with each evidence kind."""
        self._step()
        p = Picks(picks)
        wanted = _runtime_candidate(self.now) if runtime else _started_local
        target = self._pick_run(run, p, wanted)
        if target is None and p.next() % 3:
            self._progress(p)
            return
        command = self.cmd_recover(target or run, runtime, evidence, with_start)
        if command is not None:
            self.deliver(command)

    @rule(
        run=runs,
        kind=_s(("activate_local", "local_handle", "complete_local", "local_stop")),
        picks=PICKS,
    )
    def local_execution(self, run: str, kind: str, picks: tuple[int, ...]) -> None:
        """L1..L5: the local executor path."""
        self._step()
        p = Picks(picks)
        target = self._pick_run(
            run, p, lambda a: a.run.executor_type == LOCAL and not a.run.status.terminal
        )
        if target is None:
            self._progress(p)
            return
        command = self.cmd_local(kind, target, p)
        if command is not None:
            self.deliver(command)

    # -- rules: the Worker registry (control plane state, not kernel commands) -----------------
    @rule(worker=_s(WORKER_INDEXES), change=_s(WORKER_CHANGES))
    def change_worker(self, worker: int, change: str) -> None:
        """Restart (new session and generation: every fence of the old session is stale),
        drain, offline, online, session expiry now / soon, session renewed."""
        self._step()
        old = self._worker(worker)
        if change == "restart":
            generation = old.generation + 1
            new = dataclasses.replace(
                old,
                session_id=f"{old.worker_id}-s{generation}",
                generation=generation,
                status=WorkerSessionStatus.ONLINE,
                session_expires_at_ms=NEVER_MS,
            )
        elif change in ("online", "draining", "offline"):
            new = dataclasses.replace(old, status=WorkerSessionStatus(change))
        elif change == "session_expires_now":
            new = dataclasses.replace(old, session_expires_at_ms=self.now)
        elif change == "session_expires_soon":
            new = dataclasses.replace(old, session_expires_at_ms=self.now + 1_000)
        else:
            new = dataclasses.replace(old, session_expires_at_ms=NEVER_MS)
        self.workers[old.worker_id] = new

    # -- rules: faults as ordinary steps -------------------------------------------------------
    def _fault(self, mode: str, kind: str, picks: Sequence[int], arg: int = 1) -> None:
        self._step()
        p = Picks(picks)
        command = self.build(kind, p, stale_only=mode == "stale_fence")
        if command is None:
            self._progress(p)
            return
        if mode == "io_error":
            writes = self.h.effect_count(command)
            arg = 1 + p.next() % max(1, writes)
        self.deliver(command, mode, arg)

    @rule(kind=_s(FAULT_KINDS), picks=PICKS)
    def lost_response(self, kind: str, picks: tuple[int, ...]) -> None:
        """crash_after_commit (the reply is lost), then the same command again."""
        self._fault("lost_response", kind, picks)

    @rule(kind=_s(FAULT_KINDS), picks=PICKS)
    def duplicate_delivery(self, kind: str, picks: tuple[int, ...]) -> None:
        self._fault("duplicate", kind, picks)

    @rule(kind=_s(FAULT_KINDS), picks=PICKS)
    def crash_before_commit(self, kind: str, picks: tuple[int, ...]) -> None:
        self._fault("crash_before_commit", kind, picks)

    @rule(kind=_s(FAULT_KINDS), picks=PICKS)
    def io_error(self, kind: str, picks: tuple[int, ...]) -> None:
        """An I/O error at effect k (1 <= k <= the command's effect count)."""
        self._fault("io_error", kind, picks)

    @rule(kind=_s(FENCED_KINDS), picks=PICKS)
    def stale_fence(self, kind: str, picks: tuple[int, ...]) -> None:
        """An old Worker's command: a fence the model knows is stale."""
        self._fault("stale_fence", kind, picks)

    @rule(kind=_s(FAULT_KINDS), picks=PICKS, skew=_s(SKEWS))
    def clock_skew(self, kind: str, picks: tuple[int, ...], skew: int) -> None:
        """A command observed `skew` ms before the model clock (RUN-04)."""
        self._fault("clock_skew", kind, picks, skew)

    @rule(picks=PICKS)
    def reopen(self, picks: tuple[int, ...]) -> None:
        """The runner restarts on the same store, then work goes on."""
        self._step()
        self.h.reopen()
        self._progress(Picks(picks))

    @rule(picks=PICKS, variant=_s(REPLAY_VARIANTS))
    def replay_completion(self, picks: tuple[int, ...], variant: str) -> None:
        """LEASE-03: a committed completion again, exactly (also with the Worker offline or
        replaced, or observed earlier), or with one thing changed."""
        self._step()
        p = Picks(picks)
        if not self.h.completions:
            self._progress(p)
            return
        committed = self.h.completions[p.choice(sorted(self.h.completions))]
        fence = committed.fence
        at: int | None = None
        worker = self.workers.get(fence.worker_id, committed.worker)
        if variant == "exact_earlier":
            at = max(0, self.now - 10_000)
        command: CompleteWithLease = dataclasses.replace(committed, worker=worker)
        if variant == "sequence":
            command = dataclasses.replace(
                command, callback_sequence=committed.callback_sequence + 1
            )
        elif variant == "outcome":
            others = [o for o in OUTCOMES if o is not committed.outcome]
            command = dataclasses.replace(command, outcome=p.choice(others))
        elif variant == "exit_code":
            command = dataclasses.replace(command, exit_code=(committed.exit_code or 0) + 3)
        elif variant in ("version", "older_version"):
            step = 1 if variant == "version" else -1
            version = max(1, fence.expected_version + step)
            if version == fence.expected_version:
                version += 1
            changed = dataclasses.replace(fence, expected_version=version)
            command = dataclasses.replace(command, fence=changed)
        elif variant == "token":
            forged = self.h.names.token("replay-forged")
            command = dataclasses.replace(
                command, fence=dataclasses.replace(fence, lease_token=forged)
            )
        elif variant == "session":
            old_session = dataclasses.replace(
                fence, worker_session_id=fence.worker_session_id + "-old"
            )
            command = dataclasses.replace(command, fence=old_session)
        rec = self.h.send(command, at_ms=at)
        if variant.startswith("exact"):
            _expect(rec, "LEASE-03", "replayed", Code.ALREADY_TERMINAL)
        else:
            _expect(rec, "LEASE-03", "rejected")

    # -- the seeded driver ---------------------------------------------------------------------
    DRIVER: ClassVar[tuple[DriverRule, ...]] = (
        DriverRule("progress", {"picks": PICKS_REF}, None, 8),
        DriverRule(
            "admit", {"policy": LIFECYCLE_POLICIES, "executor": EXECUTORS, "picks": PICKS_REF}
        ),
        DriverRule(
            "grant",
            {"run": RUNS_REF, "worker": WORKER_INDEXES, "duration": DURATIONS, "picks": PICKS_REF},
        ),
        DriverRule(
            "worker_command",
            {"held": FENCES_REF, "kind": FENCED_KINDS, "picks": PICKS_REF},
            None,
            3,
        ),
        DriverRule(
            "mismatch_one_fence_field",
            {
                "held": FENCES_REF,
                "field": FENCE_FIELDS,
                "kind": ("renew", "complete", "ack_running"),
            },
        ),
        DriverRule(
            "fence_of_another_run", {"held": FENCES_REF, "run": RUNS_REF, "kind": FENCED_KINDS}
        ),
        DriverRule(
            "expire",
            {
                "run": RUNS_REF,
                "profile": EXPIRY_PROFILES,
                "older": (False, False, False, True),
                "picks": PICKS_REF,
            },
        ),
        DriverRule(
            "advance_clock",
            {"ms": TICKS, "boundary": (None, None, -1, 0, 1), "pick": tuple(range(8))},
            None,
            2,
        ),
        DriverRule("cancellation", {"run": RUNS_REF, "reason": CANCEL_REASONS, "picks": PICKS_REF}),
        DriverRule("lost_retry", {"run": RUNS_REF, "picks": PICKS_REF}),
        DriverRule("lost_retry_page", {"limit": PAGE_LIMITS, "picks": PICKS_REF}),
        DriverRule(
            "recover",
            {
                "run": RUNS_REF,
                "runtime": BOOLS,
                "evidence": EVIDENCE,
                "with_start": BOOLS,
                "picks": PICKS_REF,
            },
        ),
        DriverRule(
            "local_execution",
            {
                "run": RUNS_REF,
                "kind": ("activate_local", "local_handle", "complete_local", "local_stop"),
                "picks": PICKS_REF,
            },
        ),
        DriverRule("change_worker", {"worker": WORKER_INDEXES, "change": WORKER_CHANGES}),
        DriverRule("lost_response", {"kind": FAULT_KINDS, "picks": PICKS_REF}),
        DriverRule("duplicate_delivery", {"kind": FAULT_KINDS, "picks": PICKS_REF}),
        DriverRule("crash_before_commit", {"kind": FAULT_KINDS, "picks": PICKS_REF}),
        DriverRule("io_error", {"kind": FAULT_KINDS, "picks": PICKS_REF}),
        DriverRule("stale_fence", {"kind": FENCED_KINDS, "picks": PICKS_REF}),
        DriverRule("clock_skew", {"kind": FAULT_KINDS, "picks": PICKS_REF, "skew": SKEWS}),
        DriverRule("reopen", {"picks": PICKS_REF}),
        DriverRule("replay_completion", {"picks": PICKS_REF, "variant": REPLAY_VARIANTS}),
    )

    def start(self, rng: random.Random) -> None:
        self.workers_join(rng.choice((2, 3)))

    def draw_param(self, rng: random.Random, domain: Domain) -> Any:
        if domain is RUNS_REF:
            return rng.choice(self.run_ids)
        if domain is FENCES_REF:
            pool = self.issued[-4:] if rng.random() < 0.6 else self.issued
            return rng.choice(pool)
        if domain is PICKS_REF:
            return tuple(rng.randrange(PICK_RANGE) for _ in range(6))
        assert isinstance(domain, Sequence)
        return rng.choice(domain)


def _started_local(agg: RunAggregate) -> bool:
    latest = agg.latest_attempt
    return (
        latest is not None
        and latest.is_local
        and latest.status in (AttemptStatus.STARTING, AttemptStatus.RUNNING)
    )


def _runtime_candidate(now: int) -> Callable[[RunAggregate], bool]:
    def wanted(agg: RunAggregate) -> bool:
        latest = agg.latest_attempt
        if latest is None or latest.status not in (
            AttemptStatus.CLAIMED,
            AttemptStatus.STARTING,
            AttemptStatus.RUNNING,
        ):
            return False
        leased = agg.leased_lease(latest.attempt_id)
        return agg.run.status in (RunStatus.DISPATCHING, RunStatus.RUNNING) and (
            leased is None or leased.expires_at_ms <= now
        )

    return wanted


# -- RetryExhaustionMachine --------------------------------------------------------------------
class RetryExhaustionMachine(ModelMachine):
    """One Run at a time whose Attempts keep getting lost until it ends (RETRY-03..RETRY-08,
    RETRY-16); then the next Run with another policy. Every rule that does not fit the current
    state takes the Run's natural next step instead, so no example stalls."""

    NAME: ClassVar[str] = "retry"
    LEASE_MS: ClassVar[int] = 5_000
    FINISH_LIMIT: ClassVar[int] = 200  # teardown steps to drive the last Run to its end

    def __init__(self, *, seed: int = 0, trace_name: str | None = None) -> None:
        super().__init__(seed=seed, trace_name=trace_name)
        self.worker = WorkerSession(
            worker_id="w1",
            session_id="w1-s1",
            generation=1,
            status=WorkerSessionStatus.ONLINE,
            session_expires_at_ms=NEVER_MS,
            executor_types=(REMOTE,),
        )
        self.current: str | None = None
        self.admitted = 0
        self._fresh = 0
        self._serial = 0
        self.delays: dict[str, dict[int, int]] = {}  # run -> lost number -> scheduled delay

    # -- state ---------------------------------------------------------------------------------
    def run(self) -> RunAggregate | None:
        return None if self.current is None else self.agg(self.current)

    def _status(self) -> RunStatus | None:
        agg = self.run()
        return None if agg is None else agg.run.status

    def _new_attempt_id(self) -> str:
        self._fresh += 1
        return f"{self.current}-n{self._fresh}"

    def _at(self, at_ms: int) -> None:
        self.h.now = max(self.now, at_ms)

    def natural_step(self) -> None:
        """The next thing that happens to the current Run (a new Run when it has ended)."""
        agg = self.run()
        if agg is None or agg.run.status.terminal:
            # Policies and executors cycle so that the fallback still covers the whole domain.
            index = (self.admitted * 7 + self.seed) % len(RETRY_POLICIES)
            executor = (REMOTE, REMOTE, LOCAL)[self.admitted % 3]
            self._admit(RETRY_POLICIES[index], executor)
        elif agg.run.has_cancel_intent:
            self._converge()
        elif agg.run.status is RunStatus.QUEUED:
            self._lose("edge", claimed_expiry_first=False, reach_running=False, renew_first=False)
        else:
            self._retry("normal", ("due", 0))

    # -- steps ---------------------------------------------------------------------------------
    def _admit(self, policy: PolicyDefinition | None, executor: str) -> None:
        """A-3/A-4: an enabled policy with unknown safety is refused and writes nothing."""
        self.admitted += 1
        run_id = f"x{self.admitted}"
        command = AdmitRun(run_id, f"{run_id}-a1", PROJECT, TASK, 1, executor, policy)
        rec = self.h.deliver(command)
        enabled_unsafe = (
            policy is not None
            and policy.retry_on_lost
            and policy.max_attempts > 1
            and policy.safety is Safety.UNKNOWN
        )
        if enabled_unsafe:
            _expect(rec, "RETRY-02", "rejected", Code.RUN_RETRY_POLICY_UNSAFE)
            return
        _expect(rec, "A-5", "applied", Code.ADMITTED)
        self.current = run_id

    def _lose(
        self, path: str, *, claimed_expiry_first: bool, reach_running: bool, renew_first: bool
    ) -> None:
        """Start the latest Attempt and lose it: lease expiry on edge (T8), runtime recovery
        with not-running evidence on cluster (E-1, §2.3), or local startup recovery (§2.2)."""
        agg = self.run()
        assert agg is not None
        assert agg.latest_attempt is not None
        run_id = agg.run.run_id
        attempt_id = agg.latest_attempt.attempt_id
        if agg.run.executor_type == LOCAL:
            self._lose_local(run_id, attempt_id, reach_running)
        else:
            self._lose_remote(
                run_id,
                attempt_id,
                path=path,
                claimed_expiry_first=claimed_expiry_first,
                reach_running=reach_running,
                renew_first=renew_first,
            )
        after = self.run()
        assert after is not None
        latest = after.latest_attempt
        require(
            after.run.status is RunStatus.LOST
            and latest is not None
            and latest.attempt_id == attempt_id
            and latest.status is AttemptStatus.LOST,
            "LEASE-07",
            f"the attempt was not lost: run {after.run.status}",
        )

    def _grant(self, run_id: str, attempt_id: str) -> tuple[Fence, int]:
        agg = self.agg(run_id)
        assert agg is not None
        generation = 1 + max(
            (x.lease_generation for x in agg.leases if x.attempt_id == attempt_id), default=0
        )
        self._serial += 1
        token = self.h.names.token(f"{attempt_id}.g{generation}.t{self._serial}")
        rec = self.h.deliver(GrantLease(run_id, attempt_id, self.worker, token, self.LEASE_MS))
        _expect(rec, "T1", "applied", Code.GRANTED)
        w = self.worker
        fence = Fence(w.worker_id, w.session_id, w.generation, generation, token, 1)
        return fence, self.now + self.LEASE_MS

    def _lose_remote(
        self,
        run_id: str,
        attempt_id: str,
        *,
        path: str,
        claimed_expiry_first: bool,
        reach_running: bool,
        renew_first: bool,
    ) -> None:
        profile = self._profile(path)
        fence, expires = self._grant(run_id, attempt_id)
        if claimed_expiry_first:
            self._at(expires)
            rec = self.h.deliver(
                ExpireWithLease(run_id, attempt_id, fence.lease_generation, profile)
            )
            _expect(rec, "LEASE-06", "applied", Code.RELEASED)
            fence, expires = self._grant(run_id, attempt_id)
        self.h.now += 1
        rec = self.h.deliver(AcknowledgeStarting(run_id, attempt_id, fence, self.worker))
        _expect(rec, "T2", "applied")
        fence = dataclasses.replace(fence, expected_version=fence.expected_version + 1)
        self._probe_fence(run_id, attempt_id, fence)
        if reach_running:
            rec = self.h.deliver(
                AcknowledgeRunning(run_id, attempt_id, fence, self.worker, "pid:9", self.now)
            )
            _expect(rec, "T4", "applied")
            fence = dataclasses.replace(fence, expected_version=fence.expected_version + 1)
        if renew_first:
            self.h.now += 1_000
            rec = self.h.deliver(RenewLease(run_id, attempt_id, fence, self.worker, self.LEASE_MS))
            _expect(rec, "T3", "applied")
            fence = dataclasses.replace(fence, expected_version=fence.expected_version + 1)
            expires = self.now + self.LEASE_MS
        expire = ExpireWithLease(run_id, attempt_id, fence.lease_generation, profile)
        self._at(expires - 1)
        _expect(self.h.deliver(expire), "LEASE-05", "replayed", Code.NOT_EXPIRED)
        self._at(expires)
        # The Worker renews exactly at expiry: too late (`expires_at_ms > observed_at_ms`).
        too_late = RenewLease(run_id, attempt_id, fence, self.worker, self.LEASE_MS)
        _expect(self.h.deliver(too_late), "LEASE-04", "rejected", Code.LEASE_EXPIRED)
        if profile in oracle.LOST_ON_EXPIRY:
            _expect(self.h.deliver(expire), "LEASE-07", "applied", Code.LOST)
        else:
            _expect(self.h.deliver(expire), "LEASE-12", "replayed", Code.EVIDENCE_REQUIRED)
            no_evidence = RecoverRuntime(run_id, attempt_id, None)
            _expect(self.h.deliver(no_evidence), "REC-03", "replayed", Code.EVIDENCE_REQUIRED)
            recover = RecoverRuntime(run_id, attempt_id, NotRunningEvidence())
            _expect(self.h.deliver(recover), "REC-04", "applied", Code.LOST)
        # LEASE-09: after lost + release the old Worker's completion is rejected by the fence.
        late = CompleteWithLease(
            run_id, attempt_id, fence, self.worker, 1, CompletionOutcome.SUCCEEDED, 0
        )
        _expect(self.h.deliver(late), "LEASE-09", "rejected", Code.LEASE_NOT_LEASED)

    def _profile(self, path: str) -> Profile:
        """The expiry profile of a loss path, within the machine's profiles (E-1: edge and
        standalone lose on expiry alone, cluster needs recovery evidence)."""
        if len(self.EXPIRY_PROFILES) == 1:
            return self.EXPIRY_PROFILES[0]
        return Profile.EDGE if path == "edge" else Profile.CLUSTER

    def _probe_fence(self, run_id: str, attempt_id: str, fence: Fence) -> None:
        """One fence field wrong, in turn per loss (LEASE-02, LEASE-04): rejected with that
        field's code and nothing written."""
        which = self.admitted + self._serial
        worker = self.worker
        if which % 5 == 0:
            probe = dataclasses.replace(fence, lease_token=self.h.names.token("probe-forged"))
            code = Code.LEASE_TOKEN_MISMATCH
        elif which % 5 == 1:
            probe = dataclasses.replace(fence, worker_session_id="w1-s0")
            code = Code.LEASE_WORKER_SESSION_MISMATCH
        elif which % 5 == 2:
            probe = dataclasses.replace(fence, worker_generation=fence.worker_generation + 1)
            code = Code.LEASE_WORKER_GENERATION_MISMATCH
        elif which % 5 == 3:
            probe = dataclasses.replace(fence, expected_version=fence.expected_version - 1)
            code = Code.LEASE_VERSION_MISMATCH
        else:
            probe = fence
            worker = dataclasses.replace(self.worker, status=WorkerSessionStatus.OFFLINE)
            code = Code.WORKER_UNAVAILABLE
        rec = self.h.deliver(
            RenewLease(run_id, attempt_id, probe, worker, self.LEASE_MS), "stale_fence"
        )
        _expect(rec, "LEASE-02", "rejected", code)

    def _lose_local(self, run_id: str, attempt_id: str, reach_running: bool) -> None:
        digest = self.h.names.token(f"callback.{attempt_id}").digest()
        rec = self.h.deliver(ActivateLocal(run_id, attempt_id, LOCAL, 1, digest))
        _expect(rec, "RETRY-18", "applied")
        if reach_running:
            self.h.now += 1
            rec = self.h.deliver(RecordLocalHandle(run_id, attempt_id, "pid:8", self.now))
            _expect(rec, "L2", "applied")
        self.h.now += 1_000
        recover = RecoverLocalStartup(run_id, attempt_id, NotRunningEvidence())
        _expect(self.h.deliver(recover), "§2.2", "applied", Code.LOST)

    def _retry(self, mode: str, wait: tuple[str, int]) -> None:
        """Let time pass (a tick, or to one ms around the due time), then one lost-retry step,
        sometimes duplicated or with its reply lost."""
        agg = self.run()
        assert agg is not None
        assert self.current is not None
        how, amount = wait
        due = agg.policy.next_attempt_at_ms if agg.policy is not None else None
        if how == "due" and due is not None:
            self._at(due + amount)
        elif how == "tick":
            self.h.now += amount
        self.h.deliver(LostRetryStep(self.current, self._new_attempt_id()), mode)

    def _converge(self) -> None:
        assert self.current is not None
        rec = self.h.deliver(ConvergeCancel(self.current))
        _expect(rec, "RETRY-11", "applied", Code.CONVERGED)

    # -- rules -----------------------------------------------------------------------------------
    @rule(policy=_s(RETRY_POLICIES), executor=_s((REMOTE, REMOTE, LOCAL)))
    def admit(self, policy: PolicyDefinition | None, executor: str) -> None:
        """A new Run with this policy once the current one has ended."""
        self._step()
        status = self._status()
        if status is None or status.terminal:
            self._admit(policy, executor)
        else:
            self.natural_step()

    @rule(
        path=_s(LOSS_PATHS),
        claimed_expiry_first=_s((False, False, True)),
        reach_running=_s(BOOLS),
        renew_first=_s((False, False, True)),
        cancel=_s(RARE_CANCEL),
    )
    def lose_attempt(
        self,
        path: str,
        claimed_expiry_first: bool,
        reach_running: bool,
        renew_first: bool,
        cancel: CancelReason | None,
    ) -> None:
        """The queued Attempt starts and is lost (or, rarely, the Run is cancelled first)."""
        self._step()
        agg = self.run()
        if agg is None or agg.run.status is not RunStatus.QUEUED or agg.run.has_cancel_intent:
            self.natural_step()
        elif cancel is not None:
            self.h.deliver(RequestCancel(agg.run.run_id, cancel))
        else:
            self._lose(
                path,
                claimed_expiry_first=claimed_expiry_first,
                reach_running=reach_running,
                renew_first=renew_first,
            )

    @rule(mode=_s(RETRY_MODES), wait=_s(RETRY_WAITS), cancel=_s(RARE_CANCEL))
    def lost_retry(self, mode: str, wait: tuple[str, int], cancel: CancelReason | None) -> None:
        """One lost-retry step on the lost / retry_wait Run (rarely after a cancellation)."""
        self._step()
        agg = self.run()
        if agg is None or agg.run.status not in (RunStatus.LOST, RunStatus.RETRY_WAIT):
            self.natural_step()
            return
        if cancel is not None and not agg.run.has_cancel_intent:
            self.h.deliver(RequestCancel(agg.run.run_id, cancel))
        self._retry(mode, wait)

    @rule()
    def converge_cancel(self) -> None:
        """§1.9: a Run with a cancellation intent and no live execution ends cancelled."""
        self._step()
        agg = self.run()
        if agg is not None and agg.run.has_cancel_intent and not agg.run.status.terminal:
            self._converge()
        else:
            self.natural_step()

    # -- retry-specific invariants -------------------------------------------------------------
    @invariant()
    def attempts_within_policy(self) -> None:
        """RETRY-05: never more Attempts than the policy allows (one without a safe enabled
        policy)."""
        for agg in self.h.state.aggregates.values():
            allowed = oracle.attempts_allowed(agg.policy)
            require(
                len(agg.attempts) <= allowed,
                "RETRY-05",
                f"{agg.run.run_id} has {len(agg.attempts)} attempts, policy allows {allowed}",
            )
        self.h.checked(len(self.h.state.aggregates))

    @invariant()
    def lost_runs_end_by_precedence(self) -> None:
        """RETRY-03..RETRY-05, RETRY-16: a lost Run fails with the §1.8.1 precedence code after
        exactly the Attempts it allows; scheduled delays follow the backoff; and the UNSAFE rule
        (unreachable through admission, A-4) is checked on shadow copies of the aggregate."""
        n = 0
        for rec in self.h.pending("retry"):
            command = rec.command
            if not isinstance(command, LostRetryStep) or rec.kind in ("crashed", "error"):
                continue
            n += 1
            before = rec.before.agg(command.run_id)
            after = rec.after.agg(command.run_id)
            if before is None or after is None:
                continue
            if after.run.status is RunStatus.FAILED and not before.run.status.terminal:
                self._check_failure(rec, before, after)
            if after.run.status is RunStatus.RETRY_WAIT and before.run.status is RunStatus.LOST:
                n += self._check_delay(before, after)
            if (
                rec.single
                and before.run.status is RunStatus.LOST
                and oracle.lost_retry_eligible(before)
            ):
                n += self._shadow_precedence(before, command, rec.at_ms)
        self.h.checked(n)

    def _check_failure(self, rec: Record, before: RunAggregate, after: RunAggregate) -> None:
        latest = before.latest_attempt
        assert latest is not None
        expected = oracle.failure_precedence(before.policy, latest.number)
        require(
            expected is not None and after.run.error_code == expected.value,
            "RETRY-04",
            f"failed with {after.run.error_code}, precedence demands {expected}: {rec.where()}",
        )
        if expected is Code.RUN_LOST_RETRY_EXHAUSTED:
            assert before.policy is not None
            require(
                len(after.attempts) == before.policy.max_attempts == latest.number,
                "RETRY-05",
                f"exhausted after {len(after.attempts)} of {before.policy.max_attempts}",
            )
        if expected is Code.RUN_LOST_RETRY_DISABLED:
            require(len(after.attempts) == 1, "RETRY-03", f"disabled after {len(after.attempts)}")

    def _check_delay(self, before: RunAggregate, after: RunAggregate) -> int:
        policy = before.policy
        latest = before.latest_attempt
        assert policy is not None
        assert latest is not None
        assert after.policy is not None
        due = after.policy.next_attempt_at_ms
        assert due is not None
        delay = due - oracle.retry_base_ms(before, latest)
        require(
            0 <= delay <= policy.backoff_max_ms and (policy.backoff_base_ms != 0 or delay == 0),
            "RETRY-16",
            f"delay {delay} outside [0, {policy.backoff_max_ms}]",
        )
        delays = self.delays.setdefault(before.run.run_id, {})
        delays[latest.number] = delay
        ordered = [delays[k] for k in sorted(delays)]
        require(ordered == sorted(ordered), "RETRY-16", f"delays {ordered} decrease")
        return 1

    def _shadow_precedence(self, agg: RunAggregate, command: LostRetryStep, at_ms: int) -> int:
        """The same decision on copies whose stored policy differs in one field (a policy row
        that admission would refuse today, e.g. a legacy row): DISABLED > UNSAFE > EXHAUSTED."""
        policy = agg.policy
        latest = agg.latest_attempt
        assert latest is not None
        shadows: list[tuple[RunRetryPolicy | None, Code]] = [(None, Code.FAILED_DISABLED)]
        if policy is not None:
            unsafe = Code.FAILED_UNSAFE if oracle.retry_enabled(policy) else Code.FAILED_DISABLED
            shadows += [
                (dataclasses.replace(policy, safety=Safety.UNKNOWN), unsafe),
                (dataclasses.replace(policy, retry_on_lost=False), Code.FAILED_DISABLED),
                (dataclasses.replace(policy, max_attempts=1), Code.FAILED_DISABLED),
                (
                    dataclasses.replace(
                        policy, safety=Safety.UNKNOWN, max_attempts=max(2, latest.number)
                    ),
                    Code.FAILED_UNSAFE if policy.retry_on_lost else Code.FAILED_DISABLED,
                ),
            ]
            if latest.number >= 2 and policy.retry_on_lost and policy.safety is not Safety.UNKNOWN:
                exhausted = dataclasses.replace(policy, max_attempts=latest.number)
                shadows.append((exhausted, Code.FAILED_EXHAUSTED))
        for shadow, code in shadows:
            outcome = apply(dataclasses.replace(agg, policy=shadow), command, at_ms)
            require(
                isinstance(outcome, Applied) and outcome.code is code,
                "RETRY-04",
                f"shadow policy {shadow} expected {code}, got {outcome.kind} {outcome.code}",
            )
        return len(shadows)

    EXTRA_INVARIANTS: ClassVar[tuple[str, ...]] = (
        "attempts_within_policy",
        "lost_runs_end_by_precedence",
    )

    def teardown(self) -> None:
        """Drive the last Run to its end: it must end, within the Attempts its policy allows,
        with the precedence code (checked per step by the invariants)."""
        self.finish()

    def finish(self) -> None:
        for _ in range(self.FINISH_LIMIT):
            agg = self.run()
            if agg is None or agg.run.status.terminal:
                break
            self._step()
            self.natural_step()
            self.check_all()
        agg = self.run()
        require(
            agg is None or agg.run.status.terminal,
            "RETRY-05",
            f"the run did not end within {self.FINISH_LIMIT} steps",
        )
        if agg is not None:
            require(
                len(agg.attempts) <= oracle.attempts_allowed(agg.policy),
                "RETRY-05",
                f"ended after {len(agg.attempts)} attempts",
            )

    # -- the seeded driver ---------------------------------------------------------------------
    DRIVER: ClassVar[tuple[DriverRule, ...]] = (
        DriverRule("admit", {"policy": RETRY_POLICIES, "executor": (REMOTE, REMOTE, LOCAL)}),
        DriverRule(
            "lose_attempt",
            {
                "path": LOSS_PATHS,
                "claimed_expiry_first": (False, False, True),
                "reach_running": BOOLS,
                "renew_first": (False, False, True),
                "cancel": RARE_CANCEL,
            },
            None,
            2,
        ),
        DriverRule(
            "lost_retry", {"mode": RETRY_MODES, "wait": RETRY_WAITS, "cancel": RARE_CANCEL}, None, 3
        ),
        DriverRule("converge_cancel", {}),
    )

    def draw_param(self, rng: random.Random, domain: Domain) -> Any:
        assert isinstance(domain, Sequence)
        return rng.choice(domain)


MACHINES: Mapping[str, type[ModelMachine]] = {
    RunLifecycleMachine.NAME: RunLifecycleMachine,
    RetryExhaustionMachine.NAME: RetryExhaustionMachine,
}


# -- the seeded driver and traces --------------------------------------------------------------
def drive(machine: ModelMachine, rng: random.Random, steps: int) -> ModelMachine:
    """Run `steps` rule steps on a fresh machine with the seeded driver, checking every invariant
    after each, then its teardown."""
    machine.start(rng)
    machine.check_all()
    for _ in range(steps):
        machine.random_step(rng)
    machine.teardown()
    machine.check_all()
    return machine


def record_trace(
    machine: str | type[ModelMachine],
    *,
    seed: int,
    steps: int = 60,
    profile: Profile = Profile.EDGE,
    name: str | None = None,
) -> Trace:
    """The trace of one seeded machine run: component `run`, `profile` in the header and in
    every expiry command the lifecycle model sends (E-1 differs by profile), `seed` as given
    (the driver's seed, so the same call writes the same trace)."""
    cls = MACHINES[machine] if isinstance(machine, str) else machine
    if (profile,) != cls.EXPIRY_PROFILES:
        cls = type(cls.__name__, (cls,), {"EXPIRY_PROFILES": (profile,)})
    instance = cls(seed=seed, trace_name=name)
    drive(instance, random.Random(seed), steps)
    return instance.trace()


def write_trace(source: ModelMachine | Trace, path: str | Path) -> Path:
    """Write a machine's recorded trace (or a trace) as JSON Lines to `path`."""
    trace = source.trace() if isinstance(source, ModelMachine) else source
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(dumps(trace), encoding="utf-8")
    return target
