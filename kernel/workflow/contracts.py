"""The contracts of every Workflow transition (as `kernel.contracts` for Runs), with icontract:

- require: a non-negative integer observation time; the input aggregate, if any, keeps the
  Workflow invariants (a broken durable aggregate is a storage error, never a domain result);
- ensure: an applied aggregate keeps them; the Run version moved by exactly one and the Events
  continue `Run.event_seq` at the observation time (V-1, V-3, V-4); every changed StepRun moved
  its epoch by exactly one; final rows and the ledger did not change (I-5, I-W1); and the
  effects, applied to the input as a runner's SQL would, reproduce the aggregate (I-W4).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import icontract

from kernel.effects import AppendEvent, EffectConflict
from kernel.specs.invariants import Violation
from kernel.workflow.effects import UpdateStepRun, apply_workflow_effects
from kernel.workflow.entities import WorkflowAggregate
from kernel.workflow.invariants import check_workflow_invariants, workflow_finality
from kernel.workflow.outcomes import WorkflowApplied, WorkflowOutcome

__all__ = ["workflow_step_violations", "workflow_transition"]

F = TypeVar("F", bound=Callable[..., WorkflowOutcome])


def workflow_step_violations(
    before: WorkflowAggregate | None, result: WorkflowOutcome, now: int
) -> list[Violation]:
    """Everything the postcondition checks (also used by the models)."""
    if not isinstance(result, WorkflowApplied):
        return []
    after = result.aggregate
    run_id = after.run.run_id
    out = check_workflow_invariants(after)
    try:
        replayed = apply_workflow_effects(before, result.effects)
    except EffectConflict as exc:
        out.append(Violation("EFFECTS", run_id, f"effects do not apply: {exc}"))
    else:
        if replayed != after:
            out.append(Violation("EFFECTS", run_id, "effects do not reproduce the aggregate"))
    first_seq = 1
    if before is not None:
        out.extend(workflow_finality(before, after))
        if after.run.version != before.run.version + 1:
            out.append(Violation("V-1", run_id, "Workflow Run version did not move by one"))
        first_seq = before.run.event_seq + 1
    for effect in result.effects:
        if isinstance(effect, UpdateStepRun) and effect.row.version != effect.expected_version + 1:
            out.append(Violation("W-EPOCH", run_id, f"{effect.row.step_key} epoch jump"))
    events = [e.event for e in result.effects if isinstance(e, AppendEvent)]
    if [e.seq for e in events] != list(range(first_seq, first_seq + len(events))):
        out.append(Violation("V-3", run_id, "event seqs do not continue Run.event_seq"))
    if any(e.at_ms != now for e in events):
        out.append(Violation("V-4", run_id, "event time differs from the observation time"))
    if after.run.event_seq != first_seq - 1 + len(events):
        out.append(Violation("I-7", run_id, "Run.event_seq does not count the Events"))
    return out


def _input_ok(aggregate: WorkflowAggregate | None) -> bool:
    return aggregate is None or not check_workflow_invariants(aggregate)


def _time_ok(observed_at_ms: object) -> bool:
    return (
        isinstance(observed_at_ms, int)
        and not isinstance(observed_at_ms, bool)
        and observed_at_ms >= 0
    )


def _step_ok(aggregate: WorkflowAggregate | None, observed_at_ms: int, result: Any) -> bool:
    return not workflow_step_violations(aggregate, result, observed_at_ms)


def workflow_transition(fn: F) -> F:
    """Decorate `(aggregate, command, observed_at_ms) -> WorkflowOutcome` with the contracts."""
    wrapped: Any = icontract.ensure(
        _step_ok,
        "an applied Workflow aggregate keeps I-W1..I-W6, moves the Run by one (V-1) and each "
        "changed StepRun by one epoch, leaves final rows and the ledger alone (I-5), numbers "
        "Events on (V-3, V-4) and its effects reproduce it (I-W4)",
    )(fn)
    wrapped = icontract.require(
        _input_ok, "the input Workflow aggregate satisfies the Workflow invariants"
    )(wrapped)
    wrapped = icontract.require(
        _time_ok, "observed_at_ms is a non-negative integer (ms since the epoch)"
    )(wrapped)
    result: F = wrapped
    return result
