"""The Worker's control-plane read (SPEC E-3) wired into startup recovery and the completion
poll (§3.11-§3.13, D-8; INBOX-33, INBOX-35), on real parts: both journal adapters, the POSIX
executor with its wrapper and receipt files, and the edge runner on a SQLite file as the
control plane.

The window: the control plane accepted a Worker's completion, then the Worker died before it
wrote `completion_acknowledged`. A Worker restarted as a new session, or after the Run lease
expired, holds a record whose authority is no longer `current`; only the control plane's read
lets it converge, by the byte-identical replay (`already_terminal`). Different terminal facts,
or no read at all, leave the record blocked with its receipt.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel.commands import ExpireWithLease
from kernel.outcomes import Applied
from kernel.specs.codes import Code
from kernel.specs.journal import DeliveryKind, JournalState
from kernel.specs.states import CompletionOutcome, Profile
from kernel.worker.coordinator import CompletionSubmission
from kernel.worker.record import JournalRecord, Offer
from runners.engine import execute
from runners.worker.coordinator import CoordinatorOutcome
from runners.worker.journal.file import FileJournal
from runners.worker.journal.sqlite import SqliteJournal
from runners.worker.ports import ControlPlaneUnavailable, LeaseAck
from runners.worker.posix.adapters import PosixExecutorPort, SpawnJournal
from runners.worker.posix.executor import PosixExecutor
from runners.worker.posix.receipts import CompletionReceiptStore
from runners.worker.runtime import WorkerRuntime
from tests.support.posix_processes import wait_until
from tests.support.worker_fixtures import (
    DURATION_MS,
    WORKER_ID,
    ControlPlane,
    ManualClock,
    run_id,
    session,
)

NEW_SESSION = "w1-s2"


class Died(BaseException):
    """The Worker process dies here (passes every `except Exception`, as a SIGKILL would)."""


class World:
    def __init__(self, root: Path, adapter: str) -> None:
        self.root = root
        self.adapter = adapter
        self.clock = ManualClock()
        self.control = ControlPlane(root / "control.sqlite3", self.clock)
        self.receipts = CompletionReceiptStore(root / "receipts")
        self.receipts.ensure_directory()
        self.spawns = SpawnJournal(root / "spawns")
        self.executors: list[PosixExecutor] = []
        self.sent: list[tuple[CompletionSubmission, Code]] = []

    def runtime(self) -> WorkerRuntime:
        journal_root = self.root / "journal"
        journal = (
            FileJournal(journal_root) if self.adapter == "file" else SqliteJournal(journal_root)
        )
        executor = PosixExecutor(self.receipts)
        self.executors.append(executor)
        return WorkerRuntime(
            journal,
            self.control.client,
            PosixExecutorPort(executor, self.spawns),
            self.receipts,
            session=lambda: self.control.sessions[WORKER_ID],
            clock=self.clock,
            grace_ms=0,
        )

    def record(self, runtime: WorkerRuntime, offer: Offer) -> JournalRecord:
        found = runtime.journal.read(offer.offer_id)
        assert found is not None
        return found

    def log_completions(self) -> None:
        """Record every completion the Worker submits and the control plane's answer."""
        real = self.control.client.inner.complete

        def complete(submission: CompletionSubmission) -> LeaseAck:
            answer = real(submission)
            self.sent.append((submission, answer.code))
            return answer

        self.control.client.overrides["complete"] = complete

    def close(self) -> None:
        for executor in self.executors:
            executor.reap()
        self.control.close()


@pytest.fixture(params=["file", "sqlite"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, request.param)
    yield w
    w.close()


def _finished(world: World) -> tuple[WorkerRuntime, Offer]:
    """A started runtime whose delivered child has exited and published its receipt; the
    record holds the control plane's current lease version (a recovery delivery merged it)."""
    runtime = world.runtime()
    runtime.start()
    offer = world.control.admit_and_grant(run_id(), [sys.executable, "-c", "pass"])
    delivered = runtime.deliver(offer)
    assert delivered.state is JournalState.RUNNING_ACKNOWLEDGED
    attempt_id = offer.lease.attempt_id
    assert wait_until(lambda: world.receipts.read(attempt_id) is not None)
    runtime.deliver(world.control.offer(attempt_id, DeliveryKind.LEASE_RECOVERY))
    row = world.control.aggregate(attempt_id).lease(attempt_id, offer.lease.lease_generation)
    assert row is not None
    assert world.record(runtime, offer).offer.lease.version == row.version
    return runtime, offer


def _accepted_then_died(world: World) -> tuple[Offer, JournalRecord]:
    """The control plane commits the Worker's completion; the Worker dies before its journal
    write. Returns the record as the dead Worker left it (its receipt is still there)."""
    runtime, offer = _finished(world)
    real = world.control.client.inner.complete

    def commit_then_die(submission: CompletionSubmission) -> LeaseAck:
        answer = real(submission)
        assert answer.code is Code.COMPLETED
        raise Died

    world.control.client.overrides["complete"] = commit_then_die
    with pytest.raises(Died):
        runtime.poll_completions()
    del world.control.client.overrides["complete"]
    left = world.record(runtime, offer)
    assert left.state is JournalState.RUNNING_ACKNOWLEDGED
    runtime.stop()  # the dead process's lock, reclaimed (E-2)
    attempt_id = offer.lease.attempt_id
    assert world.control.attempt_status(attempt_id) == "succeeded"
    assert world.receipts.read(attempt_id) is not None
    return offer, left


def _converged(world: World, runtime: WorkerRuntime, offer: Offer, left: JournalRecord) -> None:
    """`completion_acknowledged` through the byte-identical replay; the receipt is gone."""
    final = world.record(runtime, offer)
    assert final.state is JournalState.COMPLETION_ACKNOWLEDGED
    assert world.receipts.read(offer.lease.attempt_id) is None
    assert [code for _, code in world.sent] == [Code.ALREADY_TERMINAL]
    sent = world.sent[0][0]
    lease = left.offer.lease
    assert (sent.worker_session_id, sent.worker_generation) == (
        lease.worker_session_id,
        lease.worker_generation,
    )  # the journal's own fences, never the new session's
    assert sent.expected_version == lease.version
    assert sent.lease_token == lease.lease_token
    assert (sent.callback_sequence, sent.exit_code) == (left.callback_sequence, 0)
    assert world.control.attempt_status(offer.lease.attempt_id) == "succeeded"
    assert world.spawns.entries() == [(offer.offer_id, offer.lease.attempt_id)]  # one spawn


@pytest.mark.spec("INBOX-35")
def test_a_new_session_converges_an_accepted_completion_by_exact_replay(world: World) -> None:
    """E-3/INBOX-35 (a): restarted as a NEW Worker session (authority `session_fenced`) after
    the control plane accepted the completion: startup recovery reads the control plane, sees
    the lease completed by exactly the record's fences at version + 1 with the receipt's facts,
    replays byte-identically (`already_terminal`), writes `completion_acknowledged` and
    deletes the receipt."""
    offer, left = _accepted_then_died(world)
    world.control.sessions[WORKER_ID] = session(session_id=NEW_SESSION, generation=2)
    restarted = world.runtime()
    world.control.client.calls.clear()
    world.log_completions()
    status = restarted.start()
    assert status.code is Code.READY
    assert world.control.client.calls == ["read_authority", "complete"]
    _converged(world, restarted, offer, left)
    restarted.stop()


@pytest.mark.spec("INBOX-35")
def test_after_lease_expiry_the_same_session_converges_on_restart(world: World) -> None:
    """E-3/INBOX-35 (b): same session, restarted after the record's Run lease expired
    (authority `run_lease_expired`): the same convergence."""
    offer, left = _accepted_then_died(world)
    world.clock.advance(DURATION_MS + 1_000)
    assert left.offer.lease.expires_at_ms < world.clock()
    restarted = world.runtime()
    world.log_completions()
    status = restarted.start()
    assert status.code is Code.READY
    _converged(world, restarted, offer, left)
    restarted.stop()


@pytest.mark.spec("INBOX-35")
def test_the_completion_poll_converges_after_a_lost_response_and_lease_expiry(
    world: World,
) -> None:
    """E-3/INBOX-35 (b, completion poll): the control plane committed, the response was lost;
    by the next poll the lease has expired on the Worker's clock. The poll reads the control
    plane and converges by exact replay, without a restart."""
    runtime, offer = _finished(world)
    left = world.record(runtime, offer)
    real = world.control.client.inner.complete

    def lost_response(submission: CompletionSubmission) -> LeaseAck:
        real(submission)
        raise ControlPlaneUnavailable("lost")

    world.control.client.overrides["complete"] = lost_response
    first = runtime.poll_completions()
    assert [(r.outcome, r.code) for r in first.results] == [
        (CoordinatorOutcome.SUBMISSION_REJECTED, Code.CONTROL_PLANE_UNAVAILABLE)
    ]
    world.clock.advance(DURATION_MS + 1_000)
    world.log_completions()
    second = runtime.poll_completions()
    assert [r.outcome for r in second.results] == [CoordinatorOutcome.COMPLETED]
    _converged(world, runtime, offer, left)
    runtime.stop()


@pytest.mark.spec("INBOX-33")
def test_a_lost_attempt_stays_blocked_with_its_receipt(world: World) -> None:
    """D-8 (c): the control plane ended the Attempt `lost` (its lease expired there) while the
    Worker's child finished. A new session's recovery reads it, is blocked with
    `control_plane_terminal`, submits nothing, and keeps the record and the receipt."""
    runtime, offer = _finished(world)
    before = world.record(runtime, offer)
    runtime.stop()
    attempt_id = offer.lease.attempt_id
    world.clock.advance(DURATION_MS + 1_000)
    expire = ExpireWithLease(offer.lease.run_id, attempt_id, 1, Profile.EDGE)
    assert isinstance(execute(world.control.store, expire, world.clock()), Applied)
    assert world.control.attempt_status(attempt_id) == "lost"
    _blocked_for_good(world, offer, before)


@pytest.mark.spec("INBOX-33", "INBOX-35")
@pytest.mark.parametrize("altered", ["outcome_and_exit_code", "callback_sequence"])
def test_other_completion_facts_stay_blocked_with_the_receipt(world: World, altered: str) -> None:
    """D-8 (c): the control plane completed the lease under exactly the record's fences at
    version + 1, but with other facts than the receipt's (another outcome and exit code, or
    another callback sequence): no replay is submitted; blocked with `control_plane_terminal`,
    record and receipt kept."""
    runtime, offer = _finished(world)
    record = world.record(runtime, offer)
    runtime.stop()
    lease = record.offer.lease
    assert record.callback_sequence is not None
    other = CompletionSubmission(
        run_id=lease.run_id,
        attempt_id=lease.attempt_id,
        worker_id=lease.worker_id,
        worker_session_id=lease.worker_session_id,
        worker_generation=lease.worker_generation,
        lease_generation=lease.lease_generation,
        lease_token=lease.lease_token,
        expected_version=lease.version,
        callback_sequence=record.callback_sequence + (altered == "callback_sequence"),
        outcome=(
            CompletionOutcome.FAILED
            if altered == "outcome_and_exit_code"
            else CompletionOutcome.SUCCEEDED
        ),
        exit_code=3 if altered == "outcome_and_exit_code" else 0,
    )
    assert world.control.engine.complete(other).code is Code.COMPLETED
    status = world.control.attempt_status(lease.attempt_id)
    _blocked_for_good(world, offer, record)
    assert world.control.attempt_status(lease.attempt_id) == status  # nothing changed there


def _blocked_for_good(world: World, offer: Offer, before: JournalRecord) -> None:
    """A new session's startup and a later poll both block with `control_plane_terminal`."""
    world.control.sessions[WORKER_ID] = session(session_id=NEW_SESSION, generation=2)
    restarted = world.runtime()
    world.control.client.calls.clear()
    world.log_completions()
    status = restarted.start()
    assert status.code is Code.RECONCILIATION_REQUIRED
    poll = restarted.poll_completions()
    assert [(r.outcome, r.code) for r in poll.results] == [
        (CoordinatorOutcome.BLOCKED, Code.CONTROL_PLANE_TERMINAL)
    ]
    assert "complete" not in world.control.client.calls
    assert world.control.client.calls.count("read_authority") == 2  # one read per pass
    assert world.sent == []
    after = world.record(restarted, offer)
    assert (after.state, after.revision) == (before.state, before.revision)
    assert world.receipts.read(offer.lease.attempt_id) is not None  # the evidence stays
    restarted.stop()


@pytest.mark.spec("INBOX-33")
def test_a_failed_read_is_no_view_and_nothing_is_submitted(world: World) -> None:
    """(d): the read fails (`ControlPlaneUnavailable`): no view, today's fail-closed answer
    (`blocked(session_fenced)` for a new session), nothing submitted, receipt kept; once the
    read answers again, the next poll converges."""
    offer, left = _accepted_then_died(world)
    world.control.sessions[WORKER_ID] = session(session_id=NEW_SESSION, generation=2)

    def unreachable(*args: object) -> None:
        raise ControlPlaneUnavailable

    world.control.client.reads["read_authority"] = unreachable
    restarted = world.runtime()
    world.control.client.calls.clear()
    world.log_completions()
    status = restarted.start()
    assert status.code is Code.RECONCILIATION_REQUIRED
    poll = restarted.poll_completions()
    assert [(r.outcome, r.code) for r in poll.results] == [
        (CoordinatorOutcome.BLOCKED, Code.SESSION_FENCED)
    ]
    assert world.control.client.calls == ["read_authority", "read_authority"]
    assert world.sent == []
    assert world.record(restarted, offer).revision == left.revision
    assert world.receipts.read(offer.lease.attempt_id) is not None
    del world.control.client.reads["read_authority"]
    again = restarted.poll_completions()
    assert [r.outcome for r in again.results] == [CoordinatorOutcome.COMPLETED]
    _converged(world, restarted, offer, left)
    restarted.stop()
