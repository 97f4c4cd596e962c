"""Faults as ordinary trace steps (SPEC §7, ARCHITECTURE rule 7).

`FaultyStorage` wraps any store behind the storage port and injects, inside the real
transaction, a crash before commit (after the last effect) or an I/O error at effect k (D-3:
`io_error` faults are placed by kernel effect index). The exception propagates through the
store's own transaction handling, so the store really rolls back.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

from kernel import RunAggregate
from kernel.approved_action import ACTION_EFFECT_TYPES, ActionAggregate, AnyActionEffect
from kernel.workflow import WorkflowAggregate, WorkflowEffect
from runners.engine import (
    ActionStorageTransaction,
    Storage,
    StorageTransaction,
    WorkflowStorageTransaction,
)

#: The capability a trace with any fault step needs (decision M-3), and a runner declares when
#: its store can run faults inside its own transactions.
FAULTS_CAPABILITY = "faults"


class FaultKind(enum.StrEnum):
    CRASH_BEFORE_COMMIT = "crash_before_commit"
    CRASH_AFTER_COMMIT = "crash_after_commit"
    DUPLICATE_DELIVERY = "duplicate_delivery"
    REOPEN = "reopen"
    CLOCK_SKEW = "clock_skew"
    STALE_FENCE = "stale_fence"
    IO_ERROR = "io_error"


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    at_effect: int | None = None  # io_error: 1-based index of the failing effect
    skew_ms: int | None = None  # clock_skew: how far the step's clock was moved
    at_candidate: int | None = None  # io_error on a `pass` step: 1-based candidate that fails


class InjectedCrash(Exception):
    """The process died before the transaction committed."""


class InjectedIOError(OSError):
    """Statement k of the transaction failed."""


class _FaultyTransaction:
    def __init__(self, inner: StorageTransaction, fail_at: int | None) -> None:
        self._inner = inner
        self._fail_at = fail_at
        self.executed = 0

    def load_run(self, run_id: str) -> RunAggregate | None:
        return self._inner.load_run(run_id)

    def load_run_of_attempt(self, attempt_id: str) -> RunAggregate | None:
        return self._inner.load_run_of_attempt(attempt_id)

    def load_workflow(self, run_id: str) -> WorkflowAggregate | None:
        return self._workflow().load_workflow(run_id)

    def load_workflow_of_attempt(self, attempt_id: str) -> WorkflowAggregate | None:
        return self._workflow().load_workflow_of_attempt(attempt_id)

    def load_action(self, action_id: str) -> ActionAggregate | None:
        # Approval commands reach only stores with the approval domain (`approved_action`).
        return cast(ActionStorageTransaction, self._inner).load_action(action_id)

    def execute(self, effect: WorkflowEffect | AnyActionEffect) -> None:
        self.executed += 1
        if self._fail_at is not None and self.executed == self._fail_at:
            raise InjectedIOError(f"injected I/O error at effect {self.executed}")
        if isinstance(effect, ACTION_EFFECT_TYPES):
            cast(ActionStorageTransaction, self._inner).execute(effect)
        else:
            self._workflow().execute(effect)

    def _workflow(self) -> WorkflowStorageTransaction:
        # Workflow commands reach only stores that load Workflows (the `workflow` capability).
        return cast(WorkflowStorageTransaction, self._inner)


class FaultyStorage:
    """A store with one fault armed for its next transaction."""

    def __init__(self, inner: Storage, fault: Fault | None) -> None:
        self._inner = inner
        self._fault = fault

    @contextmanager
    def transaction(self) -> Iterator[_FaultyTransaction]:
        fault = self._fault
        fail_at = (
            fault.at_effect if fault is not None and fault.kind is FaultKind.IO_ERROR else None
        )
        with self._inner.transaction() as tx:
            wrapped = _FaultyTransaction(tx, fail_at)
            yield wrapped
            if fault is not None and fault.kind is FaultKind.CRASH_BEFORE_COMMIT:
                raise InjectedCrash("injected crash before commit")
