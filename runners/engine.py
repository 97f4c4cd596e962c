"""The one engine every store runs: load -> kernel -> execute effects -> commit.

It holds no domain rule (ARCHITECTURE rules 1 and 5): it picks the aggregate the command
addresses, calls the kernel's one transition for the command, and hands each effect to the
store's transaction in order. A store whose guarded statement matches zero rows raises
`StaleWrite`; the engine rolls the transaction back and reports `Raced(CAS_CONFLICT)`. Any other
storage failure propagates after the rollback: the caller fails closed.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol, cast

from kernel import Applied, Command, Effect, Outcome, Raced, RunAggregate, apply
from kernel.approved_action import (
    ACTION_COMMAND_TYPES,
    ActionAggregate,
    ActionApplied,
    ActionCommand,
    ActionOutcome,
    AnyActionEffect,
    apply_action,
)
from kernel.specs import Code
from kernel.workflow import (
    WORKFLOW_COMMAND_TYPES,
    WorkflowAggregate,
    WorkflowApplied,
    WorkflowCommand,
    WorkflowEffect,
    WorkflowOutcome,
    apply_workflow,
)


class StaleWrite(Exception):
    """A guarded write affected zero rows: the durable row no longer matches the kernel's
    expectation (version, status, generation or token digest). Never a success."""


class StorageTransaction(Protocol):
    """One open transaction of a store (SQLite `BEGIN IMMEDIATE`, a PostgreSQL transaction, or
    the reference store's copy-on-write scratch)."""

    def load_run(self, run_id: str) -> RunAggregate | None: ...

    def load_run_of_attempt(self, attempt_id: str) -> RunAggregate | None: ...

    def execute(self, effect: Effect) -> None:
        """Persist one effect with its guard; raise `StaleWrite` on zero rows."""
        ...


class Storage(Protocol):
    def transaction(self) -> AbstractContextManager[StorageTransaction]:
        """Commit when the block ends normally; roll back when it raises."""
        ...


def load_for(tx: StorageTransaction, command: Command) -> RunAggregate | None:
    """The aggregate a command addresses: by Attempt for Attempt-addressed commands (so that a
    fence naming another Run is detected as `LEASE_RUN_MISMATCH`), else by Run."""
    attempt_id = getattr(command, "attempt_id", None)
    if isinstance(attempt_id, str) and command.name != "admit_run":
        found = tx.load_run_of_attempt(attempt_id)
        if found is not None:
            return found
    return tx.load_run(command.run_id)


class _Rollback(Exception):
    def __init__(self, outcome: Outcome) -> None:
        super().__init__("rollback")
        self.outcome = outcome


#: Reads the observation time inside an open transaction, after the aggregate's rows are
#: loaded (and, on PostgreSQL, locked): the cluster runner's database clock
#: (`runners.cluster.clock`). Reading it after the locks makes the times of conflicting
#: transactions follow their commit order.
Observe = Callable[[StorageTransaction], int]


def execute(storage: Storage, command: Command, observed_at_ms: int) -> Outcome:
    """Run one command in one transaction at `observed_at_ms` and return the kernel's outcome
    (or `Raced` when a guarded write lost a race)."""
    return execute_observed(storage, command, lambda _tx: observed_at_ms)


#: Completes a command in its transaction, after the load and before the kernel is called:
#: the cluster runner reads the Worker session a fenced command takes from its registry there
#: (database time, under the same snapshot as the aggregate). It may change only inputs that
#: do not address the aggregate (never the Run or Attempt id).
Resolve = Callable[[StorageTransaction, Command], Command]
#: Writes what must commit with an applied outcome, in the same transaction (the cluster
#: dispatcher's sealed offer beside its grant). Raising rolls the whole transaction back.
After = Callable[[StorageTransaction, Outcome], None]


def execute_observed(
    storage: Storage,
    command: Command,
    observe: Observe,
    *,
    resolve: Resolve | None = None,
    after: After | None = None,
) -> Outcome:
    """`execute` with the observation time read by `observe` in the transaction, after the
    load (a database clock); the same steps otherwise. `resolve` and `after`: see their
    types; neither decides anything, the kernel's outcome is returned as it is."""
    try:
        with storage.transaction() as tx:
            aggregate = load_for(tx, command)
            if resolve is not None:
                resolved = resolve(tx, command)
                if resolved.run_id != command.run_id or getattr(
                    resolved, "attempt_id", None
                ) != getattr(command, "attempt_id", None):
                    raise ValueError("resolve must not change the addressed Run or Attempt")
                command = resolved
            outcome = _apply(tx, aggregate, command, observe(tx))
            if after is not None and isinstance(outcome, Applied):
                after(tx, outcome)
            return outcome
    except _Rollback as rollback:
        return rollback.outcome


#: Builds the command for an Attempt from its aggregate as loaded (and locked) in the
#: transaction, or `None` when there is nothing to do. The builder is the kernel's
#: (for example `kernel.lease_expiry_scan.expiry_command`), never a runner's.
Build = Callable[[RunAggregate | None], Command | None]


def execute_built(
    storage: Storage, attempt_id: str, build: Build, observed_at_ms: int
) -> Outcome | None:
    """Load the aggregate of `attempt_id`, let the kernel build the command from it, and run
    it in the same transaction (so the command is built from what is locked, not from a
    page read earlier). `None`: the builder found nothing to do; nothing was written."""
    try:
        with storage.transaction() as tx:
            aggregate = tx.load_run_of_attempt(attempt_id)
            command = build(aggregate)
            if command is None:
                return None
            return _apply(tx, aggregate, command, observed_at_ms)
    except _Rollback as rollback:
        return rollback.outcome


def _apply(
    tx: StorageTransaction, aggregate: RunAggregate | None, command: Command, now: int
) -> Outcome:
    outcome = apply(aggregate, command, now)
    if isinstance(outcome, Applied):
        try:
            for effect in outcome.effects:
                tx.execute(effect)
        except StaleWrite:
            raise _Rollback(Raced(Code.CAS_CONFLICT)) from None
    return outcome


# -- Workflows (SPEC §4) ------------------------------------------------------------------------
class WorkflowStorageTransaction(StorageTransaction, Protocol):
    """A store's transaction that also loads Workflow aggregates and persists Workflow effects
    (the edge, cluster and reference stores all are one)."""

    def load_workflow(self, run_id: str) -> WorkflowAggregate | None: ...

    def load_workflow_of_attempt(self, attempt_id: str) -> WorkflowAggregate | None: ...

    def execute(self, effect: WorkflowEffect) -> None: ...


class WorkflowStorage(Protocol):
    def transaction(self) -> AbstractContextManager[WorkflowStorageTransaction]: ...


def load_workflow_for(
    tx: WorkflowStorageTransaction, command: WorkflowCommand
) -> WorkflowAggregate | None:
    """The Workflow a command addresses: by Attempt for Task commands, else by Run."""
    attempt_id = getattr(command, "attempt_id", None)
    if isinstance(attempt_id, str):
        found = tx.load_workflow_of_attempt(attempt_id)
        if found is not None:
            return found
    return tx.load_workflow(command.run_id)


class _WorkflowRollback(Exception):
    def __init__(self, outcome: WorkflowOutcome) -> None:
        super().__init__("rollback")
        self.outcome = outcome


def execute_workflow(
    storage: WorkflowStorage, command: WorkflowCommand, observed_at_ms: int
) -> WorkflowOutcome:
    """`execute` for a Workflow command: load the Workflow, call the kernel, persist its
    effects in the same transaction (I-W4); a guard that no longer holds is `Raced`."""
    return execute_workflow_observed(storage, command, lambda _tx: observed_at_ms)


def execute_workflow_observed(
    storage: WorkflowStorage,
    command: WorkflowCommand,
    observe: Callable[[WorkflowStorageTransaction], int],
) -> WorkflowOutcome:
    """`execute_workflow` with the observation time read in the transaction after the load."""
    try:
        with storage.transaction() as tx:
            aggregate = load_workflow_for(tx, command)
            outcome = apply_workflow(aggregate, command, observe(tx))
            if isinstance(outcome, WorkflowApplied):
                try:
                    for effect in outcome.effects:
                        tx.execute(effect)
                except StaleWrite:
                    raise _WorkflowRollback(Raced(Code.CAS_CONFLICT)) from None
            return outcome
    except _WorkflowRollback as rollback:
        return rollback.outcome


def execute_any(
    storage: WorkflowStorage,
    command: Command | WorkflowCommand | ActionCommand,
    clock: Callable[[], int],
) -> Outcome | WorkflowOutcome | ActionOutcome:
    """`execute_observed` for a Run command, `execute_workflow_observed` for a Workflow command
    (the entry point chosen by the command's type; the kernel chose the command), each reading
    `clock` inside its transaction, after the load: on one store, writes are serialized by the
    transaction, so their times follow their commit order even when two threads write one
    Workflow (a time read before the transaction could fall behind a concurrent commit and be
    refused as a clock regression, V-5). An approval-domain command goes to
    `execute_action_observed` (the store must also be an `ActionStorage`)."""
    if isinstance(command, ACTION_COMMAND_TYPES):
        return execute_action_observed(cast(ActionStorage, storage), command, lambda _tx: clock())
    if isinstance(command, WORKFLOW_COMMAND_TYPES):
        return in_transaction(storage, cast(WorkflowCommand, command), clock)
    return execute_observed(cast(Storage, storage), cast(Command, command), lambda _tx: clock())


def in_transaction(
    storage: WorkflowStorage, command: WorkflowCommand, clock: Callable[[], int]
) -> WorkflowOutcome:
    """`execute_workflow` with `clock` read inside the transaction, after the load (the local
    runtime's Workflow writes: several threads write one Workflow, see `execute_any`)."""
    return execute_workflow_observed(storage, command, lambda _tx: clock())


# -- the approval domain (SPEC §5, issue 19) ----------------------------------------------------
class ActionStorageTransaction(Protocol):
    """A store's transaction that loads an approved action with its Run and persists the
    approval domain's effects (and a start's Run admission effects)."""

    def load_action(self, action_id: str) -> ActionAggregate | None: ...

    def execute(self, effect: AnyActionEffect) -> None: ...


class ActionStorage(Protocol):
    def transaction(self) -> AbstractContextManager[ActionStorageTransaction]: ...


class _ActionRollback(Exception):
    def __init__(self, outcome: ActionOutcome) -> None:
        super().__init__("rollback")
        self.outcome = outcome


def execute_action(
    storage: ActionStorage, command: ActionCommand, observed_at_ms: int
) -> ActionOutcome:
    """`execute` for an approval-domain command: load the action and its Run, call the kernel
    (`apply_action`), persist its effects in one transaction; a guard that no longer holds is
    `Raced(CAS_CONFLICT)`."""
    return execute_action_observed(storage, command, lambda _tx: observed_at_ms)


def execute_action_observed(
    storage: ActionStorage,
    command: ActionCommand,
    observe: Callable[[ActionStorageTransaction], int],
) -> ActionOutcome:
    """`execute_action` with the observation time read in the transaction, after the load."""
    try:
        with storage.transaction() as tx:
            aggregate = tx.load_action(command.action_id)
            outcome = apply_action(aggregate, command, observe(tx))
            if isinstance(outcome, ActionApplied):
                try:
                    for effect in outcome.effects:
                        tx.execute(effect)
                except StaleWrite:
                    raise _ActionRollback(Raced(Code.CAS_CONFLICT)) from None
            return outcome
    except _ActionRollback as rollback:
        return rollback.outcome
