"""A worked third-party runner: the Run domain and its Workflows kept in one JSON file, behind
the ports that `qlk conform` checks (docs/adapter-guide.md, "From nothing to a passing adapter").

Copy this file into a folder of your own and run, from that folder,

    qlk conform --runner jsonstore:make_adapter

It is a real store, not a mock: every committed transaction is a new version of the file,
written to a temporary file, flushed to disk and renamed over the old one with `os.replace`
(atomic on POSIX), so a process killed at any point leaves the old or the new file, never half
of one (RUN-06). An exclusive `flock` on a lock file beside it makes each transaction's
read-modify-write serial across processes, as `BEGIN IMMEDIATE` does for SQLite (B-35). Nothing
is cached between transactions: each one reads the file, so a second process, or this one after
a restart, sees exactly what was committed.

It decides nothing (ARCHITECTURE rule 1). It uses three kernel helpers, each for what it defines:

- `kernel.apply_effects` persists one effect the way the effect's docstring defines it, and
  raises `EffectConflict` when the effect's guard (version, status, lease generation, token
  digest; V-1, V-2) does not hold against the row read in this transaction: mapped to
  `StaleWrite`. Event uniqueness (`seq`, `dedupe_key`; V-3) and attempt ids unique across Runs are
  this store's own keys, checked here. `kernel.workflow.apply_workflow_effects` does the same
  for the Workflow rows (SPEC §4.1: the StepRun epoch CAS, one ledger entry per StepRun epoch,
  I-W1); the keys it cannot see (step run ids, ledger attempt and event ids across Runs, a
  Workflow's step keys and ordinals, the rows a new row refers to) are checked here.
- `kernel.selection` answers every source (SPEC §1.8.2, §1.8.3, §1.9, §2.2, §2.3, §3.16) and
  `kernel.workflow`'s selection functions the five Workflow sources (§4.2-§4.5): a store
  without a query language hands them every aggregate and gets the oracle's own page.
- `conformance.run.projection.project` builds the canonical projection from the rows as stored.

It declares the `workflow` capability: a Workflow is a Run (`kind = workflow`) whose entry also
holds its admission, StepRuns and Task admission ledger, so one Workflow transaction is still one
new version of the file (I-W4). It declares `approved_action` too (SPEC §5, issue 19): the
approval requests and their Events sit beside the Runs in the same file (the rows of
`kernel.approved_action.codec`), so a start, which ends the action and admits its Run, is still
one new version of the file; `kernel.approved_action.selection.due_page` answers the two due
indexes.
"""

from __future__ import annotations

import dataclasses
import enum
import fcntl
import json
import os
import shutil
import tempfile
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from conformance.run.adapter import StoreAdapter
from conformance.run.projection import Projection, project
from kernel import (
    AppendEvent,
    Attempt,
    EffectConflict,
    Event,
    InsertAttempt,
    Lease,
    Run,
    RunAggregate,
    RunRetryPolicy,
    apply_effects,
)
from kernel.approved_action import (
    ACTION_EFFECT_TYPES,
    ActionAggregate,
    ActionCursor,
    ActionEffect,
    ActionSource,
    AnyActionEffect,
    ApprovedAction,
    DuePage,
    InsertAction,
    UpdateAction,
    action_event_from_row,
    action_event_row,
    action_from_row,
    action_row,
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
    apply_workflow_effects,
)
from runners.engine import StaleWrite
from runners.sources import SelectionSources, WorkflowSelectionSources

Row = dict[str, Any]
#: The file's content: one entry per Run, its rows as plain JSON (enums as their values). A
#: Workflow Run's entry also holds its `admission` (else `None`), `step_runs` and `ledger`.
Data = dict[str, dict[str, Any]]
#: The approval requests (SPEC §5, issue 19), by action id: `{"action": row, "events": [row]}`.
Actions = dict[str, dict[str, Any]]
Entity = (
    Run | Attempt | RunRetryPolicy | Lease | Event | WorkflowAdmission | StepRun | TaskAdmission
)


def _encode(value: Entity) -> Row:
    """An entity as a JSON object, field by field (enums as values, a payload as pairs)."""
    out: Row = {}
    for item in dataclasses.fields(value):
        field = getattr(value, item.name)
        if isinstance(field, enum.Enum):
            field = field.value
        elif item.name == "payload":
            field = [[k, v.value if isinstance(v, enum.Enum) else v] for k, v in field]
        elif item.name == "depends_on":
            field = list(field)
        out[item.name] = field
    return out


def _enum_fields(cls: type) -> dict[str, type[enum.Enum]]:
    """The fields of an entity whose type is an enum (optional or not), with that enum."""
    found: dict[str, type[enum.Enum]] = {}
    for name, hint in typing.get_type_hints(cls).items():
        for option in typing.get_args(hint) or (hint,):
            if isinstance(option, type) and issubclass(option, enum.Enum):
                found[name] = option
    return found


#: The enum fields of each stored entity, found once from the type hints.
_ENUMS: dict[type, dict[str, type[enum.Enum]]] = {
    cls: _enum_fields(cls)
    for cls in (
        Run,
        Attempt,
        RunRetryPolicy,
        Lease,
        Event,
        WorkflowAdmission,
        StepRun,
        TaskAdmission,
    )
}

T = typing.TypeVar("T")


def _decode(cls: type[T], row: Row) -> T:
    """The entity `cls` back from its JSON object."""
    values = dict(row)
    for name, kind in _ENUMS[cls].items():
        if values.get(name) is not None:
            values[name] = kind(values[name])
    if "payload" in values:
        values["payload"] = tuple((k, v) for k, v in values["payload"])
    if "depends_on" in values:
        values["depends_on"] = tuple(values["depends_on"])
    return cls(**values)


def _aggregate(entry: dict[str, Any]) -> RunAggregate:
    return RunAggregate(
        run=_decode(Run, entry["run"]),
        attempts=tuple(_decode(Attempt, a) for a in entry["attempts"]),
        policy=None if entry["policy"] is None else _decode(RunRetryPolicy, entry["policy"]),
        leases=tuple(_decode(Lease, x) for x in entry["leases"]),
    )


def _workflow(entry: dict[str, Any]) -> WorkflowAggregate | None:
    """The Workflow of a Run's entry (StepRuns in plan order, the ledger in admission order, as
    written), or `None` when the Run has no Workflow admission."""
    if entry["admission"] is None:
        return None
    return WorkflowAggregate(
        core=_aggregate(entry),
        admission=_decode(WorkflowAdmission, entry["admission"]),
        step_runs=tuple(_decode(StepRun, s) for s in entry["step_runs"]),
        ledger=tuple(_decode(TaskAdmission, e) for e in entry["ledger"]),
    )


class JsonTransaction:
    """One transaction: the file as read when it began, changed in memory; written (all of it,
    or nothing) when the block ends normally."""

    def __init__(self, data: Data, actions: Actions | None = None) -> None:
        self.data = data
        self.actions: Actions = {} if actions is None else actions

    def load_run(self, run_id: str) -> RunAggregate | None:
        entry = self.data.get(run_id)
        return None if entry is None else _aggregate(entry)

    def load_run_of_attempt(self, attempt_id: str) -> RunAggregate | None:
        for entry in self.data.values():
            if any(a["attempt_id"] == attempt_id for a in entry["attempts"]):
                return _aggregate(entry)
        return None

    def load_workflow(self, run_id: str) -> WorkflowAggregate | None:
        entry = self.data.get(run_id)
        return None if entry is None else _workflow(entry)

    def load_workflow_of_attempt(self, attempt_id: str) -> WorkflowAggregate | None:
        owner = self.load_run_of_attempt(attempt_id)
        return None if owner is None else self.load_workflow(owner.run.run_id)

    def load_action(self, action_id: str) -> ActionAggregate | None:
        """An approval request and the Run under its Run id (the reconciler's evidence)."""
        entry = self.actions.get(action_id)
        if entry is None:
            return None
        action = action_from_row(entry["action"])
        return ActionAggregate(action, self.load_run(action.run_id))

    def _execute_action(self, effect: ActionEffect) -> None:
        """Persist one approval row with the SQL runners' keys and guard: an action id and its
        Run id each held by one action, the version CAS, an Event's `(action_id, seq)`."""
        if isinstance(effect, InsertAction):
            row = effect.row
            if row.action_id in self.actions or any(
                e["action"]["run_id"] == row.run_id for e in self.actions.values()
            ):
                raise StaleWrite(f"action {row.action_id} or its run {row.run_id} exists")
            self.actions[row.action_id] = {"action": action_row(row), "events": []}
            return
        if isinstance(effect, UpdateAction):
            entry = self.actions.get(effect.row.action_id)
            if entry is None or entry["action"]["version"] != effect.expected_version:
                raise StaleWrite(f"action {effect.row.action_id}: version guard")
            entry["action"] = action_row(effect.row)
            return
        event = effect.event
        entry = self.actions.get(event.action_id)
        if entry is None or any(e["seq"] == event.seq for e in entry["events"]):
            raise StaleWrite(f"action event {event.action_id}/{event.seq} or its action")
        entry["events"].append(action_event_row(event))

    def execute(self, effect: WorkflowEffect | AnyActionEffect) -> None:
        """Persist one effect, or raise `StaleWrite` when its guard or a key does not hold."""
        if isinstance(effect, ACTION_EFFECT_TYPES):
            self._execute_action(effect)
            return
        if isinstance(
            effect, InsertWorkflowAdmission | InsertStepRun | UpdateStepRun | InsertTaskAdmission
        ):
            self._execute_workflow(effect)
            return
        if isinstance(effect, AppendEvent):
            event = effect.event
            entry = self.data.get(event.run_id)
            if entry is None:
                raise StaleWrite(f"event for a missing run {event.run_id}")
            for other in entry["events"]:  # unique (run_id, seq) and (run_id, dedupe_key): V-3
                if other["seq"] == event.seq or other["dedupe_key"] == event.dedupe_key:
                    raise StaleWrite(f"event seq {event.seq} or its dedupe key exists")
            entry["events"].append(_encode(event))
            return
        run_id = effect.row.run_id
        if isinstance(effect, InsertAttempt):  # attempt ids are keys across all Runs (§1.1)
            owner = self.load_run_of_attempt(effect.row.attempt_id)
            if owner is not None and owner.run.run_id != run_id:
                raise StaleWrite(f"attempt {effect.row.attempt_id} belongs to another run")
        entry = self.data.get(run_id)
        before = None if entry is None else _aggregate(entry)
        try:
            after = apply_effects(before, (effect,))
        except EffectConflict as exc:  # the guard did not hold: zero rows, never a success
            raise StaleWrite(str(exc)) from None
        new: dict[str, Any] = {"events": [], "admission": None, "step_runs": [], "ledger": []}
        self.data[run_id] = {
            **(new if entry is None else entry),  # its Events and Workflow rows, unchanged
            "run": _encode(after.run),
            "attempts": [_encode(a) for a in after.attempts],
            "policy": None if after.policy is None else _encode(after.policy),
            "leases": [_encode(x) for x in after.leases],
        }

    def _execute_workflow(
        self, effect: InsertWorkflowAdmission | InsertStepRun | UpdateStepRun | InsertTaskAdmission
    ) -> None:
        """Persist one Workflow row (SPEC §4.1) as the SQL runners' keys and guards would."""
        row = effect.row
        entry = self.data.get(row.run_id)
        if entry is None:  # every Workflow row refers to its Run
            raise StaleWrite(f"workflow row for a missing run {row.run_id}")
        if isinstance(effect, InsertWorkflowAdmission):  # one admission per Run (its key)
            if entry["admission"] is not None:
                raise StaleWrite(f"workflow admission {row.run_id} exists")
            entry["admission"] = _encode(effect.row)
            return
        before = _workflow(entry)
        if before is None:  # a StepRun or a ledger entry refers to the Workflow's admission
            raise StaleWrite(f"run {row.run_id} has no workflow admission")
        if isinstance(effect, InsertStepRun):
            step = effect.row
            if any(  # step run ids are keys across all Workflows
                s["step_run_id"] == step.step_run_id
                for other in self.data.values()
                for s in other["step_runs"]
            ) or any(  # unique (run_id, step_key) and (run_id, ordinal)
                s.step_key == step.step_key or s.ordinal == step.ordinal for s in before.step_runs
            ):
                raise StaleWrite(f"step run {step.step_run_id}, its key or its ordinal exists")
        if isinstance(effect, InsertTaskAdmission):
            admitted = effect.row
            if any(  # attempt ids and event ids are keys of the whole ledger
                e["attempt_id"] == admitted.attempt_id or e["event_id"] == admitted.event_id
                for other in self.data.values()
                for e in other["ledger"]
            ):
                raise StaleWrite(f"task admission {admitted.attempt_id} or its event id exists")
            if (  # it refers to a StepRun and an Attempt of this Workflow
                before.step_run(admitted.step_run_id) is None
                or before.attempt(admitted.attempt_id) is None
            ):
                raise StaleWrite("task admission of a missing step run or attempt")
        try:  # the epoch CAS and one ledger entry per StepRun epoch (I-W1)
            after = apply_workflow_effects(before, (effect,))
        except EffectConflict as exc:
            raise StaleWrite(str(exc)) from None
        entry["step_runs"] = [_encode(s) for s in after.step_runs]
        entry["ledger"] = [_encode(e) for e in after.ledger]


class JsonStore(SelectionSources, WorkflowSelectionSources):
    """The storage port (`runners.engine.Storage`, and `WorkflowStorage`), the sources
    (`runners.sources.Sources` and the Workflow sources) and the projection over one JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = path.with_name(path.name + ".lock")

    def _read_all(self) -> tuple[Data, Actions]:
        """The Runs and the approval requests, as committed."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}, {}  # a fresh database: no Run yet
        content: dict[str, Any] = json.loads(text)
        return content["runs"], content["actions"]

    def _read(self) -> Data:
        return self._read_all()[0]

    def _write(self, data: Data, actions: Actions | None = None) -> None:
        """The new version of the file, whole, then renamed over the old one (atomic); without
        `actions`, the approval requests as committed."""
        if actions is None:
            actions = self._read_all()[1]
        temporary = self.path.with_name(self.path.name + ".tmp")
        with temporary.open("w", encoding="utf-8") as out:
            out.write(json.dumps({"runs": data, "actions": actions}, separators=(",", ":")))
            out.flush()
            os.fsync(out.fileno())  # durable before it becomes the database
        os.replace(temporary, self.path)

    @contextmanager
    def transaction(self) -> Iterator[JsonTransaction]:
        """Commit when the block ends normally; when it raises nothing is written."""
        with self._lock.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one writer at a time, released when we close
            tx = JsonTransaction(*self._read_all())
            yield tx
            self._write(tx.data, tx.actions)

    # -- the sources: the kernel's oracle over every stored aggregate (SelectionSources) -------
    def aggregates(self) -> list[RunAggregate]:
        return [_aggregate(entry) for entry in self._read().values()]

    # -- the Workflow sources: `kernel.workflow`'s oracle over every stored Workflow ------------
    def workflows(self) -> list[WorkflowAggregate]:
        found = (_workflow(entry) for entry in self._read().values())
        return [wf for wf in found if wf is not None]

    # -- the approval domain's due indexes: the kernel's oracle over every stored action ---------
    def action_page(self, source: ActionSource, after: ActionCursor | None, limit: int) -> DuePage:
        return due_page(self._actions(), source, after, limit)

    def _actions(self) -> list[ApprovedAction]:
        return [action_from_row(entry["action"]) for entry in self._read_all()[1].values()]

    # -- the projection: read from the file itself, not through the kernel --------------------
    def project(self) -> Projection:
        data, actions = self._read_all()
        aggregates = [_aggregate(entry) for entry in data.values()]
        events = {
            run_id: [_decode(Event, e) for e in entry["events"]] for run_id, entry in data.items()
        }
        workflows = [wf for wf in map(_workflow, data.values()) if wf is not None]
        return project(
            aggregates,
            events,
            workflows,
            actions=[action_from_row(entry["action"]) for entry in actions.values()],
            action_events=[
                action_event_from_row(e) for entry in actions.values() for e in entry["events"]
            ],
        )


class JsonAdapter(StoreAdapter):
    """The conformance adapter: commands, faults and pages through the suite's shared step
    semantics (`StoreAdapter`), the store above, and the two optional ports: `guards` (guard
    mode probes `store`) and `kill` (kill mode re-creates the adapter from `locator()` in a
    child process on the same file). `workflow`: the store persists Workflows and answers the
    Workflow sources, so the Workflow traces are replayed rather than reported not applicable;
    `approved_action`: likewise the approval requests and their two due indexes."""

    name = "jsonstore"
    capabilities = frozenset(
        {
            "run",
            "faults",
            "sources",
            "local_recovery",
            "cluster_recovery",
            "lost_retry_local",
            "lost_retry_cluster",
            "guards",
            "kill",
            "workflow",
            "approved_action",
        }
    )

    store: JsonStore

    def __init__(self, path: Path, *, owned: Path | None) -> None:
        self.store = JsonStore(path)
        self._owned = owned  # the temporary folder `close()` deletes, if this adapter made it

    def locator(self) -> str:
        """The kill-mode port: what `make_adapter` needs to open this same database."""
        return str(self.store.path)

    def reopen(self) -> None:
        return None  # nothing is cached between transactions: a restart changes nothing

    def close(self) -> None:
        if self._owned is not None:
            shutil.rmtree(self._owned, ignore_errors=True)
            self._owned = None


def make_adapter(locator: str | None = None) -> JsonAdapter:
    """The factory `qlk conform` calls: with no argument, a fresh, empty database in a new
    temporary folder (deleted on `close()`); with a `locator()` of another adapter, that same
    database, which this adapter does not own (kill mode's child process)."""
    if locator is not None:
        return JsonAdapter(Path(locator), owned=None)
    folder = Path(tempfile.mkdtemp(prefix="jsonstore-"))
    return JsonAdapter(folder / "db.json", owned=folder)
