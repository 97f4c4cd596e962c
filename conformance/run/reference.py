"""The in-memory reference store: the oracle of the conformance suite (SPEC §7).

It implements the same storage port as the SQLite and PostgreSQL runners and persists effects
with `kernel.apply_effects`, which re-checks every guard exactly as their SQL must. It contains no
rule of its own: the engine calls the kernel, the store keeps rows. It is never a runner under
test.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from conformance.run.projection import Projection, project
from kernel import (
    AppendEvent,
    Effect,
    EffectConflict,
    Event,
    InsertAttempt,
    RunAggregate,
    apply_effects,
)
from runners.engine import StaleWrite
from runners.sources import SelectionSources


@dataclass
class _State:
    aggregates: dict[str, RunAggregate] = field(default_factory=dict)
    events: dict[str, list[Event]] = field(default_factory=dict)
    attempt_index: dict[str, str] = field(default_factory=dict)


class ReferenceTransaction:
    """Copy-on-write scratch over the committed state; discarded on rollback."""

    def __init__(self, state: _State) -> None:
        self._state = state

    def load_run(self, run_id: str) -> RunAggregate | None:
        return self._state.aggregates.get(run_id)

    def load_run_of_attempt(self, attempt_id: str) -> RunAggregate | None:
        run_id = self._state.attempt_index.get(attempt_id)
        return None if run_id is None else self._state.aggregates.get(run_id)

    def execute(self, effect: Effect) -> None:
        if isinstance(effect, AppendEvent):
            log = self._state.events.setdefault(effect.event.run_id, [])
            if any(
                e.seq == effect.event.seq or e.dedupe_key == effect.event.dedupe_key for e in log
            ):
                raise StaleWrite("event seq or dedupe key exists")
            log.append(effect.event)
            return
        run_id = effect.row.run_id
        if isinstance(effect, InsertAttempt):
            # Attempt ids are primary keys across all Runs (§1.1), as in every runner's schema.
            owner = self._state.attempt_index.get(effect.row.attempt_id)
            if owner is not None and owner != run_id:
                raise StaleWrite("attempt id belongs to another Run")
        before = self._state.aggregates.get(run_id)
        try:
            after = apply_effects(before, (effect,))
        except EffectConflict as exc:
            raise StaleWrite(str(exc)) from None
        self._state.aggregates[run_id] = after
        for attempt in after.attempts:
            self._state.attempt_index[attempt.attempt_id] = run_id


class ReferenceStore(SelectionSources):
    """A dictionary of aggregates and Event logs behind the storage port; its sources are the
    kernel's selection oracle itself (`SelectionSources` over `aggregates()`)."""

    def __init__(self) -> None:
        self._state = _State()

    @contextmanager
    def transaction(self) -> Iterator[ReferenceTransaction]:
        scratch = copy.copy(self._state)
        scratch.aggregates = dict(self._state.aggregates)
        scratch.events = {k: list(v) for k, v in self._state.events.items()}
        scratch.attempt_index = dict(self._state.attempt_index)
        yield ReferenceTransaction(scratch)
        self._state = scratch  # commit only when the block did not raise

    def aggregates(self) -> list[RunAggregate]:
        return list(self._state.aggregates.values())

    def events(self, run_id: str) -> list[Event]:
        return list(self._state.events.get(run_id, ()))

    def project(self) -> Projection:
        return project(self._state.aggregates.values(), self._state.events)
