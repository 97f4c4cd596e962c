"""The contracts every public transition carries (SPEC §0.3, issue: contracts).

`@transition` states, with icontract:
- require: `observed_at_ms` is a non-negative int; the input aggregate, if any, satisfies the
  invariants I-1..I-9 (a broken durable aggregate is a programming or storage error, never a
  domain result: runners fail closed on it before calling the kernel);
- ensure: an `Applied` aggregate satisfies the invariants; `Run.version` moved by exactly one
  (or not at all for a renew-only transaction, V-1); every updated lease moved by exactly one
  (V-2); final rows did not change (I-5); Events are numbered on from `Run.event_seq` at the
  observation time (V-3, V-4); and the effects, applied to the input exactly as a runner's SQL
  would, reproduce the returned aggregate. `Replayed`/`Rejected`/`Raced` carry no effects.

Switch: contracts follow icontract's default, `enabled=__debug__`. Running Python with `-O`
(or `PYTHONOPTIMIZE=1`) turns them off; `benchmarks/kernel.py` measures the difference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import icontract

from kernel.effects import (
    AppendEvent,
    EffectConflict,
    UpdateLease,
    UpdateRun,
    apply_effects,
)
from kernel.entities import RunAggregate
from kernel.outcomes import Applied, Outcome
from kernel.specs.invariants import Violation, check_invariants, i5_finality

F = TypeVar("F", bound=Callable[..., Outcome])


def step_violations(before: RunAggregate | None, result: Outcome, now: int) -> list[Violation]:
    """Everything the postcondition checks, as a list of violations (also used by the models)."""
    if not isinstance(result, Applied):
        return []
    after = result.aggregate
    out = check_invariants(after)
    run_id = after.run.run_id
    try:
        replayed = apply_effects(before, result.effects)
    except EffectConflict as exc:
        out.append(Violation("EFFECTS", run_id, f"effects do not apply: {exc}"))
    else:
        if replayed != after:
            out.append(Violation("EFFECTS", run_id, "effects do not reproduce the aggregate"))
    run_updates = [e for e in result.effects if isinstance(e, UpdateRun)]
    if before is not None:
        out.extend(i5_finality(before, after))
        bumped = after.run.version - before.run.version
        if run_updates and bumped != 1:
            out.append(Violation("V-1", run_id, f"run version moved by {bumped}"))
        if not run_updates and (bumped != 0 or after.run != before.run):
            out.append(Violation("V-1", run_id, "run changed without a run update"))
        first_seq = before.run.event_seq + 1
    else:
        first_seq = 1
    for effect in result.effects:
        if isinstance(effect, UpdateLease) and effect.row.version != effect.expected_version + 1:
            out.append(Violation("V-2", run_id, f"lease {effect.row.attempt_id} version jump"))
    events = [e.event for e in result.effects if isinstance(e, AppendEvent)]
    if [e.seq for e in events] != list(range(first_seq, first_seq + len(events))):
        out.append(Violation("V-3", run_id, "event seqs do not continue Run.event_seq"))
    if any(e.at_ms != now for e in events):
        out.append(Violation("V-4", run_id, "event time differs from the observation time"))
    if after.run.event_seq != first_seq - 1 + len(events):
        out.append(Violation("I-7", run_id, "Run.event_seq does not count the Events"))
    return out


def _input_ok(aggregate: RunAggregate | None) -> bool:
    return aggregate is None or not check_invariants(aggregate)


def _time_ok(observed_at_ms: object) -> bool:
    return (
        isinstance(observed_at_ms, int)
        and not isinstance(observed_at_ms, bool)
        and observed_at_ms >= 0
    )


def _step_ok(aggregate: RunAggregate | None, observed_at_ms: int, result: Outcome) -> bool:
    return not step_violations(aggregate, result, observed_at_ms)


# Named functions, not lambdas: icontract then reports a violation by name and description
# without re-parsing the decorator's source (the contracts are applied programmatically).
def transition(fn: F) -> F:
    """Decorate a transition `(aggregate, command, observed_at_ms) -> Outcome` with the shared
    contracts. The function object returned is the one every caller and alias uses (RUN-07)."""
    wrapped: Any = icontract.ensure(
        _step_ok,
        "an Applied outcome keeps I-1..I-9, moves versions by exactly one (V-1, V-2), leaves "
        "final rows unchanged (I-5), numbers Events on (V-3, V-4) and its effects reproduce it",
    )(fn)
    wrapped = icontract.require(_input_ok, "the input aggregate satisfies the invariants I-1..I-9")(
        wrapped
    )
    wrapped = icontract.require(
        _time_ok, "observed_at_ms is a non-negative integer (ms since the epoch)"
    )(wrapped)
    result: F = wrapped
    return result
