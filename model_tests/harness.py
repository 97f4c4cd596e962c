"""The model harness: every command goes through a `Recorder` (the reference store is the system
under model and every run can be written as a trace), each delivery is kept as a `Record` with
the durable state before and after it, and the generic SPEC properties are checked per record.

Faults are deliveries, not special code paths: a lost response is `crash_after_commit` followed
by the same command again; a duplicate is delivered twice inside one step; a crash before commit
and an I/O error at effect k must leave the projection byte-for-byte unchanged (RUN-06).

The properties are grouped so that each `@invariant` of a machine checks one group over the
records delivered since that invariant last ran. A broken property raises `ModelViolation` (an
`AssertionError`, so Hypothesis shrinks it) naming the SPEC id; the checks do not rely on
`assert`, so they still run under `python -O` (where the kernel's contracts are off).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from conformance.run.adapter import StepResult
from conformance.run.faults import Fault, FaultKind
from conformance.run.pages import PageRequest, SourceQuery
from conformance.run.projection import project
from conformance.run.recorder import Recorder
from conformance.run.trace import (
    AnyCommand,
    Expectation,
    Step,
    TokenNames,
    Trace,
    TraceCommand,
    TraceHeader,
    encode_trace_command,
    projection_digest,
)
from kernel import (
    ActivateLocal,
    AdmitRun,
    Applied,
    Attempt,
    CompletedEvidence,
    CompleteLocal,
    CompleteWithLease,
    ConvergeCancel,
    Event,
    ExpireWithLease,
    FailStart,
    GrantLease,
    Lease,
    LiveEvidence,
    LostRetryStep,
    RecoverLocalStartup,
    RecoverRuntime,
    RenewLease,
    RunAggregate,
    UnknownEvidence,
    apply,
    check_invariants,
)
from kernel.commands import Command
from kernel.specs.codes import Code
from kernel.specs.states import (
    FINAL_ATTEMPT_STATUSES,
    FINAL_LEASE_STATUSES,
    Actor,
    AttemptStatus,
    CompletionOutcome,
    LeaseStatus,
    ReleaseReason,
    RunStatus,
)
from model_tests import oracle
from model_tests.oracle import FENCED_TYPES, FencedCommand

START_MS = 1_000_000
OUTCOME_KINDS = frozenset({"applied", "replayed", "rejected", "raced"})
# Deliveries that apply the command exactly once to the state before them: the oracles of
# single transitions hold for these (a lost response still commits once; only its reply is lost).
SINGLE_DELIVERY = frozenset(
    {None, FaultKind.STALE_FENCE, FaultKind.CLOCK_SKEW, FaultKind.CRASH_AFTER_COMMIT}
)


class ModelViolation(AssertionError):
    """A model property failed; the message starts with the SPEC id."""


def require(condition: bool, spec: str, message: str) -> None:
    if not condition:
        raise ModelViolation(f"{spec}: {message}")


# -- counters ----------------------------------------------------------------------------------
@dataclass
class MachineCounts:
    steps: int = 0
    commands: int = 0
    invariant_checks: int = 0
    instances: int = 0
    # Applied convergences of a Run whose remote authority T9 revoked (Appendix E-1), checked.
    revoked_convergences: int = 0
    # Applied local completions under an intent that R-27 ended with the intent's status, checked.
    intent_completions: int = 0


@dataclass
class ModelStats:
    """Module-level counters of every machine in this process: state-machine steps (rules run),
    kernel commands delivered through the recorder, and invariant checks performed."""

    by_machine: dict[str, MachineCounts] = field(default_factory=dict)
    outcomes: Counter[str] = field(default_factory=Counter)  # "command kind code"
    # The budgeted (timed) runs of the model tests: steps and wall time per machine.
    timed_steps: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def of(self, machine: str) -> MachineCounts:
        counts = self.by_machine.get(machine)
        if counts is None:
            counts = self.by_machine[machine] = MachineCounts()
        return counts

    @property
    def steps(self) -> int:
        return sum(c.steps for c in self.by_machine.values())

    @property
    def commands(self) -> int:
        return sum(c.commands for c in self.by_machine.values())

    @property
    def invariant_checks(self) -> int:
        return sum(c.invariant_checks for c in self.by_machine.values())

    @property
    def instances(self) -> int:
        return sum(c.instances for c in self.by_machine.values())

    def reset(self) -> None:
        self.by_machine.clear()
        self.outcomes.clear()
        self.timed_steps.clear()
        self.seconds.clear()

    def summary(self, seconds: float | None = None) -> str:
        """One line per machine and a total; with `seconds`, the rate of all steps counted.
        The timed (budgeted) runs, if any, get their own line with their own rate."""
        lines = []
        for name in sorted(self.by_machine):
            c = self.by_machine[name]
            lines.append(
                f"{name}: {c.steps} steps, {c.commands} commands, "
                f"{c.invariant_checks} invariant checks, {c.instances} machine runs"
            )
        total = (
            f"total: {self.steps} steps, {self.commands} commands, "
            f"{self.invariant_checks} invariant checks"
        )
        if seconds is not None and seconds > 0:
            total += f" in {seconds:.1f} s ({self.steps / seconds:.0f} steps/s)"
        lines.append(total)
        timed = sum(self.timed_steps.values())
        wall = sum(self.seconds.values())
        if timed and wall > 0:
            lines.append(
                f"budgeted runs: {timed} steps in {wall:.1f} s ({timed / wall:.0f} steps/s)"
            )
        return "\n".join(lines)


STATS = ModelStats()


# -- records -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Snapshot:
    """The durable state between two deliveries: every Run aggregate and its Events. The
    aggregates are immutable values, so a snapshot shares them with the store. Two snapshots
    that are equal project to the same canonical projection byte for byte (the projection is a
    pure function of these rows), which is what RUN-06 compares."""

    aggregates: Mapping[str, RunAggregate]
    events: Mapping[str, tuple[Event, ...]]

    def agg(self, run_id: str) -> RunAggregate | None:
        return self.aggregates.get(run_id)

    def attempt_count(self, run_id: str) -> int:
        agg = self.aggregates.get(run_id)
        return 0 if agg is None else len(agg.attempts)

    def same(self, other: Snapshot) -> bool:
        # Unchanged rows are the very same objects, so this is mostly identity checks.
        return self.aggregates == other.aggregates and self.events == other.events

    def projection(self) -> dict[str, list[dict[str, object]]]:
        return project(self.aggregates.values(), self.events)


EMPTY = Snapshot({}, {})


class LazyRecorder(Recorder):
    """A `Recorder` that applies every step to the reference store exactly as the base class
    does, but keeps each step's durable state and builds the canonical projections (and their
    digests) only when the trace is asked for. The projection after a step is a pure function
    of that state, so the trace is identical to an eager recording (tested); building it on
    every step was most of a model step's cost."""

    def __init__(self, header: TraceHeader, names: TokenNames | None = None) -> None:
        super().__init__(header, names)
        self._log: list[
            tuple[TraceCommand | None, int, Fault | None, StepResult, Snapshot, PageRequest | None]
        ] = []
        self.state = EMPTY

    def step(
        self, command: AnyCommand | None, observed_at_ms: int, fault: Fault | None = None
    ) -> StepResult:
        # Encoded first: a Secret that the TokenNames did not make fails before the step.
        encoded = None if command is None else encode_trace_command(command, self.names)
        self._note_fault(fault)  # M-3, as the base class does
        result = self.adapter.apply(command, observed_at_ms, fault)
        self.state = self._snapshot()
        self._log.append((encoded, observed_at_ms, fault, result, self.state, None))
        return result

    def page(
        self, request: PageRequest, observed_at_ms: int, fault: Fault | None = None
    ) -> StepResult:
        """A page step (a source query), kept like a command step."""
        self._note_fault(fault)
        result = self.adapter.page(request, observed_at_ms, fault)
        self.state = self._snapshot()
        self.capabilities.add(request.capability)
        self._log.append((None, observed_at_ms, fault, result, self.state, request))
        return result

    def _snapshot(self) -> Snapshot:
        store = self.adapter.store
        aggregates = {agg.run.run_id: agg for agg in store.aggregates()}
        events = {run_id: tuple(store.events(run_id)) for run_id in aggregates}
        return Snapshot(aggregates, events)

    def trace(self) -> Trace:
        steps: list[Step] = list(self.steps[: len(self.steps)])
        for index in range(len(steps), len(self._log)):
            encoded, at, fault, result, state, request = self._log[index]
            projection = state.projection()
            expect = Expectation(
                result.kind, result.code, projection, projection_digest(projection), result.page
            )
            steps.append(Step(index + 1, encoded, at, expect, fault, request))
        self.steps = steps
        header = dataclasses.replace(self.header, capabilities=tuple(sorted(self.capabilities)))
        return Trace(header, tuple(steps))


@dataclass(frozen=True, slots=True)
class Record:
    index: int
    command: Command | None
    at_ms: int
    fault: Fault | None
    kind: str
    code: str | None
    before: Snapshot
    after: Snapshot
    redelivery_of: Record | None = None  # the lost-response delivery this one repeats
    stale: bool = False  # the model knew, before the delivery, that its fence is stale

    @property
    def fault_kind(self) -> FaultKind | None:
        return None if self.fault is None else self.fault.kind

    @property
    def single(self) -> bool:
        return self.fault_kind in SINGLE_DELIVERY

    def target(self) -> RunAggregate | None:
        """The aggregate the command addressed, before the delivery."""
        if self.command is None:
            return None
        return oracle.addressed(self.before.aggregates, self.command)

    def where(self) -> str:
        name = "reopen" if self.command is None else self.command.name
        fault = "" if self.fault is None else f" [{self.fault.kind.value}]"
        return f"step {self.index} {name}{fault} at {self.at_ms} -> {self.kind} {self.code}"


def rec_label(rec: Record) -> str:
    return f"{rec.kind} {rec.code}" if rec.code is not None else rec.kind


def _completion_key(command: CompleteWithLease) -> tuple[str, int]:
    return command.attempt_id, command.fence.lease_generation


def same_completion(a: CompleteWithLease, b: CompleteWithLease) -> bool:
    """The exact replay identity of §1.7: same Run, Attempt, fence (Worker, session, generation,
    lease generation, token, expected version), callback sequence, outcome and exit code. The
    Worker session the control plane passes in is deliberately not part of it."""
    return (
        a.run_id == b.run_id
        and a.attempt_id == b.attempt_id
        and a.fence == b.fence
        and a.callback_sequence == b.callback_sequence
        and a.outcome is b.outcome
        and a.exit_code == b.exit_code
    )


class Harness:
    """One model run: the recorder, the model clock and the history of deliveries."""

    def __init__(
        self,
        machine: str,
        header: TraceHeader,
        known_stale: Callable[[FencedCommand], bool] | None = None,
    ) -> None:
        self.machine = machine
        self.counts = STATS.of(machine)
        self.recorder = LazyRecorder(header)
        self.names = self.recorder.names
        self.store = self.recorder.adapter.store
        self.now = START_MS
        self.records: list[Record] = []
        self.state = EMPTY
        self.known_stale = known_stale
        self._cursors: dict[str, int] = {}
        self._verified: dict[str, tuple[RunAggregate, tuple[Event, ...]]] = {}
        # model knowledge accumulated over the run
        self.final_attempts: dict[str, Attempt] = {}
        self.final_leases: dict[tuple[str, int], Lease] = {}
        self.completions: dict[tuple[str, int], CompleteWithLease] = {}
        self.attempts_at_intent: dict[str, int] = {}
        self.intent_while_lost: set[str] = set()

    # -- delivery ------------------------------------------------------------------------------
    def send(
        self,
        command: Command | None,
        *,
        at_ms: int | None = None,
        fault: Fault | None = None,
        redelivery_of: Record | None = None,
    ) -> Record:
        at = self.now if at_ms is None else at_ms
        before = self.state
        stale = (
            self.known_stale is not None
            and isinstance(command, FENCED_TYPES)
            and self.known_stale(command)
        )
        result = self.recorder.step(command, at, fault)
        self.state = self.recorder.state
        record = Record(
            index=len(self.records) + 1,
            command=command,
            at_ms=at,
            fault=fault,
            kind=result.kind,
            code=result.code,
            before=before,
            after=self.state,
            redelivery_of=redelivery_of,
            stale=stale,
        )
        self.records.append(record)
        self.counts.commands += 1
        STATS.outcomes[f"{'reopen' if command is None else command.name} {rec_label(record)}"] += 1
        self._learn(record)
        return record

    def deliver(self, command: Command, mode: str = "normal", *, arg: int = 1) -> Record:
        """Deliver `command` with a fault mode; returns the last record. `arg` is the skew in
        ms for `clock_skew` and the effect index for `io_error`."""
        if mode == "normal":
            return self.send(command)
        if mode == "lost_response":
            first = self.send(command, fault=Fault(FaultKind.CRASH_AFTER_COMMIT))
            return self.send(command, redelivery_of=first)
        if mode == "clock_skew":
            skew = max(1, arg)
            return self.send(
                command,
                at_ms=max(0, self.now - skew),
                fault=Fault(FaultKind.CLOCK_SKEW, skew_ms=skew),
            )
        if mode == "io_error":
            return self.send(command, fault=Fault(FaultKind.IO_ERROR, at_effect=max(1, arg)))
        kinds = {
            "duplicate": FaultKind.DUPLICATE_DELIVERY,
            "crash_before_commit": FaultKind.CRASH_BEFORE_COMMIT,
            "stale_fence": FaultKind.STALE_FENCE,
        }
        return self.send(command, fault=Fault(kinds[mode]))

    def reopen(self) -> Record:
        return self.send(None, fault=Fault(FaultKind.REOPEN))

    def query(self, request: SourceQuery) -> dict[str, Any]:
        """One page of a source at the model's clock, recorded as a `query` trace step. It
        writes nothing, so it makes no delivery record."""
        result = self.recorder.page(request, self.now)
        self.state = self.recorder.state
        assert result.page is not None
        return result.page

    def effect_count(self, command: Command) -> int:
        """How many effects the command would write now (0 unless it applies)."""
        outcome = apply(oracle.addressed(self.state.aggregates, command), command, self.now)
        return len(outcome.effects) if isinstance(outcome, Applied) else 0

    def trace(self) -> Trace:
        return self.recorder.trace()

    def _learn(self, rec: Record) -> None:
        """Model bookkeeping after a delivery (facts the later checks rely on)."""
        command = rec.command
        if isinstance(command, CompleteWithLease):
            key = _completion_key(command)
            agg = rec.after.agg(command.run_id)
            now_lease = agg.lease(*key) if agg is not None else None
            was = rec.before.agg(command.run_id)
            old_lease = was.lease(*key) if was is not None else None
            if (
                now_lease is not None
                and now_lease.status is LeaseStatus.COMPLETED
                and (old_lease is None or old_lease.status is not LeaseStatus.COMPLETED)
            ):
                self.completions[key] = command

    def pending(self, name: str) -> list[Record]:
        """The records an invariant has not seen yet (and mark them seen)."""
        start = self._cursors.get(name, 0)
        self._cursors[name] = len(self.records)
        return self.records[start:]

    def checked(self, n: int) -> None:
        self.counts.invariant_checks += n

    # -- RUN-01: I-1..I-9 ---------------------------------------------------------------------
    def check_kernel_invariants(self) -> int:
        """`check_invariants(agg, events)` for every Run in the store now, and for every Run an
        intermediate delivery of a multi-command step changed. A Run whose aggregate object and
        Events are exactly those already checked is not evaluated again (the check is a pure
        function of them), so only real evaluations are counted."""
        n = 0
        for rec in self.pending("kernel")[:-1]:
            for run_id, agg in rec.after.aggregates.items():
                if rec.before.aggregates.get(run_id) is not agg:
                    n += self._invariants(agg, rec.after.events.get(run_id, ()), rec)
        for run_id, agg in self.state.aggregates.items():
            n += self._invariants(agg, self.state.events.get(run_id, ()), None)
        return n

    def _invariants(self, agg: RunAggregate, events: tuple[Event, ...], rec: Record | None) -> int:
        seen = self._verified.get(agg.run.run_id)
        if seen is not None and seen[0] is agg and seen[1] == events:
            return 0
        violations = check_invariants(agg, events)
        where = "" if rec is None else f" after {rec.where()}"
        require(not violations, "RUN-01", f"{[str(v) for v in violations]}{where}")
        self._verified[agg.run.run_id] = (agg, events)
        return 1

    # -- RUN-08 / I-5 -------------------------------------------------------------------------
    def check_finality(self) -> int:
        n = 0
        for rec in self.pending("finality"):
            for run_id, before in rec.before.aggregates.items():
                after = rec.after.agg(run_id)
                require(after is not None, "I-5", f"run {run_id} disappeared at {rec.where()}")
                assert after is not None
                if after is before:
                    continue
                n += 1
                for attempt in before.attempts:
                    now = after.attempt(attempt.attempt_id)
                    require(now is not None, "RUN-08", f"attempt removed at {rec.where()}")
                    if attempt.status in FINAL_ATTEMPT_STATUSES:
                        require(
                            now == attempt,
                            "RUN-08",
                            f"{attempt.status} attempt {attempt.attempt_id} changed "
                            f"at {rec.where()}",
                        )
                for lease in before.leases:
                    now_lease = after.lease(lease.attempt_id, lease.lease_generation)
                    require(now_lease is not None, "I-5", f"lease removed at {rec.where()}")
                    if lease.status in FINAL_LEASE_STATUSES:
                        require(
                            now_lease == lease,
                            "LEASE-01",
                            f"{lease.status} lease {lease.attempt_id}/{lease.lease_generation} "
                            f"changed at {rec.where()}",
                        )
                    elif now_lease is not None:
                        moved = now_lease.version - lease.version
                        require(
                            moved in (0, 1) or rec.fault_kind is FaultKind.DUPLICATE_DELIVERY,
                            "V-2",
                            f"lease version moved by {moved} at {rec.where()}",
                        )
                if before.run.status.terminal:
                    require(after.run == before.run, "I-5", f"terminal run changed {rec.where()}")
                old_events = rec.before.events.get(run_id, ())
                new_events = rec.after.events.get(run_id, ())
                require(
                    new_events[: len(old_events)] == old_events,
                    "RUN-03",
                    f"events are not append-only at {rec.where()}",
                )
            # The first final version of every row is remembered for the whole run.
            for agg in rec.after.aggregates.values():
                for attempt in agg.attempts:
                    if attempt.status in FINAL_ATTEMPT_STATUSES:
                        first = self.final_attempts.setdefault(attempt.attempt_id, attempt)
                        require(first == attempt, "RUN-08", f"final attempt changed {rec.where()}")
                for lease in agg.leases:
                    if lease.status in FINAL_LEASE_STATUSES:
                        key = (lease.attempt_id, lease.lease_generation)
                        first_lease = self.final_leases.setdefault(key, lease)
                        require(first_lease == lease, "LEASE-01", f"final lease {rec.where()}")
            n += 1
        return n

    # -- RUN-06 and "a refusal writes nothing" --------------------------------------------------
    def check_no_write(self) -> int:
        n = 0
        for rec in self.pending("no_write"):
            n += 1
            unchanged = rec.after.same(rec.before)
            fault = rec.fault_kind
            if fault is FaultKind.CRASH_BEFORE_COMMIT:
                require(rec.kind == "crashed", "RUN-06", f"no crash reported at {rec.where()}")
                require(unchanged, "RUN-06", f"crash before commit wrote at {rec.where()}")
            elif fault is FaultKind.IO_ERROR:
                require(
                    rec.kind == "error" or rec.kind in OUTCOME_KINDS,
                    "RUN-06",
                    f"unexpected result at {rec.where()}",
                )
                if rec.kind == "error":
                    require(unchanged, "RUN-06", f"I/O error left a write at {rec.where()}")
            elif fault is FaultKind.REOPEN:
                require(rec.kind == "reopened", "SPEC §7", f"reopen at {rec.where()}")
                require(unchanged, "RUN-06", f"reopen changed state at {rec.where()}")
            elif fault is FaultKind.DUPLICATE_DELIVERY:
                continue  # two deliveries: see check_replays
            else:
                require(rec.kind in OUTCOME_KINDS, "RUN-05", f"no outcome at {rec.where()}")
                if rec.kind == "applied":
                    require(not unchanged, "RUN-03", f"applied but nothing written {rec.where()}")
                else:
                    require(unchanged, "RUN-03", f"{rec.kind} outcome wrote at {rec.where()}")
        return n

    # -- RUN-02, RETRY-09, V-1: numbering, replays and duplicates --------------------------------
    def check_replays(self) -> int:
        n = 0
        for rec in self.pending("replays"):
            n += 1
            command = rec.command
            for run_id, agg in rec.after.aggregates.items():
                numbers = [a.number for a in agg.attempts]
                require(
                    numbers == list(range(1, len(numbers) + 1)),
                    "RUN-02",
                    f"attempt numbers {numbers} at {rec.where()}",
                )
                grown = len(agg.attempts) - rec.before.attempt_count(run_id)
                require(0 <= grown <= 1, "RUN-02", f"{grown} attempts created {rec.where()}")
                if grown and run_id in rec.before.aggregates:
                    require(
                        isinstance(command, LostRetryStep),
                        "REC-10",
                        f"only lost retry inserts an attempt; {rec.where()}",
                    )
                old = rec.before.agg(run_id)
                if old is not None and old is not agg:
                    bumped = agg.run.version - old.run.version
                    limit = 2 if rec.fault_kind is FaultKind.DUPLICATE_DELIVERY else 1
                    require(0 <= bumped <= limit, "V-1", f"version +{bumped} at {rec.where()}")
            if command is None:
                continue
            if rec.fault_kind is FaultKind.DUPLICATE_DELIVERY:
                n += self._check_duplicate(rec, command)
            if rec.redelivery_of is not None:
                n += self._check_redelivery(rec, command, rec.redelivery_of)
            if rec.fault_kind is FaultKind.IO_ERROR and rec.fault is not None:
                at_effect = rec.fault.at_effect or 1
                outcome = apply(rec.target(), command, rec.at_ms)
                writes = len(outcome.effects) if isinstance(outcome, Applied) else 0
                require(
                    (rec.kind == "error") == (at_effect <= writes),
                    "RUN-06",
                    f"io_error at effect {at_effect} of {writes}: {rec.where()}",
                )
        return n

    def _check_duplicate(self, rec: Record, command: Command) -> int:
        """A duplicate delivery ends exactly where one delivery ends (lost retry may legitimately
        take its next step, R4 then R5, but never creates more than one Attempt)."""
        if isinstance(command, LostRetryStep):
            grown = rec.after.attempt_count(command.run_id) - rec.before.attempt_count(
                command.run_id
            )
            require(grown <= 1, "RETRY-09", f"duplicate created {grown} attempts {rec.where()}")
            return 1
        require(rec.kind != "applied", "RUN-03", f"the duplicate applied again: {rec.where()}")
        target = rec.target()
        once = apply(target, command, rec.at_ms)
        run_id = target.run.run_id if target is not None else command.run_id
        expected = oracle.replay_outcome(command) if isinstance(once, Applied) else None
        if not isinstance(once, Applied):
            expected = (once.kind.value, once.code)
        if expected is not None:
            require(
                (rec.kind, rec.code) == (expected[0], expected[1].value),
                "RUN-03",
                f"the second delivery must be {expected[0]} {expected[1]}: {rec.where()}",
            )
        if isinstance(once, Applied):
            expected_events = rec.before.events.get(run_id, ()) + once.events
            require(
                rec.after.agg(run_id) == once.aggregate
                and rec.after.events.get(run_id, ()) == expected_events,
                "RUN-03",
                f"duplicate delivery differs from one delivery: {rec.where()}",
            )
        else:
            require(rec.after.same(rec.before), "RUN-03", f"{rec.where()}")
        return 1

    def _check_redelivery(self, rec: Record, command: Command, first: Record) -> int:
        """A lost response then the same command again (RETRY-09, LEASE-03, RUN-03)."""
        if isinstance(command, LostRetryStep):
            grown = rec.after.attempt_count(command.run_id) - first.before.attempt_count(
                command.run_id
            )
            require(grown <= 1, "RETRY-09", f"replay created Attempt N+2: {rec.where()}")
            if first.code == Code.REQUEUED.value:
                require(rec.kind == "raced", "RETRY-09", f"requeue replay {rec.where()}")
            return 1
        if first.kind == "applied":
            require(rec.kind != "applied", "RUN-03", f"a replay applied again: {rec.where()}")
            expected = oracle.replay_outcome(command)
            if expected is not None:
                require(
                    (rec.kind, rec.code) == (expected[0], expected[1].value),
                    "RUN-03",
                    f"the replay must be {expected[0]} {expected[1]}: {rec.where()}",
                )
        elif first.kind in OUTCOME_KINDS:
            require(
                (rec.kind, rec.code) == (first.kind, first.code),
                "RUN-05",
                f"the same command on the same state answered differently: {rec.where()}",
            )
        return 1

    # -- LEASE-02, LEASE-04, LEASE-09: fences ---------------------------------------------------
    def check_fences(self) -> int:
        n = 0
        for rec in self.pending("fences"):
            command = rec.command
            if not isinstance(command, FENCED_TYPES) or rec.kind not in OUTCOME_KINDS:
                continue
            n += 1
            target = rec.target()
            identity = oracle.fence_identity_code(target, command)
            if identity is not None:
                require(
                    (rec.kind, rec.code) == ("rejected", identity.value),
                    "LEASE-02",
                    f"expected rejected {identity} at {rec.where()}",
                )
                continue
            assert target is not None
            lease = target.lease(command.attempt_id, command.fence.lease_generation)
            assert lease is not None
            require(
                not (rec.stale and rec.kind == "applied"),
                "LEASE-02",
                f"a fence the model knows is stale was applied: {rec.where()}",
            )
            if rec.kind == "applied" and rec.fault_kind is not FaultKind.DUPLICATE_DELIVERY:
                require(
                    oracle.fence_live(lease, command, rec.at_ms),
                    "LEASE-04",
                    f"applied without a live fence (status {lease.status}, v{lease.version}, "
                    f"expires {lease.expires_at_ms}): {rec.where()}",
                )
            if rec.single and lease.status is LeaseStatus.RELEASED:
                start_failed_replay = (
                    isinstance(command, FailStart)
                    and lease.release_reason is ReleaseReason.START_FAILED
                )
                # The fence fails at check 8 (status `leased`), the first check past the
                # identity: any other answer (a completion conflict, a replay) means the code
                # looked at a released lease as if it could still speak for the Attempt. (The
                # quality tier's `completion_replay_on_released_lease` survived the kind-only
                # check in the lifecycle model.)
                require(
                    (rec.kind, rec.code) == ("rejected", Code.LEASE_NOT_LEASED.value)
                    or (start_failed_replay and rec.kind == "replayed"),
                    "LEASE-09",
                    f"released lease's fence did not fail LEASE_NOT_LEASED: {rec.where()}",
                )
        return n

    # -- LEASE-03: exact completion replay -------------------------------------------------------
    def check_completion_replays(self) -> int:
        n = 0
        for rec in self.pending("completion"):
            command = rec.command
            if not isinstance(command, CompleteWithLease) or rec.kind not in OUTCOME_KINDS:
                continue
            committed = self.completions.get(_completion_key(command))
            if committed is None:
                continue
            lease = None
            agg = rec.before.agg(command.run_id)
            if agg is not None:
                lease = agg.lease(*_completion_key(command))
            if lease is None or lease.status is not LeaseStatus.COMPLETED:
                continue
            n += 1
            if same_completion(committed, command):
                require(
                    (rec.kind, rec.code) == ("replayed", Code.ALREADY_TERMINAL.value),
                    "LEASE-03",
                    f"exact completion replay did not converge: {rec.where()}",
                )
            else:
                require(
                    rec.kind == "rejected",
                    "LEASE-03",
                    f"a changed completion on a completed lease was not rejected: {rec.where()}",
                )
        return n

    # -- RETRY-11: intent beats retry -------------------------------------------------------------
    def check_cancel_beats_retry(self) -> int:
        n = 0
        for rec in self.pending("cancel"):
            for run_id, agg in rec.after.aggregates.items():
                n += 1
                if agg.run.has_cancel_intent:
                    frozen = self.attempts_at_intent.setdefault(run_id, len(agg.attempts))
                    before = rec.before.agg(run_id)
                    if before is not None and not before.run.has_cancel_intent:
                        frozen = self.attempts_at_intent[run_id] = len(before.attempts)
                    require(
                        len(agg.attempts) == frozen,
                        "RETRY-11",
                        f"attempt created after the cancellation intent: {rec.where()}",
                    )
                    if agg.run.status in (RunStatus.LOST, RunStatus.RETRY_WAIT):
                        self.intent_while_lost.add(run_id)
                if run_id in self.intent_while_lost:
                    require(
                        agg.run.status
                        in (
                            RunStatus.LOST,
                            RunStatus.RETRY_WAIT,
                            RunStatus.CANCELLED,
                            RunStatus.TIMED_OUT,
                        ),
                        "RETRY-11",
                        f"a lost run with intent became {agg.run.status}: {rec.where()}",
                    )
            command = rec.command
            if isinstance(command, LostRetryStep):
                target = rec.before.agg(command.run_id)
                if target is not None and target.run.has_cancel_intent:
                    require(rec.kind != "applied", "RETRY-11", f"retry won: {rec.where()}")
                    if rec.single:
                        require(rec.kind == "raced", "RETRY-11", f"{rec.where()}")
        return n

    # -- transition oracles (§1.7, §1.8.1, §1.9, §2) ----------------------------------------------
    def check_transitions(self) -> int:
        n = 0
        for rec in self.pending("transitions"):
            command = rec.command
            if command is None or not rec.single or rec.kind not in OUTCOME_KINDS:
                continue
            n += 1
            target = rec.target()
            if isinstance(command, ExpireWithLease):
                self._check_expiry(rec, command, target)
            elif isinstance(command, LostRetryStep):
                self._check_lost_retry(rec, command, target)
            elif isinstance(command, GrantLease):
                self._check_grant(rec, command, target)
            elif isinstance(command, RecoverLocalStartup | RecoverRuntime):
                self._check_recovery(rec, command, target)
            elif isinstance(command, ConvergeCancel):
                self._check_converge(rec, target)
            elif isinstance(command, ActivateLocal):
                self._check_activation(rec, command, target)
            elif isinstance(command, CompleteLocal):
                self._check_local_completion(rec, command.receipt.outcome, target)
            elif isinstance(command, RenewLease) and rec.kind == "applied" and target is not None:
                after = rec.after.agg(target.run.run_id)
                assert after is not None
                require(after.run == target.run, "V-1", f"renew changed the run {rec.where()}")
            elif isinstance(command, AdmitRun) and target is None and rec.kind == "applied":
                after = rec.after.agg(command.run_id)
                require(
                    after is not None
                    and after.run.status is RunStatus.QUEUED
                    and len(after.attempts) == 1
                    and after.attempts[0].status is AttemptStatus.CLAIMED,
                    "A-5",
                    f"admission wrote {after and after.run.status}: {rec.where()}",
                )
        return n

    def _check_expiry(
        self, rec: Record, command: ExpireWithLease, target: RunAggregate | None
    ) -> None:
        kind, code = oracle.expected_expiry(target, command, rec.at_ms)
        require(
            (rec.kind, rec.code) == (kind, code.value),
            "LEASE-05" if kind != "applied" else "LEASE-07",
            f"expiry expected {kind} {code}: {rec.where()}",
        )
        if kind != "applied" or target is None:
            return
        after = rec.after.agg(target.run.run_id)
        assert after is not None
        lease = after.lease(command.attempt_id, command.lease_generation)
        attempt = after.attempt(command.attempt_id)
        old_attempt = target.attempt(command.attempt_id)
        assert lease is not None
        assert attempt is not None
        assert old_attempt is not None
        require(
            lease.status is LeaseStatus.RELEASED
            and lease.release_reason is ReleaseReason.LEASE_EXPIRED,
            "LEASE-06",
            f"expired lease not released(lease_expired): {rec.where()}",
        )
        if old_attempt.status is AttemptStatus.CLAIMED:  # T7
            require(
                attempt.status is AttemptStatus.CLAIMED
                and attempt.worker_id is None
                and after.run.status is RunStatus.QUEUED,
                "LEASE-06",
                f"T7 must requeue the claimed attempt: {rec.where()}",
            )
        elif target.run.has_cancel_intent:  # T9
            require(
                after.run.status is target.run.status and attempt.status is old_attempt.status,
                "LEASE-07",
                f"T9 must only release the lease: {rec.where()}",
            )
        else:  # T8
            require(
                attempt.status is AttemptStatus.LOST
                and after.run.status is RunStatus.LOST
                and attempt.finished_at_ms == rec.at_ms,
                "LEASE-07",
                f"T8 must make attempt and run lost: {rec.where()}",
            )

    def _check_lost_retry(
        self, rec: Record, command: LostRetryStep, target: RunAggregate | None
    ) -> None:
        kind, code = oracle.expected_lost_retry(target, command, rec.at_ms)
        spec = oracle.LOST_RETRY_SPEC.get(code, "RETRY-09")
        require(
            (rec.kind, rec.code) == (kind, code.value),
            spec,
            f"lost retry expected {kind} {code}: {rec.where()}",
        )
        if kind != "applied" or target is None:
            return
        after = rec.after.agg(command.run_id)
        latest = target.latest_attempt
        assert after is not None
        assert latest is not None
        require(
            after.attempt(latest.attempt_id) == latest,
            "RETRY-08",
            f"the lost attempt changed: {rec.where()}",
        )
        new_events = rec.after.events.get(command.run_id, ())[
            len(rec.before.events.get(command.run_id, ())) :
        ]
        # RETRY-19 (found by the quality tier: a planted `run.retry_wait` Event by the scheduler
        # survived every model): every Event lost retry appends is by the reconciler.
        require(
            all(e.actor is Actor.RECONCILER for e in new_events),
            "RETRY-19",
            f"lost-retry events by {[e.actor.value for e in new_events]}: {rec.where()}",
        )
        if code in oracle.LOST_RETRY_FAILURE_CODES:
            require(
                after.run.status is RunStatus.FAILED
                and after.run.error_code == oracle.LOST_RETRY_FAILURE_CODES[code].value
                and len(after.attempts) == len(target.attempts)
                and (after.policy is None or after.policy.next_attempt_at_ms is None),
                spec,
                f"failure must set {oracle.LOST_RETRY_FAILURE_CODES[code]}: {rec.where()}",
            )
            require(
                [e.type for e in new_events] == ["run.failed"],
                "RUN-03",
                f"failure events {[e.type for e in new_events]}: {rec.where()}",
            )
        elif code is Code.SCHEDULED:
            policy = target.policy
            assert policy is not None
            assert after.policy is not None
            due = oracle.retry_base_ms(target, latest) + oracle.backoff_ms(
                policy.backoff_base_ms, policy.backoff_max_ms, latest.number
            )
            require(
                after.run.status is RunStatus.RETRY_WAIT
                and after.policy.next_attempt_at_ms == due
                and after.policy.version == policy.version + 1
                and len(after.attempts) == len(target.attempts),
                "RETRY-06",
                f"schedule must set next_attempt_at_ms={due}: {rec.where()}",
            )
            require(
                [e.type for e in new_events] == ["run.retry_wait"],
                "RETRY-06",
                f"schedule events {[e.type for e in new_events]}: {rec.where()}",
            )
        elif code is Code.REQUEUED:
            policy = target.policy
            assert policy is not None
            assert after.policy is not None
            due_at = policy.next_attempt_at_ms
            require(
                due_at is not None and rec.at_ms >= due_at,
                "RETRY-07",
                f"retry_wait left before next_attempt_at_ms={due_at}: {rec.where()}",
            )
            new = after.latest_attempt
            assert new is not None
            require(
                len(after.attempts) == len(target.attempts) + 1
                and oracle.pristine_retry_attempt(new, latest.number + 1, latest.executor_type)
                and new.attempt_id == command.new_attempt_id
                and after.run.status is RunStatus.QUEUED
                and after.policy.next_attempt_at_ms is None
                and after.policy.version == policy.version + 1,
                "RETRY-08",
                f"requeue must add exactly a pristine Attempt N+1: {rec.where()}",
            )
            require(
                [e.type for e in new_events] == ["run.queued", "attempt.claimed"],
                "RETRY-08",
                f"requeue events {[e.type for e in new_events]}: {rec.where()}",
            )

    def _check_grant(self, rec: Record, command: GrantLease, target: RunAggregate | None) -> None:
        allowed = oracle.grant_allowed(target, command, rec.at_ms)
        require(
            (rec.kind == "applied") == allowed,
            "T1",
            f"grant guards say {'apply' if allowed else 'refuse'}: {rec.where()}",
        )
        if not allowed or target is None:
            return
        after = rec.after.agg(command.run_id)
        assert after is not None
        rows = [x for x in target.leases if x.attempt_id == command.attempt_id]
        generation = max((x.lease_generation for x in rows), default=0) + 1
        lease = after.lease(command.attempt_id, generation)
        require(
            lease is not None
            and lease.status is LeaseStatus.LEASED
            and lease.version == 1
            and lease.expires_at_ms == rec.at_ms + command.lease_duration_ms
            and lease.token_digest == command.lease_token.digest()
            and lease.worker_session_id == command.worker.session_id
            and after.run.status is RunStatus.DISPATCHING,
            "LEASE-06",
            f"grant must create generation {generation} version 1: {rec.where()}",
        )

    def _check_recovery(
        self,
        rec: Record,
        command: RecoverLocalStartup | RecoverRuntime,
        target: RunAggregate | None,
    ) -> None:
        if target is None:
            return
        after = rec.after.agg(target.run.run_id)
        assert after is not None
        require(
            after.policy == target.policy and len(after.attempts) == len(target.attempts),
            "REC-10",
            f"recovery inserted an attempt or changed the policy: {rec.where()}",
        )
        # §2.1: evidence is about an Attempt past the start barrier; an expired non-pristine
        # `claimed` Attempt is released without it (§2.3 step 3), nothing can have started.
        evidence = command.evidence
        if not _claimed(target) and (
            evidence is None or isinstance(evidence, UnknownEvidence | LiveEvidence)
        ):
            require(
                rec.kind != "applied",
                "REC-03",
                f"recovery wrote without trusted evidence: {rec.where()}",
            )
        if rec.kind == "applied":
            old = target.latest_attempt
            assert old is not None
            require(
                old.status
                in (AttemptStatus.CLAIMED, AttemptStatus.STARTING, AttemptStatus.RUNNING),
                "I-R1",
                f"recovery touched a {old.status} attempt: {rec.where()}",
            )
            if isinstance(evidence, CompletedEvidence) and old.is_local:
                self._check_local_completion(rec, evidence.outcome, target)

    def _check_local_completion(
        self, rec: Record, outcome: CompletionOutcome, target: RunAggregate | None
    ) -> None:
        """L3 as amended by decision R-27 (and §2.1 `completed` evidence of a local Attempt):
        the Run and the Attempt end with the completion's outcome, except that under a
        cancellation intent anything but `succeeded` ends with the intent's status."""
        if rec.kind != "applied" or target is None:
            return
        after = rec.after.agg(target.run.run_id)
        old = target.latest_attempt
        assert after is not None
        assert old is not None
        run = target.run
        expected = oracle.local_completion_status(run, outcome)
        attempt = after.attempt(old.attempt_id)
        require(
            after.run.status is expected
            and attempt is not None
            and attempt.status.value == expected.value,
            "R-27",
            f"local completion {outcome} under intent {run.cancel_reason} ended "
            f"{after.run.status}: {rec.where()}",
        )
        if run.has_cancel_intent and expected.value != outcome.value:
            self.counts.intent_completions += 1

    def _check_converge(self, rec: Record, target: RunAggregate | None) -> None:
        """§1.9 and Appendix E-1: the outcome is the oracle's; an applied convergence ends the
        Run (and a claimed or revoked Attempt) with the intent's status, creates no Attempt,
        leaves no leased lease and no policy cursor; the E-1 case (a started remote Attempt
        whose lease T9 released) says `stop_unverified: true` on the Run's Event, nothing else
        does."""
        run_id = rec.command.run_id if rec.command is not None else ""
        kind, code = oracle.expected_converge(target, run_id, rec.at_ms)
        require(
            (rec.kind, rec.code) == (kind, code.value),
            "E-1" if target is not None and oracle.authority_revoked(target) else "§1.9",
            f"convergence expected {kind} {code}: {rec.where()}",
        )
        if rec.kind != "applied":
            return
        assert target is not None
        after = rec.after.agg(target.run.run_id)
        assert after is not None
        final = oracle.cancel_final_status(target.run.cancel_reason)
        latest = after.latest_attempt
        require(
            after.run.status is final
            and (after.policy is None or after.policy.next_attempt_at_ms is None)
            and (latest is None or after.leased_lease(latest.attempt_id) is None)
            and len(after.attempts) == len(target.attempts),
            "RETRY-11",
            f"convergence must end {final}: {rec.where()}",
        )
        revoked = oracle.authority_revoked(target)
        new_events = rec.after.events.get(run_id, ())[len(rec.before.events.get(run_id, ())) :]
        flagged = [e.type for e in new_events if ("stop_unverified", True) in e.payload]
        if revoked:
            self.counts.revoked_convergences += 1
            old_latest = target.latest_attempt
            assert old_latest is not None
            assert latest is not None
            require(
                latest.attempt_id == old_latest.attempt_id
                and latest.status.value == final.value
                and latest.finished_at_ms == rec.at_ms
                and after.leases == target.leases
                and flagged == [f"run.{final}"],
                "E-1",
                f"E-1 convergence wrote attempt {latest.status}, events {flagged}: {rec.where()}",
            )
        else:
            require(not flagged, "E-1", f"stop_unverified without E-1: {rec.where()}")

    def _check_activation(
        self, rec: Record, command: ActivateLocal, target: RunAggregate | None
    ) -> None:
        if rec.kind != "applied":
            return
        latest = target.latest_attempt if target is not None else None
        require(
            target is not None
            and latest is not None
            and latest.attempt_id == command.attempt_id
            and latest.status is AttemptStatus.CLAIMED
            and latest.lease_generation is None
            and target.run.status is RunStatus.QUEUED
            and not target.run.has_cancel_intent,
            "RETRY-18",
            f"activation of a non-activatable attempt: {rec.where()}",
        )


def _claimed(agg: RunAggregate) -> bool:
    latest = agg.latest_attempt
    return latest is not None and latest.status is AttemptStatus.CLAIMED
