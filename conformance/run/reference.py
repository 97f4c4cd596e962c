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
from kernel.approved_action import (
    ACTION_EFFECT_TYPES,
    ActionAggregate,
    ActionCursor,
    ActionEffect,
    ActionEvent,
    ActionSource,
    AnyActionEffect,
    ApprovedAction,
    DuePage,
    InsertAction,
    UpdateAction,
    due_page,
)
from kernel.workflow import (
    InsertStepRun,
    InsertTaskAdmission,
    InsertWorkflowAdmission,
    StepRun,
    TaskAdmission,
    UpdateStepRun,
    WorkflowAdmission,
    WorkflowAggregate,
    WorkflowEffect,
)
from runners.engine import StaleWrite
from runners.sources import SelectionSources, WorkflowSelectionSources


@dataclass
class _State:
    aggregates: dict[str, RunAggregate] = field(default_factory=dict)
    events: dict[str, list[Event]] = field(default_factory=dict)
    attempt_index: dict[str, str] = field(default_factory=dict)
    # The Workflow rows (SPEC §4.1), beside the Run aggregate they belong to.
    admissions: dict[str, WorkflowAdmission] = field(default_factory=dict)
    step_runs: dict[str, StepRun] = field(default_factory=dict)
    ledger: dict[str, TaskAdmission] = field(default_factory=dict)
    # The approval domain's rows (SPEC §5, issue 19): actions by id and their Events.
    actions: dict[str, ApprovedAction] = field(default_factory=dict)
    action_events: dict[str, list[ActionEvent]] = field(default_factory=dict)


class ReferenceTransaction:
    """Copy-on-write scratch over the committed state; discarded on rollback."""

    def __init__(self, state: _State) -> None:
        self._state = state

    def load_run(self, run_id: str) -> RunAggregate | None:
        return self._state.aggregates.get(run_id)

    def load_run_of_attempt(self, attempt_id: str) -> RunAggregate | None:
        run_id = self._state.attempt_index.get(attempt_id)
        return None if run_id is None else self._state.aggregates.get(run_id)

    def load_workflow(self, run_id: str) -> WorkflowAggregate | None:
        state = self._state
        core = state.aggregates.get(run_id)
        admission = state.admissions.get(run_id)
        if core is None or admission is None:
            return None
        steps = sorted((s for s in state.step_runs.values() if s.run_id == run_id), key=_ordinal)
        ledger = sorted((e for e in state.ledger.values() if e.run_id == run_id), key=_number)
        return WorkflowAggregate(core, admission, tuple(steps), tuple(ledger))

    def load_workflow_of_attempt(self, attempt_id: str) -> WorkflowAggregate | None:
        run_id = self._state.attempt_index.get(attempt_id)
        return None if run_id is None else self.load_workflow(run_id)

    def load_action(self, action_id: str) -> ActionAggregate | None:
        """An approved action and the Run under its Run id (the reconciler's evidence)."""
        action = self._state.actions.get(action_id)
        if action is None:
            return None
        return ActionAggregate(action, self._state.aggregates.get(action.run_id))

    def _execute_action(self, effect: ActionEffect) -> None:
        """The approval domain's effects with the edge tables' keys and guards: an action id
        and a Run id are each held by one action, an update is a CAS on `version`, an Event's
        key is `(action_id, seq)` and its action must exist."""
        state = self._state
        if isinstance(effect, InsertAction):
            row = effect.row
            taken = any(a.run_id == row.run_id for a in state.actions.values())
            if row.action_id in state.actions or taken:
                raise StaleWrite("action id or its Run id exists")
            state.actions[row.action_id] = row
            return
        if isinstance(effect, UpdateAction):
            current = state.actions.get(effect.row.action_id)
            if current is None or current.version != effect.expected_version:
                raise StaleWrite("action version")
            state.actions[effect.row.action_id] = effect.row
            return
        event = effect.event
        log = state.action_events.setdefault(event.action_id, [])
        if event.action_id not in state.actions or any(e.seq == event.seq for e in log):
            raise StaleWrite("action event seq exists or its action does not")
        log.append(event)

    def execute(self, effect: WorkflowEffect | AnyActionEffect) -> None:
        state = self._state
        if isinstance(effect, ACTION_EFFECT_TYPES):
            self._execute_action(effect)
            return
        if isinstance(effect, InsertWorkflowAdmission):
            if effect.row.run_id in state.admissions or effect.row.run_id not in state.aggregates:
                raise StaleWrite("workflow admission exists or its Run does not")
            state.admissions[effect.row.run_id] = effect.row
            return
        if isinstance(effect, InsertStepRun):
            key = effect.row.step_run_id
            if key in state.step_runs or effect.row.run_id not in state.admissions:
                raise StaleWrite("step run exists or its Workflow does not")
            state.step_runs[key] = effect.row
            return
        if isinstance(effect, UpdateStepRun):
            current = state.step_runs.get(effect.row.step_run_id)
            if current is None or current.version != effect.expected_version:
                raise StaleWrite("step run epoch")
            state.step_runs[effect.row.step_run_id] = effect.row
            return
        if isinstance(effect, InsertTaskAdmission):
            row = effect.row
            taken = any(
                (e.step_run_id, e.step_run_version) == (row.step_run_id, row.step_run_version)
                or e.event_id == row.event_id
                for e in state.ledger.values()
            )
            if row.attempt_id in state.ledger or taken:
                raise StaleWrite("task admission exists")
            state.ledger[row.attempt_id] = row
            return
        self._execute_run(effect)

    def _execute_run(self, effect: Effect) -> None:
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


class ReferenceStore(SelectionSources, WorkflowSelectionSources):
    """A dictionary of aggregates and Event logs behind the storage port; its sources are the
    kernel's selection oracle itself (`SelectionSources` over `aggregates()`, the approval
    domain's due indexes `kernel.approved_action.selection.due_page` over `actions()`)."""

    def __init__(self) -> None:
        self._state = _State()

    @contextmanager
    def transaction(self) -> Iterator[ReferenceTransaction]:
        scratch = copy.copy(self._state)
        scratch.aggregates = dict(self._state.aggregates)
        scratch.events = {k: list(v) for k, v in self._state.events.items()}
        scratch.attempt_index = dict(self._state.attempt_index)
        scratch.admissions = dict(self._state.admissions)
        scratch.step_runs = dict(self._state.step_runs)
        scratch.ledger = dict(self._state.ledger)
        scratch.actions = dict(self._state.actions)
        scratch.action_events = {k: list(v) for k, v in self._state.action_events.items()}
        yield ReferenceTransaction(scratch)
        self._state = scratch  # commit only when the block did not raise

    def aggregates(self) -> list[RunAggregate]:
        return list(self._state.aggregates.values())

    def events(self, run_id: str) -> list[Event]:
        return list(self._state.events.get(run_id, ()))

    def workflows(self) -> list[WorkflowAggregate]:
        tx = ReferenceTransaction(self._state)
        found = (tx.load_workflow(run_id) for run_id in self._state.admissions)
        return [wf for wf in found if wf is not None]

    def actions(self) -> list[ApprovedAction]:
        return list(self._state.actions.values())

    def action_page(self, source: ActionSource, after: ActionCursor | None, limit: int) -> DuePage:
        """One page of a due index: the kernel's oracle itself."""
        return due_page(self._state.actions.values(), source, after, limit)

    def project(self) -> Projection:
        events = [e for log in self._state.action_events.values() for e in log]
        return project(
            self._state.aggregates.values(),
            self._state.events,
            self.workflows(),
            actions=self._state.actions.values(),
            action_events=events,
        )


def _ordinal(step: StepRun) -> int:
    return step.ordinal


def _number(entry: TaskAdmission) -> int:
    return entry.attempt_number
