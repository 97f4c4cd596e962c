"""The receiver pipeline on a real journal adapter with the edge runner as the control plane
(SPEC §3.5, §3.7, §3.8; INBOX-05..INBOX-14).

Each test runs on both journal adapters (a real directory, a real SQLite file) and a real
SQLite control plane; only the executor is scripted here (it counts `start` calls). The
POSIX executor, its receipts and the kill matrix are in `test_worker_posix.py`.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from kernel.specs.codes import Code
from kernel.specs.journal import DeliveryKind, JournalState, RecoveryReason
from kernel.specs.states import Profile, WorkerSessionStatus
from kernel.worker.receiver import ACK_VERSION_TRIES
from kernel.worker.record import OfferLease
from runners.passes import lease_expiry_page
from runners.worker.journal.port import JournalStore
from runners.worker.lease_lifecycle import LeaseLossReason
from runners.worker.ports import ControlPlaneUnavailable, LeaseAck
from runners.worker.receiver import ResultKind
from tests.support.worker_fixtures import (
    ControlPlane,
    ScriptedExecutor,
    Worker,
    file_journal,
    run_id,
    session,
    unavailable,
)


def _files(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if not p.name.startswith("."))


@pytest.mark.spec("INBOX-01", "INBOX-03")
def test_first_delivery_runs_the_whole_pipeline_in_order(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-01/03: one delivery goes accepted -> starting_acknowledged -> launching ->
    started -> running_acknowledged; the callback pair is durable in `launching` before
    `Executor.start()` is called, and the control plane holds the Attempt `running`."""
    offer = control.admit_and_grant(run_id())
    seen: list[tuple[JournalState, int | None]] = []

    def at_start(context: object) -> None:
        record = journal.read(offer.offer_id)
        assert record is not None
        seen.append((record.state, record.callback_sequence))

    executor = ScriptedExecutor(hook=at_start)
    worker = Worker(journal, control, executor)
    result = worker.receiver.deliver(offer)
    assert result.kind is ResultKind.APPLIED
    assert result.state is JournalState.RUNNING_ACKNOWLEDGED
    assert executor.calls == [offer.offer_id]
    assert seen == [(JournalState.LAUNCHING, 1)]  # the barrier was durable before start()
    record = journal.read(offer.offer_id)
    assert record is not None
    assert record.revision == 4  # exactly one write per step
    assert record.callback_token_sha256 is not None
    token = executor.contexts[0].callback_token.reveal()
    assert token not in repr(record)
    assert control.attempt_status(offer.lease.attempt_id) == "running"
    assert worker.lifecycle.tracked() == (offer.offer_id,)


@pytest.mark.spec("INBOX-07")
def test_redelivery_of_a_running_offer_is_idempotent(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-07: `running_acknowledged` answers a redelivery with an idempotent success and
    no second start."""
    offer = control.admit_and_grant(run_id())
    executor = ScriptedExecutor()
    worker = Worker(journal, control, executor)
    worker.receiver.deliver(offer)
    again = worker.receiver.deliver(offer)
    assert again.kind is ResultKind.REPLAYED
    assert again.state is JournalState.RUNNING_ACKNOWLEDGED
    assert len(executor.calls) == 1


@pytest.mark.spec("INBOX-05")
def test_restart_that_finds_launching_never_calls_the_executor(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-05: a crash right after the `launching` write (before `start()` returned); a
    new Worker that receives the redelivery writes `recovery_required(launch_outcome_unknown)`
    and calls no Executor."""
    offer = control.admit_and_grant(run_id())

    class Crash(BaseException):
        pass

    def crash(context: object) -> None:
        raise Crash

    first = ScriptedExecutor(hook=crash)
    with pytest.raises(Crash):
        Worker(journal, control, first).receiver.deliver(offer)
    record = journal.read(offer.offer_id)
    assert record is not None
    assert record.state is JournalState.LAUNCHING
    second = ScriptedExecutor()
    result = Worker(journal, control, second).receiver.deliver(offer)
    assert result.state is JournalState.RECOVERY_REQUIRED
    assert result.recovery_reason is RecoveryReason.LAUNCH_OUTCOME_UNKNOWN
    assert second.calls == []


@pytest.mark.spec("INBOX-06")
def test_restart_that_finds_started_replays_only_the_running_ack(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-06: the control plane was unreachable after `started`; the redelivery replays
    only `acknowledge_running` and reaches `running_acknowledged` without a second start."""
    offer = control.admit_and_grant(run_id())
    executor = ScriptedExecutor()
    worker = Worker(journal, control, executor)
    control.client.overrides["acknowledge_running"] = unavailable
    first = worker.receiver.deliver(offer)
    assert first.kind is ResultKind.STOPPED
    assert first.state is JournalState.STARTED
    del control.client.overrides["acknowledge_running"]
    restarted = ScriptedExecutor()
    again = Worker(journal, control, restarted).receiver.deliver(offer)
    assert again.state is JournalState.RUNNING_ACKNOWLEDGED
    assert restarted.calls == []
    assert len(executor.calls) == 1


@pytest.mark.spec("INBOX-08")
def test_start_refusal_fails_the_start_and_replays_fail_start_only(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-08: an explicit refusal writes `start_failed`, then `fail_start` (T5), then
    `start_failure_acknowledged`; a redelivery replays nothing and never starts again."""
    offer = control.admit_and_grant(run_id())
    executor = ScriptedExecutor(answer="refuse")
    worker = Worker(journal, control, executor)
    result = worker.receiver.deliver(offer)
    assert result.state is JournalState.START_FAILURE_ACKNOWLEDGED
    record = journal.read(offer.offer_id)
    assert record is not None
    assert record.start_failure_code == "EXECUTABLE_NOT_FOUND"
    assert control.attempt_status(offer.lease.attempt_id) == "failed"
    again = worker.receiver.deliver(offer)
    assert again.kind is ResultKind.REPLAYED
    assert len(executor.calls) == 1
    assert worker.lifecycle.tracked() == ()


@pytest.mark.spec("INBOX-08")
def test_fail_start_is_replayed_after_a_lost_response(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-08: `start_failed` found on restart replays only `fail_start` until
    `start_failure_acknowledged`."""
    offer = control.admit_and_grant(run_id())
    worker = Worker(journal, control, ScriptedExecutor(answer="refuse"))
    calls: list[int] = []

    def lost(lease: OfferLease, code: str) -> LeaseAck:
        calls.append(1)
        control.engine.fail_start(lease, code)
        raise ControlPlaneUnavailable  # committed, response lost

    control.client.overrides["fail_start"] = lost
    assert worker.receiver.deliver(offer).state is JournalState.START_FAILED
    del control.client.overrides["fail_start"]
    restarted = ScriptedExecutor()
    result = Worker(journal, control, restarted).receiver.deliver(offer)
    assert result.state is JournalState.START_FAILURE_ACKNOWLEDGED
    assert restarted.calls == []
    assert calls == [1]


@pytest.mark.spec("INBOX-05")
def test_ambiguous_start_is_recovery_required_and_never_retried(
    journal: JournalStore, control: ControlPlane
) -> None:
    """§3.5 decision: an exception that is not an explicit refusal writes
    `recovery_required(launch_outcome_unknown)`; a redelivery never calls start again."""
    offer = control.admit_and_grant(run_id())
    executor = ScriptedExecutor(answer="ambiguous")
    worker = Worker(journal, control, executor)
    result = worker.receiver.deliver(offer)
    assert result.recovery_reason is RecoveryReason.LAUNCH_OUTCOME_UNKNOWN
    worker.receiver.deliver(offer)
    assert len(executor.calls) == 1


@pytest.mark.spec("INBOX-11")
@pytest.mark.parametrize(
    ("change", "code"),
    [
        ("offline", Code.WORKER_OFFLINE),
        ("session_expired", Code.WORKER_SESSION_EXPIRED),
        ("replaced", Code.WORKER_SESSION_MISMATCH),
        ("lease_expired", Code.RUN_LEASE_EXPIRED),
    ],
)
def test_unusable_authority_is_refused_before_any_journalfile_journal(
    journal: JournalStore, control: ControlPlane, tmp_path: Path, change: str, code: Code
) -> None:
    """INBOX-11: an expired Run lease, a replaced session, an offline Worker or an expired
    session is refused and no journal record exists afterwards."""
    offer = control.admit_and_grant(run_id())
    runtime = {
        "offline": session(WorkerSessionStatus.OFFLINE),
        "session_expired": session(expires_at_ms=control.clock.now),
        "replaced": session(session_id="w1-s2", generation=2),
        "lease_expired": session(),
    }[change]
    if change == "lease_expired":
        control.clock.advance(60_000)
    executor = ScriptedExecutor()
    worker = Worker(journal, control, executor)
    control.sessions["w1"] = runtime
    result = worker.receiver.deliver(offer)
    assert (result.kind, result.code) == (ResultKind.REJECTED, code)
    assert journal.read(offer.offer_id) is None
    assert journal.list(None, 64).records == ()
    assert executor.calls == []


@pytest.mark.spec("INBOX-12")
def test_draining_refuses_new_claims_and_continues_lease_recovery(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-12: while draining, a `new_claim` is refused before the journal write; a
    `lease_recovery` delivery for the existing record of the same lease proceeds."""
    fresh = control.admit_and_grant(run_id())
    known = control.admit_and_grant(run_id())
    executor = ScriptedExecutor()
    worker = Worker(journal, control, executor)
    control.client.overrides["acknowledge_running"] = unavailable
    assert worker.receiver.deliver(known).state is JournalState.STARTED
    del control.client.overrides["acknowledge_running"]
    control.sessions["w1"] = session(WorkerSessionStatus.DRAINING)
    refused = worker.receiver.deliver(fresh)
    assert (refused.kind, refused.code) == (ResultKind.REJECTED, Code.WORKER_DRAINING)
    assert journal.read(fresh.offer_id) is None
    recovery = control.offer(known.lease.attempt_id, DeliveryKind.LEASE_RECOVERY)
    assert worker.receiver.deliver(recovery).state is JournalState.RUNNING_ACKNOWLEDGED
    assert executor.calls == [known.offer_id]


@pytest.mark.spec("INBOX-13")
def test_control_plane_already_running_becomes_recovery_required(
    tmp_path: Path, control: ControlPlane
) -> None:
    """INBOX-13: a second journal (another Worker process of the same session that lost its
    journal) finds the Attempt already `running` on the control plane: the record becomes
    `recovery_required(control_plane_already_running)` and nothing is spawned."""
    offer = control.admit_and_grant(run_id())
    first_journal = file_journal(tmp_path / "first")
    first_journal.acquire()
    Worker(first_journal, control, ScriptedExecutor()).receiver.deliver(offer)
    other = file_journal(tmp_path / "second")
    other.acquire()
    executor = ScriptedExecutor()
    result = Worker(other, control, executor).receiver.deliver(offer)
    assert result.state is JournalState.RECOVERY_REQUIRED
    assert result.recovery_reason is RecoveryReason.CONTROL_PLANE_ALREADY_RUNNING
    assert executor.calls == []
    first_journal.release()
    other.release()


@pytest.mark.spec("INBOX-06")
def test_a_running_ack_answered_already_running_is_acknowledged(
    journal: JournalStore, control: ControlPlane
) -> None:
    """§3.6 `started` --`acknowledge_running` applied/replayed--> `running_acknowledged`: a
    control plane that answers the running ACK with `already_running` (the Attempt is running
    under this very fence, e.g. a replay whose first answer was lost) is an acknowledgement,
    not a refusal. The answer mapping is the kernel's `ACK_ANSWERS` table."""
    offer = control.admit_and_grant(run_id())
    worker = Worker(journal, control, ScriptedExecutor())

    def already_running(lease: OfferLease, handle: str, started: int) -> LeaseAck:
        applied = control.client.inner.acknowledge_running(lease, handle, started)
        assert applied.code is Code.APPLIED
        return LeaseAck(Code.ALREADY_RUNNING, applied.version, applied.expires_at_ms)

    control.client.overrides["acknowledge_running"] = already_running
    result = worker.receiver.deliver(offer)
    assert (result.kind, result.code) == (ResultKind.APPLIED, Code.ALREADY_RUNNING)
    assert result.state is JournalState.RUNNING_ACKNOWLEDGED
    assert control.attempt_status(offer.lease.attempt_id) == "running"


@pytest.mark.spec("INBOX-14")
def test_running_ack_version_mismatch_retries_at_most_three_times(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-14: on `LEASE_VERSION_MISMATCH` the running ACK is retried with the version the
    lease lifecycle holds, at most 3 calls in all, without sleeping; then the record stays
    `started`."""
    offer = control.admit_and_grant(run_id())
    worker = Worker(journal, control, ScriptedExecutor())
    versions: list[int] = []
    lifecycle = worker.lifecycle
    real_current = lifecycle.current

    def refreshing(offer_id: str) -> OfferLease | None:
        lease = real_current(offer_id)
        if lease is None:
            return None
        return dataclasses.replace(lease, version=lease.version + 10 + len(versions))

    def mismatch(lease: object, handle: str, started: int) -> LeaseAck:
        versions.append(lease.version)  # type: ignore[attr-defined]
        return LeaseAck(Code.LEASE_VERSION_MISMATCH)

    lifecycle.current = refreshing  # type: ignore[method-assign]
    control.client.overrides["acknowledge_running"] = mismatch
    result = worker.receiver.deliver(offer)
    assert len(versions) == ACK_VERSION_TRIES == 3
    assert len(set(versions)) == 3  # each try with a refreshed version
    assert result.kind is ResultKind.STOPPED
    assert result.code is Code.ACK_VERSION_RETRIES_EXHAUSTED
    assert result.state is JournalState.STARTED


@pytest.mark.spec("INBOX-14")
def test_version_mismatch_without_a_newer_version_stops_at_once(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-14: with no newer version in the lease lifecycle there is nothing to retry with:
    one call, no loop."""
    offer = control.admit_and_grant(run_id())
    worker = Worker(journal, control, ScriptedExecutor())
    calls: list[int] = []

    def mismatch(lease: object, handle: str, started: int) -> LeaseAck:
        calls.append(1)
        return LeaseAck(Code.LEASE_VERSION_MISMATCH)

    control.client.overrides["acknowledge_running"] = mismatch
    result = worker.receiver.deliver(offer)
    assert calls == [1]
    assert result.state is JournalState.STARTED


@pytest.mark.spec("INBOX-04")
def test_concurrent_duplicate_deliveries_join_one_operation(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-04 (concurrent half): eight threads deliver the same offer at once; they join
    the one operation in flight, all see its result, and `start()` runs once."""
    offer = control.admit_and_grant(run_id())
    gate = threading.Event()

    def hold(context: object) -> None:
        gate.wait(5)

    executor = ScriptedExecutor(hook=hold)
    worker = Worker(journal, control, executor)
    results: list[object] = []

    def deliver() -> None:
        results.append(worker.receiver.deliver(offer))

    threads = [threading.Thread(target=deliver) for _ in range(8)]
    for thread in threads:
        thread.start()
    gate.set()
    for thread in threads:
        thread.join(10)
    assert len(results) == 8
    assert executor.calls == [offer.offer_id]
    states = {getattr(r, "state", None) for r in results}
    assert states == {JournalState.RUNNING_ACKNOWLEDGED}


@pytest.mark.spec("INBOX-10")
def test_redelivery_with_a_higher_version_merges_only_the_lease(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-10: after a renewal the control plane redelivers with a higher lease version:
    the record keeps its state and gets only the new lease; the same delivery again writes
    nothing."""
    offer = control.admit_and_grant(run_id())
    worker = Worker(journal, control, ScriptedExecutor())
    worker.receiver.deliver(offer)
    control.clock.advance(11_000)
    assert worker.lifecycle.tick(control.clock()).renewed == 1
    before = journal.read(offer.offer_id)
    assert before is not None
    redelivery = control.offer(offer.lease.attempt_id, DeliveryKind.LEASE_RECOVERY)
    assert redelivery.lease.version > before.offer.lease.version
    worker.receiver.deliver(redelivery)
    after = journal.read(offer.offer_id)
    assert after is not None
    assert after.revision == before.revision + 1
    assert after.state is before.state
    assert after.offer.lease.version == redelivery.lease.version
    worker.receiver.deliver(redelivery)
    again = journal.read(offer.offer_id)
    assert again is not None
    assert again.revision == after.revision


def test_lease_lifecycle_reports_a_lost_lease_to_the_lease_loss_coordinator(
    journal: JournalStore, control: ControlPlane
) -> None:
    """§3.15: a lease the control plane expired is reported lost by the lifecycle's tick;
    the lease-loss coordinator stops the durable handle and writes
    `lease_lost_local_execution_stopped`."""
    offer = control.admit_and_grant(run_id())
    worker = Worker(journal, control, ScriptedExecutor())
    worker.receiver.deliver(offer)
    control.clock.advance(31_000)
    page = lease_expiry_page(
        control.store, control.store, control.clock(), 16, None, profile=Profile.EDGE
    )
    assert page.failed is False
    tick = worker.lifecycle.tick(control.clock())
    assert tick.lost == 1
    assert worker.lost == [(offer.lease.attempt_id, LeaseLossReason.LEASE_EXPIRED)]
    record = journal.read(offer.offer_id)
    assert record is not None
    assert record.recovery_reason is RecoveryReason.LEASE_LOST_LOCAL_EXECUTION_STOPPED
    assert worker.controller.calls  # type: ignore[attr-defined]


def test_a_restarted_worker_tracks_the_lease_again_on_redelivery(
    journal: JournalStore, control: ControlPlane
) -> None:
    """§3.15 / WR-9: after a restart the lease lifecycle is empty; the control plane's
    `lease_recovery` delivery of a running offer hands the lease back to it, so renewals go
    on (without that the lease would expire under a running process)."""
    offer = control.admit_and_grant(run_id())
    Worker(journal, control, ScriptedExecutor()).receiver.deliver(offer)
    restarted = Worker(journal, control, ScriptedExecutor())
    assert restarted.lifecycle.tracked() == ()
    recovery = control.offer(offer.lease.attempt_id, DeliveryKind.LEASE_RECOVERY)
    assert restarted.receiver.deliver(recovery).state is JournalState.RUNNING_ACKNOWLEDGED
    assert restarted.lifecycle.tracked() == (offer.offer_id,)
    control.clock.advance(11_000)
    assert restarted.lifecycle.tick(control.clock()).renewed == 1


@pytest.mark.spec("INBOX-08")
def test_a_restart_replays_fail_start_even_after_the_lease_expired(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-08 / §3.7: the control plane accepted `fail_start` and the response was lost;
    long after the stored lease's expiry a restarted Worker replays `fail_start` from the
    record alone (no delivery can come: T5 released the lease) and reaches
    `start_failure_acknowledged`; the Executor is never called."""
    offer = control.admit_and_grant(run_id())

    def lost(lease: OfferLease, code: str) -> LeaseAck:
        control.engine.fail_start(lease, code)
        raise ControlPlaneUnavailable

    control.client.overrides["fail_start"] = lost
    worker = Worker(journal, control, ScriptedExecutor(answer="refuse"))
    assert worker.receiver.deliver(offer).state is JournalState.START_FAILED
    del control.client.overrides["fail_start"]
    control.clock.advance(120_000)
    restarted = ScriptedExecutor()
    again = Worker(journal, control, restarted)
    assert again.receiver.deliver(offer).code is Code.RUN_LEASE_EXPIRED  # no delivery helps
    result = again.receiver.replay_fail_start(offer.offer_id)
    assert result is not None
    assert result.state is JournalState.START_FAILURE_ACKNOWLEDGED
    assert again.receiver.replay_fail_start(offer.offer_id) is None  # final: nothing to do
    assert restarted.calls == []


@pytest.mark.spec("INBOX-08")
def test_fail_start_after_a_renewal_stays_exactly_replayable(
    journal: JournalStore, control: ControlPlane
) -> None:
    """INBOX-08 / WR-10: the lease was renewed between `starting_acknowledged` and the start
    refusal, so `fail_start` goes out with the lifecycle's newer version; that version is
    merged into the record first, and after a lost response the restart's replay from the
    record alone is the identical command (`already_applied`)."""
    offer = control.admit_and_grant(run_id())
    holder: list[Worker] = []

    def renew_then_refuse(context: object) -> None:
        assert holder[0].lifecycle.tick(control.clock.advance(11_000)).renewed == 1

    executor = ScriptedExecutor(answer="refuse", hook=renew_then_refuse)
    worker = Worker(journal, control, executor)
    holder.append(worker)
    sent: list[int] = []

    def lost(lease: OfferLease, code: str) -> LeaseAck:
        sent.append(lease.version)
        control.engine.fail_start(lease, code)
        raise ControlPlaneUnavailable

    control.client.overrides["fail_start"] = lost
    assert worker.receiver.deliver(offer).state is JournalState.START_FAILED
    del control.client.overrides["fail_start"]
    record = journal.read(offer.offer_id)
    assert record is not None
    assert record.offer.lease.version == sent[0]  # merged before it was sent
    result = Worker(journal, control, ScriptedExecutor()).receiver.replay_fail_start(offer.offer_id)
    assert result is not None
    assert (result.state, result.code) == (
        JournalState.START_FAILURE_ACKNOWLEDGED,
        Code.ALREADY_APPLIED,
    )
