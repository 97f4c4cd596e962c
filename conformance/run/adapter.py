"""The conformance adapter port (SPEC §7) and the reference adapter over the oracle.

A runner joins the suite through `ConformanceAdapter`: apply a command at an observation time,
optionally with a fault; answer a page step (a source query or a lost-retry page,
`conformance.run.pages`); `project()` the canonical state through a backdoor reader; `reopen()`;
and declare `capabilities`. `run_step` gives every fault the same meaning for every store that
implements the storage port, so only the store differs between adapters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, cast

from conformance.run.faults import Fault, FaultKind, FaultyStorage, InjectedCrash, InjectedIOError
from conformance.run.pages import PageRequest, run_page
from conformance.run.projection import Projection
from conformance.run.reference import ReferenceStore
from conformance.run.trace import AnyCommand
from kernel import Command, Outcome
from kernel.approved_action import ActionOutcome, is_action_command
from kernel.workflow import WorkflowOutcome, is_workflow_command
from runners.engine import (
    ActionStorage,
    Storage,
    WorkflowStorage,
    execute,
    execute_action,
    execute_workflow,
)
from runners.sources import Sources

#: The capability an adapter declares when its store persists the approval domain (SPEC §5,
#: issue 19: the `approved_actions` and `action_events` rows, `runners.engine.execute_action`)
#: and answers its two due indexes; a trace with an approval step or query needs it. The cluster
#: profile refuses Approved Actions (§5.4), so the cluster adapter never declares it.
APPROVED_ACTION = "approved_action"

#: The capability an adapter declares when its store persists Workflows (SPEC §4.1: the
#: admission, StepRun and ledger rows beside the Run, `runners.engine.execute_workflow`) and
#: answers the Workflow sources; a trace with a Workflow step or query needs it.
WORKFLOW = "workflow"


@dataclass(frozen=True, slots=True)
class StepResult:
    """What the caller saw: an outcome kind and code, or `crashed` / `error` / `reopened`; for
    a page step, kind `page` (or `error` for a page stopped closed) and the page itself."""

    kind: str
    code: str | None
    page: dict[str, Any] | None = None


class ConformanceAdapter(Protocol):
    name: str
    capabilities: frozenset[str]

    def apply(
        self, command: AnyCommand | None, observed_at_ms: int, fault: Fault | None
    ) -> StepResult: ...

    def page(
        self, request: PageRequest, observed_at_ms: int, fault: Fault | None
    ) -> StepResult: ...

    def project(self) -> Projection: ...

    def reopen(self) -> None: ...

    def close(self) -> None: ...


#: The capability an adapter declares when it offers the kill-mode port (`KillPort`): kill mode
#: (`conformance.run.kill_port`) re-creates it in a child process on the same database and
#: SIGKILLs that child at every boundary of its storage port (RUN-06, RETRY-10).
KILL = "kill"


class KillPort(Protocol):
    """The optional kill-mode port of a third-party adapter (capability `kill`; issue 16 item 4).

    `store` is the adapter's storage port (`runners.engine.Storage`, as for `guards`), and
    `locator()` a picklable value that names the database this adapter opened: the runner's
    factory, called with it (`factory(locator)`), must return an adapter on the **same**
    database that does not own it (its `close()` deletes nothing). That is all kill mode needs to
    run a write in a child process, kill the child, and re-open the database in the parent."""

    store: Storage

    def locator(self) -> object: ...


def run_step(
    storage: Storage, command: AnyCommand | None, observed_at_ms: int, fault: Fault | None
) -> StepResult:
    """Apply one trace step to a store through the engine, with its fault: a Run command
    through `execute`, a Workflow command through `execute_workflow` (the store then must be a
    `WorkflowStorage`: the trace needs the `workflow` capability), an approval-domain command
    through `execute_action` (the `approved_action` capability)."""
    if fault is not None and fault.kind is FaultKind.REOPEN:
        return StepResult("reopened", None)
    assert command is not None
    target = FaultyStorage(storage, fault)
    try:
        outcome = execute_command(target, command, observed_at_ms)
        if fault is not None and fault.kind is FaultKind.DUPLICATE_DELIVERY:
            outcome = execute_command(storage, command, observed_at_ms)
    except InjectedCrash:
        return StepResult("crashed", None)
    except InjectedIOError:
        return StepResult("error", None)
    return StepResult(outcome.kind.value, outcome.code.value)


def execute_command(
    storage: Storage, command: AnyCommand, observed_at_ms: int
) -> Outcome | WorkflowOutcome | ActionOutcome:
    """The engine entry point of `command`'s domain (decision WF-1: its own commands): a Run
    command through `execute`, a Workflow command through `execute_workflow` (the store must
    then be a `WorkflowStorage`), an approval-domain command through `execute_action` (an
    `ActionStorage`). The kill, guard and lock modes run every write through it."""
    if is_action_command(command):
        return execute_action(cast(ActionStorage, storage), command, observed_at_ms)
    if is_workflow_command(command):
        return execute_workflow(cast(WorkflowStorage, storage), command, observed_at_ms)
    return execute(storage, cast(Command, command), observed_at_ms)


class AdaptedStore(Storage, Sources, Protocol):
    """What `StoreAdapter` needs of a store: the engine's storage port, the candidate sources
    and its own backdoor projection (the edge, cluster and reference stores all are one)."""

    def project(self) -> Projection: ...


class StoreAdapter:
    """The one shape of every adapter over a store: commands and faults through `run_step`,
    page steps through `run_page`, `project()` through the store's backdoor reader. A subclass
    names itself, declares its capabilities, builds `store`, and says what `reopen()` and
    `close()` mean for it (a file reopened, a schema dropped, nothing for the oracle)."""

    name: str
    capabilities: frozenset[str]
    store: AdaptedStore

    def apply(
        self, command: AnyCommand | None, observed_at_ms: int, fault: Fault | None
    ) -> StepResult:
        return run_step(self.store, command, observed_at_ms, fault)

    def page(self, request: PageRequest, observed_at_ms: int, fault: Fault | None) -> StepResult:
        result = run_page(self.store, self.store, request, observed_at_ms, fault)
        return StepResult(result.kind, result.code, result.page)

    def project(self) -> Projection:
        return self.store.project()

    def reopen(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class ReferenceAdapter(StoreAdapter):
    """The oracle behind the adapter port. `reopen` keeps the committed state, as a database
    file survives a process restart."""

    name = "reference"
    capabilities = frozenset(
        {
            "run",
            "faults",
            "sources",
            "cluster_recovery",
            "local_recovery",
            "lost_retry_local",
            "lost_retry_cluster",
            "guards",
            WORKFLOW,
            APPROVED_ACTION,
        }
    )

    def __init__(self) -> None:
        self.store: ReferenceStore = ReferenceStore()

    def reopen(self) -> None:
        return None

    def close(self) -> None:
        return None
