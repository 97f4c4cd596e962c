"""Guard mode: every guard of every write path is enforced by the store itself (V-1, V-2;
issue 4 items 1 and 6).

The kernel checks the fence on the aggregate it was given, and every effect it returns carries
the guard that aggregate implies: `UpdateRun` the Run version it read (V-1), `UpdateAttempt` the
previous status and lease-version mirror, `UpdatePolicy` the policy version, `UpdateLease` the
lease version, status, key `(attempt_id, lease_generation)` and token digest (V-2, the fence at
the resource), and every insert its key. A trace replayed serially never meets a stale write:
the load and the write share one transaction, so a runner that silently dropped a guard from its
`WHERE` would pass every trace and still lose updates the day two writers race (a second replica,
a second process on the same file, a runner bug that reads outside its transaction).

Guard mode makes that visible without a race. For the first applied occurrence of every
`(command, outcome code)` pair in the corpus, in the state its trace built, it opens one
transaction per probe on the runner's own store, loads the aggregate, asks the kernel for the
effects, executes the effects before the probed one as they are, then executes a **stale
variant** of the probed effect: one guard field changed to a value the durable row does not have
(an older version, another status, another lease generation or token digest), or, for an insert,
the same row a second time. The store must refuse it with `StaleWrite` (zero rows, or a key
collision); the probe's transaction is then rolled back, and after all probes of a write the
projection must equal the state before them. Anything the store accepts is reported.

A Workflow write (SPEC §4, issue 18 item 3) is probed the same way on the Workflow aggregate
(`execute_workflow`'s load): its Run-side effects as above, `UpdateStepRun` with an older epoch
(`expected_version`), and `InsertWorkflowAdmission`, `InsertStepRun` and `InsertTaskAdmission`
each inserted twice (the admission's, the StepRun's and the ledger's keys: a replayed admission
must find its row, never write a second, I-W1, WF-19).

An approval write (SPEC §5, issue 19) is probed on the action as `execute_action` loads it:
`UpdateAction` with an older `expected_version` (the store's `WHERE version = ?`),
`InsertAction` and `AppendActionEvent` each twice (the action's id and Run id, the Event's
`(action_id, seq)`), and a start's Run admission effects as above.

Guard mode needs the runner's storage port (`runners.engine.Storage`), so an adapter opts in by
declaring the capability `guards` and exposing it as `adapter.store`; an adapter without it is
reported as not applicable for guard mode, never as passed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from conformance.run.adapter import ConformanceAdapter
from conformance.run.corpus import RUN_CORPUS, read_trace
from conformance.run.projection import diff
from conformance.run.replay import apply_step
from conformance.run.trace import AnyCommand, Step, decode_trace_command
from conformance.run.walk import Roots, decide, effects_of, trace_files
from kernel import (
    AppendEvent,
    InsertAttempt,
    InsertLease,
    InsertPolicy,
    InsertRun,
    Rejected,
    UpdateAttempt,
    UpdateLease,
    UpdatePolicy,
    UpdateRun,
)
from kernel.approved_action import (
    AnyActionEffect,
    AppendActionEvent,
    InsertAction,
    UpdateAction,
)
from kernel.specs import AttemptStatus, LeaseStatus
from kernel.workflow import (
    InsertStepRun,
    InsertTaskAdmission,
    InsertWorkflowAdmission,
    UpdateStepRun,
    WorkflowEffect,
)
from runners.engine import StaleWrite, Storage

#: An effect of any domain: Run, Workflow (SPEC §4) or approval (SPEC §5, issue 19).
AnyEffect = WorkflowEffect | AnyActionEffect


class _Writer(Protocol):
    """A store's transaction as a probe writes through it: every domain's effects."""

    def execute(self, effect: AnyEffect) -> None: ...


#: The capability an adapter declares when `adapter.store` is the engine's storage port.
GUARDS = "guards"

#: A token digest no lease is ever granted with (64 hex digits, not a digest of any token).
_FOREIGN_DIGEST = "0" * 63 + "f"


@dataclass(frozen=True, slots=True)
class StaleVariant:
    """One probe: the effect at `index` with guard `guard` made stale. `effects` is what the
    transaction executes in order; the last one must be refused."""

    index: int
    effect: str
    guard: str
    effects: tuple[AnyEffect, ...]

    @property
    def label(self) -> str:
        return f"{self.effect}[{self.index}].{self.guard}"


def _other_attempt_status(status: AttemptStatus) -> AttemptStatus:
    return next(s for s in AttemptStatus if s is not status)


def _other_lease_status(status: LeaseStatus) -> LeaseStatus:
    return next(s for s in LeaseStatus if s is not status)


def stale_variants(
    effect: AnyEffect,
) -> Iterator[tuple[str, tuple[AnyEffect, ...]]]:
    """Every guard of one effect (of any domain), each made stale: `(guard name, statements
    to execute)`. The last effect of each tuple is the one the store must refuse."""
    if isinstance(effect, UpdateRun | UpdateStepRun | UpdateAction):
        # The Run CAS (V-1), the StepRun epoch CAS (SPEC §4.1) and the action's CAS (issue 19):
        # an older version.
        yield (
            "version",
            (dataclasses.replace(effect, expected_version=effect.expected_version - 1),),
        )
    elif isinstance(effect, UpdateAttempt):
        status = _other_attempt_status(effect.expected_status)
        yield "status", (dataclasses.replace(effect, expected_status=status),)
        mirror = effect.expected_lease_version
        stale_mirror = 1 if mirror is None else mirror + 1
        yield "lease_version", (dataclasses.replace(effect, expected_lease_version=stale_mirror),)
    elif isinstance(effect, UpdatePolicy):
        yield (
            "version",
            (dataclasses.replace(effect, expected_version=effect.expected_version - 1),),
        )
    elif isinstance(effect, UpdateLease):
        row = effect.row
        yield (
            "version",
            (dataclasses.replace(effect, expected_version=effect.expected_version - 1),),
        )
        lease_status = _other_lease_status(effect.expected_status)
        yield "status", (dataclasses.replace(effect, expected_status=lease_status),)
        other_generation = dataclasses.replace(row, lease_generation=row.lease_generation + 1)
        yield "lease_generation", (dataclasses.replace(effect, row=other_generation),)
        forged = dataclasses.replace(row, token_digest=_FOREIGN_DIGEST)
        yield "token_digest", (dataclasses.replace(effect, row=forged),)
    elif isinstance(
        effect,
        InsertRun
        | InsertAttempt
        | InsertPolicy
        | InsertLease
        | InsertWorkflowAdmission
        | InsertStepRun
        | InsertTaskAdmission
        | InsertAction
        | AppendActionEvent,
    ):
        # The same row twice: its key (for a ledger entry the Attempt id, and with it the
        # unique StepRun epoch and Event id, I-W1; an action's id and Run id; an action
        # Event's `(action_id, seq)`) must refuse the second.
        yield "duplicate", (effect, effect)
    elif isinstance(effect, AppendEvent):
        yield "duplicate", (effect, effect)
        event = effect.event
        # Same (run_id, dedupe_key), fresh id and seq: the dedupe key alone must refuse it.
        again = dataclasses.replace(
            event, event_id=f"{event.event_id}:again", seq=event.seq + 1_000_000
        )
        yield "dedupe_key", (effect, AppendEvent(again))


def variants_of(effects: Sequence[AnyEffect]) -> Iterator[StaleVariant]:
    """Every stale variant of every effect, preceded by the effects before it, as they are."""
    for index, effect in enumerate(effects):
        prefix = tuple(effects[:index])
        for guard, tail in stale_variants(effect):
            yield StaleVariant(index, type(effect).__name__, guard, prefix + tail)


@dataclass(frozen=True, slots=True)
class GuardWrite:
    """One write path probed: where it comes from and what the store did with its probes. A
    probe ends one of three ways besides a refusal: the store `accepted` the stale write, it
    `raised` something other than the port's `StaleWrite` (a runner error, never counted as an
    acceptance), or it showed another `problem` (the kernel's answer changed, an untouched effect
    was refused, a probe changed the state)."""

    trace: str
    step: int
    command: str
    code: str
    probes: int
    accepted: tuple[str, ...] = ()  # one line per stale write the store accepted
    raised: tuple[str, ...] = ()  # one line per probe (or replay) the runner raised in
    problems: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.command}:{self.code} ({self.trace} step {self.step})"


@dataclass(frozen=True, slots=True)
class GuardReport:
    writes: tuple[GuardWrite, ...]
    not_applicable: bool = False

    @property
    def probes(self) -> int:
        return sum(w.probes for w in self.writes)

    @property
    def accepted(self) -> list[str]:
        return [line for w in self.writes for line in w.accepted]

    @property
    def raised(self) -> list[str]:
        return [line for w in self.writes for line in w.raised]

    @property
    def failures(self) -> list[str]:
        """Every finding, accepted stale writes first: the check fails when there is any."""
        return self.accepted + self.raised + [line for w in self.writes for line in w.problems]

    def summary(self) -> str:
        """One line: what was probed and how each finding counts (a raise is not an accept)."""
        line = (
            f"{len(self.writes)} write paths, {self.probes} stale writes probed (every guard of "
            f"every effect), {len(self.accepted)} accepted by the runner"
        )
        if self.raised:
            line += f", {len(self.raised)} raised (first: {self.raised[0]})"
        others = len(self.failures) - len(self.accepted) - len(self.raised)
        if others:
            line += f", {others} other findings"
        return line


class _Abort(Exception):
    """Raised inside a probe's transaction so the store rolls it back."""


@dataclass(frozen=True, slots=True)
class _Probe:
    """How one probe ended: `refused` (the guard held), `accepted`, `raised` or `problem`."""

    kind: str
    detail: str = ""


def _probe(store: Storage, command: AnyCommand, at: int, variant: StaleVariant) -> _Probe:
    """Run one probe in a transaction that is always rolled back."""
    accepted = False
    try:
        with store.transaction() as tx:
            outcome = decide(tx, command, at)
            if effects_of(outcome) is None:
                answer = f"{outcome.kind.value} {outcome.code.value}"
                return _Probe("problem", f"the kernel now answers {answer}")
            # A Workflow or approval write's effects go to the same transaction (the store
            # persists every domain its trace needs: the `workflow` or `approved_action`
            # capability).
            writer = cast(_Writer, tx)
            *before, stale = variant.effects
            for effect in before:
                writer.execute(effect)
            try:
                writer.execute(stale)
            except StaleWrite:
                pass
            else:
                accepted = True
            raise _Abort
    except _Abort:
        pass
    except StaleWrite as exc:  # an effect before the probed one failed: the path is broken
        return _Probe("problem", f"an untouched effect before the probe was refused ({exc})")
    except Exception as exc:  # the runner's own error: reported as such, not as an acceptance
        return _Probe("raised", type(exc).__name__)
    return _Probe("accepted") if accepted else _Probe("refused")


def probe_write(
    store: Storage, command: AnyCommand, at: int, project: Callable[[], Any]
) -> tuple[int, dict[str, list[str]]]:
    """Every stale variant of one write (a Run or a Workflow command), from the store's current
    state. Returns the number of probes and the findings by kind (`accepted`, `raised`,
    `problems`), one line each."""
    before = project()
    with store.transaction() as tx:
        outcome = decide(tx, command, at)
    findings: dict[str, list[str]] = {"accepted": [], "raised": [], "problems": []}
    effects = effects_of(outcome)
    if effects is None:
        answer = f"{outcome.kind.value}, not applied"
        findings["problems"].append(f"{command.name}: the kernel answers {answer}")
        return 0, findings
    probes = 0
    for variant in variants_of(effects):
        probes += 1
        result = _probe(store, command, at, variant)
        where = f"{command.name} {variant.label}"
        if result.kind == "accepted":
            findings["accepted"].append(f"{where}: stale write accepted")
        elif result.kind == "raised":
            findings["raised"].append(f"{where}: the runner raised {result.detail}")
        elif result.kind == "problem":
            findings["problems"].append(f"{where}: stale write {result.detail}")
    changes = diff(before, project())
    if changes:
        findings["problems"].append(
            f"{command.name}: probes changed the state: {'; '.join(changes[:3])}"
        )
    return probes, findings


def _write_of(step: Step) -> AnyCommand | None:
    if step.command is None or step.fault is not None or step.expect.kind != "applied":
        return None
    command = decode_trace_command(step.command)
    return None if isinstance(command, Rejected) else command


def probe_every_write(
    make_adapter: Callable[[], ConformanceAdapter],
    root: Roots = RUN_CORPUS,
    paths: Sequence[Path] | None = None,
) -> GuardReport:
    """Guard mode over a corpus (one directory, or several in order with one set of pairs
    seen: `qlk conform` passes the run and the Workflow corpus): the first applied occurrence
    of every (command, outcome code) pair, Run and Workflow commands alike, named traces first,
    each probed in the state its own trace built."""
    seen: set[tuple[str, str]] = set()
    writes: list[GuardWrite] = []
    for trace_path in trace_files(root) if paths is None else paths:
        trace = read_trace(trace_path)
        pending = {
            (s.command.name, s.expect.code or "")
            for s in trace.steps
            if _write_of(s) is not None and s.command is not None
        }
        if pending <= seen:
            continue  # nothing new here: do not pay for the replay
        adapter = make_adapter()
        try:
            if GUARDS not in adapter.capabilities:
                return GuardReport((), not_applicable=True)
            if not set(trace.header.capabilities) <= adapter.capabilities:
                continue
            store = cast(Storage, getattr(adapter, "store"))  # noqa: B009 - declared by GUARDS
            at_step = 0
            try:
                for step in trace.steps:
                    at_step = step.step
                    command = _write_of(step)
                    key = (command.name, step.expect.code or "") if command is not None else None
                    if command is not None and key is not None and key not in seen:
                        seen.add(key)
                        probes, found = probe_write(
                            store, command, step.observed_at_ms, adapter.project
                        )
                        writes.append(
                            GuardWrite(
                                trace.header.name,
                                step.step,
                                command.name,
                                key[1],
                                probes,
                                accepted=tuple(found["accepted"]),
                                raised=tuple(found["raised"]),
                                problems=tuple(found["problems"]),
                            )
                        )
                    apply_step(adapter, step)
            except Exception as exc:  # a broken runner is a finding, not a crash of the suite
                line = f"{trace.header.name} step {at_step}: the runner raised {type(exc).__name__}"
                name = trace.header.name
                writes.append(GuardWrite(name, at_step, "replay", "", 0, raised=(line,)))
        finally:
            adapter.close()
    return GuardReport(tuple(writes))
