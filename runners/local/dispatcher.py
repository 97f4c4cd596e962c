"""The local claimed dispatcher (SPEC §1.8.3, ADR-0021 §5.5; RETRY-21): one call activates at
most one Attempt (L1), launches it through the launcher, and records its handle (L2).

The kernel's `dispatch_begin`/`dispatch_advance` decide which page to read, which candidate to
activate next and when the call ends; this module only performs the port calls they name. The
pinned ExecutionSpec (the Run's task revision) is read and frozen before the activation, so a Run
whose spec cannot be read is never activated. The spawn happens outside any transaction, after
L1 committed (the start barrier): a crash between the two leaves a `starting` Attempt that
startup recovery resolves from the launcher registration and the receipt, never by spawning
again.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

from kernel import (
    ActivateCandidate,
    ActivateLocal,
    ActivationAnswered,
    CandidateSkipped,
    DispatchDone,
    DispatchEnd,
    PageRead,
    RecordLocalHandle,
    Secret,
    dispatch_advance,
    dispatch_begin,
    token_digest,
)
from kernel.specs import Paging
from kernel.task import LOCAL_EXECUTOR_TYPE, TaskExecution
from runners.edge.store import EdgeStore
from runners.edge.tasks import EdgeTaskStore
from runners.engine import execute
from runners.local.launcher import LaunchAmbiguous, Launched, LaunchRefused, LocalLauncher
from runners.local.reads import run_task

__all__ = ["DispatchReport", "dispatch_once"]

#: The first callback sequence of a pristine `claimed` Attempt (L1: greater than its 0).
FIRST_CALLBACK_SEQUENCE = 1


@dataclass(frozen=True, slots=True)
class DispatchReport:
    """One dispatcher call: why it ended, how many candidates it tried, and what the launch of
    the activated one said (`launched`, `refused:<code>`, `ambiguous:<code>`)."""

    end: DispatchEnd
    tried: int
    run_id: str | None = None
    attempt_id: str | None = None
    launch: str | None = None


def _execution(store: EdgeStore, tasks: EdgeTaskStore, run_id: str) -> TaskExecution | None:
    found = run_task(store, run_id)
    return None if found is None else tasks.execution(*found)


def dispatch_once(
    store: EdgeStore,
    tasks: EdgeTaskStore,
    launcher: LocalLauncher,
    paging: Paging,
    clock: Callable[[], int],
) -> DispatchReport:
    """One dispatcher call with one observation time for its page reads and activation (P-5)."""
    observed_at_ms = clock()
    scan, action = dispatch_begin(paging)
    prepared: dict[str, tuple[TaskExecution, Secret]] = {}
    while not isinstance(action, DispatchDone):
        if isinstance(action, ActivateCandidate):
            candidate = action.candidate
            assert candidate.attempt_id is not None
            execution = _execution(store, tasks, candidate.run_id)
            if execution is None:
                scan, action = dispatch_advance(scan, CandidateSkipped(candidate))
                continue
            token = Secret.of(secrets.token_urlsafe(32), "callback_token")
            prepared[candidate.attempt_id] = (execution, token)
            command = ActivateLocal(
                run_id=candidate.run_id,
                attempt_id=candidate.attempt_id,
                local_executor_type=LOCAL_EXECUTOR_TYPE,
                callback_sequence=FIRST_CALLBACK_SEQUENCE,
                callback_token_sha256=token_digest(token.reveal()),
            )
            outcome = execute(store, command, observed_at_ms)
            scan, action = dispatch_advance(scan, ActivationAnswered(candidate, outcome))
        else:
            page = store.local_dispatch_candidates(LOCAL_EXECUTOR_TYPE, action.limit, action.after)
            scan, action = dispatch_advance(scan, PageRead(page))
    activated = action.activated
    if activated is None:
        return DispatchReport(action.end, action.tried)
    assert activated.attempt_id is not None
    execution, token = prepared[activated.attempt_id]
    launch = _launch(
        store,
        launcher,
        run_id=activated.run_id,
        attempt_id=activated.attempt_id,
        execution=execution,
        token=token,
        clock=clock,
    )
    return DispatchReport(action.end, action.tried, activated.run_id, activated.attempt_id, launch)


def _launch(
    store: EdgeStore,
    launcher: LocalLauncher,
    *,
    run_id: str,
    attempt_id: str,
    execution: TaskExecution,
    token: Secret,
    clock: Callable[[], int],
) -> str:
    started_at_ms = clock()
    launched = launcher.launch(
        run_id,
        attempt_id,
        execution,
        callback_sequence=FIRST_CALLBACK_SEQUENCE,
        token=token,
        started_at_ms=started_at_ms,
    )
    if isinstance(launched, Launched):
        # L2: the handle fact; a failure here leaves the Attempt `starting` with a registration,
        # which execution control completes from the receipt, or startup recovery resolves.
        execute(
            store, RecordLocalHandle(run_id, attempt_id, launched.handle, started_at_ms), clock()
        )
        return "launched"
    if isinstance(launched, LaunchRefused):
        return f"refused:{launched.code}"
    assert isinstance(launched, LaunchAmbiguous)
    return f"ambiguous:{launched.code}"
