"""Breadth-first exploration of the Run machine from nothing, through kernel transitions only.

`enumerate_commands` lists a fixed, finite menu of commands for a state (valid ones and the
usual stale, replayed and foreign variants); `explore` applies every menu item at a few fixed
clock steps and visits each distinct resulting aggregate once, up to a depth. The result is every
(state, command, outcome) edge seen, which the table tests and the exhaustive small-scope check
use (`tests/test_state_tables.py`). Nothing here decides anything: the kernel does.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from kernel import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    ActivateLocal,
    AdmitRun,
    Applied,
    CancelReason,
    Command,
    CompletedEvidence,
    CompleteLocal,
    CompleteWithLease,
    CompletionOutcome,
    ConvergeCancel,
    CreateRun,
    Evidence,
    ExpireWithLease,
    FailOrphanedCreated,
    FailStart,
    Fence,
    GrantLease,
    LiveEvidence,
    LocalReceipt,
    LostRetryStep,
    NotRunningEvidence,
    Outcome,
    PolicyDefinition,
    Profile,
    RecordLocalHandle,
    RecordLocalStop,
    RecoverLocalStartup,
    RecoverRuntime,
    RenewLease,
    RequestCancel,
    RunAggregate,
    RunStatus,
    Safety,
    StopResult,
    UnknownEvidence,
    UnknownReason,
    WorkerSessionStatus,
    apply,
    token_digest,
)
from tests.support.sim import (
    EXECUTOR,
    LOCAL_EXECUTOR,
    RUN_ID,
    START_MS,
    callback_token,
    lease_token,
    worker_session,
)

WORKER = worker_session("w1")
OFFLINE = worker_session("w1", WorkerSessionStatus.OFFLINE)
# Clock steps: within a lease, and past its 30 s duration.
STEPS = (1, 31_000)


def enumerate_commands(agg: RunAggregate | None) -> Iterator[Command]:
    """The finite command menu for one state: every command type in every state (from nothing
    too, where all but the two admissions must be refused), so that every (status, command) pair
    of the tables is tried wherever the status is reached."""
    yield AdmitRun(
        run_id=RUN_ID,
        attempt_id="a1",
        project_id="proj",
        task_id="task",
        task_revision=1,
        executor_type=EXECUTOR,
        provider_policy=PolicyDefinition(2, True, Safety.IDEMPOTENT, 0, 0),
    )
    if agg is None:
        yield AdmitRun(
            run_id=RUN_ID,
            attempt_id="a1",
            project_id="proj",
            task_id="task",
            task_revision=1,
            executor_type=LOCAL_EXECUTOR,
        )
    yield CreateRun(
        run_id=RUN_ID,
        project_id="proj",
        task_id="task",
        task_revision=1,
        executor_type=EXECUTOR,
    )
    latest = agg.latest_attempt if agg is not None else None
    attempt_id = latest.attempt_id if latest is not None else "a1"
    # Start facts: the handle fact is never earlier than the Attempt's creation.
    started = latest.started_at_ms or latest.created_at_ms if latest is not None else START_MS
    leases = agg.leases if agg is not None else ()
    generation = 1 + max(
        (x.lease_generation for x in leases if x.attempt_id == attempt_id), default=0
    )
    yield GrantLease(RUN_ID, attempt_id, WORKER, lease_token(attempt_id, generation), 30_000)
    # With no lease yet, a made-up generation-1 fence still offers every fenced command.
    fences = [
        (
            lease.attempt_id,
            lease.version,
            Fence(
                lease.worker_id,
                lease.worker_session_id,
                lease.worker_generation,
                lease.lease_generation,
                lease_token(lease.attempt_id, lease.lease_generation),
                lease.version,
            ),
        )
        for lease in leases
    ] or [(attempt_id, 1, Fence("w1", "w1-s1", 1, 1, lease_token(attempt_id, 1), 1))]
    for aid, version, fence in fences:
        yield AcknowledgeStarting(RUN_ID, aid, fence, WORKER)
        yield RenewLease(RUN_ID, aid, fence, WORKER, 30_000)
        yield AcknowledgeRunning(RUN_ID, aid, fence, WORKER, "pid:1", started)
        yield FailStart(RUN_ID, aid, fence, WORKER)
        for outcome in CompletionOutcome:
            yield CompleteWithLease(RUN_ID, aid, fence, WORKER, 1, outcome, 0)
        # the exact replay of a completion that committed under the previous version
        if version > 1:
            replay = Fence(
                fence.worker_id,
                fence.worker_session_id,
                fence.worker_generation,
                fence.lease_generation,
                fence.lease_token,
                version - 1,
            )
            yield CompleteWithLease(RUN_ID, aid, replay, OFFLINE, 1, CompletionOutcome.SUCCEEDED, 0)
        for profile in (Profile.EDGE, Profile.CLUSTER):
            yield ExpireWithLease(RUN_ID, aid, fence.lease_generation, profile)
    for reason in (CancelReason.USER, CancelReason.TIMEOUT):
        yield RequestCancel(RUN_ID, reason)
    yield ConvergeCancel(RUN_ID)
    yield LostRetryStep(RUN_ID, f"a{len(agg.attempts) + 1 if agg is not None else 2}")
    digest = token_digest(callback_token(attempt_id))
    yield ActivateLocal(RUN_ID, attempt_id, LOCAL_EXECUTOR, 1, digest)
    yield RecordLocalHandle(RUN_ID, attempt_id, "pid:7", started)
    for outcome in CompletionOutcome:
        yield CompleteLocal(
            RUN_ID,
            attempt_id,
            LocalReceipt(
                RUN_ID,
                attempt_id,
                latest.callback_sequence if latest is not None else 0,
                digest,
                outcome,
                started,
                0,
            ),
        )
    yield RecordLocalStop(RUN_ID, attempt_id, StopResult.ALREADY_EXITED)
    evidences: tuple[Evidence, ...] = (
        NotRunningEvidence(),
        LiveEvidence(),
        UnknownEvidence(UnknownReason.PROBE_FAILED),
        *(
            CompletedEvidence(outcome, latest.callback_sequence if latest else 0, 0)
            for outcome in CompletionOutcome
        ),
        *(CompletedEvidence(outcome, 1, 0) for outcome in CompletionOutcome),
    )
    for evidence in evidences:
        yield RecoverLocalStartup(RUN_ID, attempt_id, evidence)
        yield RecoverRuntime(RUN_ID, attempt_id, evidence)
    yield RecoverRuntime(RUN_ID, attempt_id, None)
    yield FailOrphanedCreated(RUN_ID, START_MS + 10**8)


#: One tried step: the state before (None: nothing yet), the command, the time, the outcome.
Step = tuple[RunAggregate | None, Command, int, Outcome]


@dataclass
class Exploration:
    states: int = 0
    edges: list[Step] = field(default_factory=list)
    depth_reached: int = 0


def explore(max_depth: int, max_states: int = 200_000) -> Exploration:
    """Visit every aggregate reachable within `max_depth` applied transitions."""
    result = Exploration()
    seen: set[tuple[RunAggregate | None, int]] = {(None, START_MS)}
    queue: deque[tuple[RunAggregate | None, int, int]] = deque([(None, START_MS, 0)])
    while queue:
        agg, now, depth = queue.popleft()
        result.states += 1
        result.depth_reached = max(result.depth_reached, depth)
        for command in enumerate_commands(agg):
            for step in STEPS:
                at = now + step
                outcome = apply(agg, command, at)
                result.edges.append((agg, command, at, outcome))
                if not isinstance(outcome, Applied) or depth + 1 > max_depth:
                    continue
                # Time matters only relative to the lease expiries, so states are keyed on the
                # aggregate and the observation time after the step.
                key = (outcome.aggregate, at)
                if key in seen or len(seen) >= max_states:
                    continue
                seen.add(key)
                queue.append((outcome.aggregate, at, depth + 1))
    return result


def stored_data_steps(exploration: Exploration) -> list[Step]:
    """Steps that only stored data reaches, from states the exploration found. A policy is
    immutable after admission, so a `retry_wait` Run always passed R1..R3 when it was
    scheduled; R1..R3 still apply to it (SPEC §1.8.1 clears the cursor "on R1..R3"), e.g. for a
    row written by an older version: here, R1 on a stored policy with retry disabled."""
    waiting = next(
        outcome.aggregate
        for _before, _command, _at, outcome in exploration.edges
        if isinstance(outcome, Applied) and outcome.aggregate.run.status is RunStatus.RETRY_WAIT
    )
    assert waiting.policy is not None
    disabled = dataclasses.replace(waiting.policy, retry_on_lost=False)
    stored = dataclasses.replace(waiting, policy=disabled)
    command = LostRetryStep(RUN_ID, f"a{len(stored.attempts) + 1}")
    at = stored.run.updated_at_ms + 1
    return [(stored, command, at, apply(stored, command, at))]
