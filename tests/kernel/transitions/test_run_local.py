"""The local executor path L1..L5 (SPEC §1.7 "Local executor path", §1.8.3; RETRY-18).

Local Attempts have no lease: L1 commits the start barrier (and the callback pair) before the
spawn, L2 records the durable handle, L3 applies an authenticated completion receipt, L4/L5
record a conclusive stop under a cancellation (or deadline, B-06) intent.
"""

from __future__ import annotations

import dataclasses
import hmac
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import (
    ActivateLocal,
    Applied,
    AttemptStatus,
    CancelReason,
    Code,
    CompletedEvidence,
    CompleteLocal,
    CompletionOutcome,
    EffectConflict,
    LocalReceipt,
    Raced,
    RecordLocalStop,
    RecoverLocalStartup,
    Rejected,
    Replayed,
    RunAggregate,
    RunOwner,
    RunStatus,
    StopResult,
    UpdateRun,
    activate_local,
    apply,
    apply_effects,
    complete_local,
    record_local_handle,
    record_local_stop,
    token_digest,
)
from kernel.entities import Attempt
from kernel.outcomes import Outcome
from tests.support.recovery_fixtures import (
    LOCAL,
    REMOTE,
    T0,
    activate_cmd,
    admit,
    callback_digest,
    complete_cmd,
    handle_cmd,
    latest,
    local_requeued,
    local_running,
    local_starting,
    mutate_receipt,
    not_running_cmd,
    ok,
    receipt_for,
    remote_started,
    request_cancel,
)
from tests.support.sim import RUN_ID, Sim, advance_clock, callback_token, draw_command

STEPS = 30
gaps = st.sampled_from([0, 1, 7, 1_000, 60_000])
outcomes = st.sampled_from(CompletionOutcome)


def _event_shape(outcome: Applied) -> list[tuple[str, str | None]]:
    return [(e.type, e.attempt_id) for e in outcome.events]


# -- L1 -------------------------------------------------------------------------------------------
def _activation(attempt: Attempt, executor_type: str) -> ActivateLocal:
    return ActivateLocal(
        run_id=RUN_ID,
        attempt_id=attempt.attempt_id,
        local_executor_type=executor_type,
        callback_sequence=attempt.callback_sequence + 1,
        callback_token_sha256=token_digest(callback_token(attempt.attempt_id)),
    )


def _check_activation(
    agg: RunAggregate, attempt: Attempt, command: ActivateLocal, now: int, outcome: Outcome
) -> None:
    """The §1.8.3 activation checks, read from the SPEC, against one activation outcome."""
    run = agg.run
    refusals = [
        name
        for name, failed in (
            ("not the latest Attempt", attempt is not agg.latest_attempt),
            ("not runtime-owned", run.owner is not RunOwner.RUNTIME),
            ("cancellation intent", run.has_cancel_intent),
            ("other executor type", attempt.executor_type != command.local_executor_type),
        )
        if failed
    ]
    if refusals:  # "Otherwise Rejected before any side effect" (§1.8.3)
        assert isinstance(outcome, Rejected), (refusals, outcome)
        return
    if attempt.lease_generation is not None:
        # The kernel also refuses an Attempt that was offered to a remote Worker (it holds
        # lease rows): one Attempt never gets two execution authorities.
        assert not isinstance(outcome, Applied)
        return
    if run.status is not RunStatus.QUEUED or attempt.status is not AttemptStatus.CLAIMED:
        if attempt.status is AttemptStatus.STARTING:
            # L1: a second activation of the same Attempt fails the Run CAS: Raced.
            assert outcome == Raced(Code.NOT_ELIGIBLE), outcome
        else:
            assert isinstance(outcome, Rejected | Raced), outcome
        return
    if now < run.updated_at_ms:
        assert outcome == Rejected(Code.CLOCK_REGRESSION)  # V-5
        return
    assert isinstance(outcome, Applied), outcome
    after = outcome.aggregate
    stored = latest(after)
    assert after.run.status is RunStatus.DISPATCHING
    assert stored.attempt_id == attempt.attempt_id
    assert stored.status is AttemptStatus.STARTING
    assert stored.callback_sequence == command.callback_sequence
    assert stored.callback_token_sha256 == command.callback_token_sha256
    assert stored.executor_handle is None
    assert stored.started_at_ms is None
    assert _event_shape(outcome) == [
        ("run.dispatching", None),
        ("attempt.starting", attempt.attempt_id),
    ]
    run_updates = [e for e in outcome.effects if isinstance(e, UpdateRun)]
    assert [u.expected_version for u in run_updates] == [run.version]  # the Run CAS
    for later in (now, now + 1, now + 60_000):
        assert activate_local(after, command, later) == Raced(Code.NOT_ELIGIBLE)


@pytest.mark.spec("RETRY-18", "RUN-04", "RUN-05")
@given(st.data())
def test_activation_accepts_only_the_latest_claimed_local_attempt(data: st.DataObject) -> None:
    """L1/§1.8.3 (RETRY-18): in every reachable state, activation is applied only to the
    latest `claimed` Attempt of an uncancelled runtime `queued` Run whose executor type is the
    local one; a non-latest Attempt, a non-runtime Run, an intent or another executor type is
    `Rejected` before any effect; activating an Attempt that is already `starting` (a second
    activation) is `Raced`; an applied activation stores the callback pair, moves the Run to
    `dispatching` and the Attempt to `starting` with the Run CAS, and repeating it is `Raced`."""
    sim = Sim()
    for _ in range(STEPS):
        advance_clock(data, sim)
        command = draw_command(data, sim)
        if command is not None:
            sim.step(command)
        agg = sim.agg
        if agg is None:
            continue
        for attempt in agg.attempts:
            for executor_type in (LOCAL, REMOTE):
                activation = _activation(attempt, executor_type)
                outcome = activate_local(agg, activation, sim.now)
                _check_activation(agg, attempt, activation, sim.now, outcome)


@pytest.mark.spec("RETRY-18")
@given(st.integers(T0, T0 + 10_000), gaps, st.integers(1, 3), st.integers(1, 3))
def test_two_concurrent_activations_yield_one_spawn(
    at: int, gap: int, seq_a: int, seq_b: int
) -> None:
    """RETRY-18: two activations of one Attempt computed against the same snapshot both
    decide `Applied`, but their effects carry the same Run CAS: once the first commits, the
    second's effects no longer apply (zero rows), and re-deciding it on the committed state is
    `Raced`. Exactly one activation commits, so exactly one spawn follows."""
    agg = admit("run-1", "a1", at)
    first = activate_local(agg, activate_cmd(agg, seq_a), at + gap)
    other = ActivateLocal(
        run_id="run-1",
        attempt_id="a1",
        local_executor_type=LOCAL,
        callback_sequence=seq_b,
        callback_token_sha256=token_digest("other_dispatcher".ljust(40, "q")),
    )
    second = activate_local(agg, other, at + gap)
    assert isinstance(first, Applied)
    assert isinstance(second, Applied)
    committed = apply_effects(agg, first.effects)
    assert committed == first.aggregate
    with pytest.raises(EffectConflict):
        apply_effects(committed, second.effects)
    assert activate_local(committed, other, at + gap) == Raced(Code.NOT_ELIGIBLE)


@pytest.mark.spec("RETRY-18")
def test_activation_refusals_by_example() -> None:
    """§1.8.3 by example: an old (non-latest) Attempt, another executor type, a cancellation
    intent and a remote Attempt are each `Rejected` with a code; the fresh retry Attempt N+1
    of the same Run is accepted."""
    requeued = local_requeued("run-1", "a1", "a2", T0)
    now = requeued.run.updated_at_ms
    old = ActivateLocal(
        run_id="run-1",
        attempt_id="a1",
        local_executor_type=LOCAL,
        callback_sequence=2,
        callback_token_sha256=callback_digest("a1"),
    )
    assert activate_local(requeued, old, now) == Rejected(Code.ATTEMPT_NOT_LATEST)
    fresh = activate_cmd(requeued)
    assert fresh.attempt_id == "a2"
    assert isinstance(activate_local(requeued, fresh, now), Applied)

    queued = admit("run-2", "b1", T0)
    foreign = ActivateLocal(
        run_id="run-2",
        attempt_id="b1",
        local_executor_type="other-executor",
        callback_sequence=1,
        callback_token_sha256=callback_digest("b1"),
    )
    assert activate_local(queued, foreign, T0) == Rejected(Code.EXECUTOR_TYPE_MISMATCH)
    cancelled = request_cancel(queued, T0 + 1, CancelReason.USER)
    assert activate_local(cancelled, activate_cmd(cancelled), T0 + 2) == Rejected(
        Code.CANCEL_REQUESTED
    )
    remote = admit("run-3", "c1", T0, executor=REMOTE)
    assert activate_local(remote, activate_cmd(remote), T0) == Rejected(Code.EXECUTOR_TYPE_MISMATCH)
    legacy = admit("run-4", "d1", T0, owner=RunOwner.LEGACY)
    assert activate_local(legacy, activate_cmd(legacy), T0) == Rejected(Code.NOT_RUNTIME_OWNED)


# -- L2 -------------------------------------------------------------------------------------------
def _starting(retry: bool, at: int) -> RunAggregate:
    """A local Attempt just activated: Attempt 1, or the retry Attempt 2 (created later)."""
    if not retry:
        return local_starting("run-1", "a1", at)
    requeued = local_requeued("run-1", "a1", "a2", at)
    return ok(apply(requeued, activate_cmd(requeued), requeued.run.updated_at_ms))


@pytest.mark.spec("RUN-03", "RUN-04")
@given(
    st.booleans(),
    st.integers(T0, T0 + 5_000),
    st.integers(-3_000, 3_000),
    gaps,
)
def test_handle_records_the_handle_fact(retry: bool, at: int, offset: int, gap: int) -> None:
    """L2: the handle and `started_at_ms` (the handle fact, never the observation time) are
    stored, Run and Attempt become `running` with `run.running`, `attempt.running`; a start
    time before the Attempt's creation is `Rejected(START_TIME_INVALID)`; the same handle again
    is `Replayed(already_applied)`, a different handle `Rejected(HANDLE_CONFLICT)`."""
    agg = _starting(retry, at)
    attempt = latest(agg)
    started = attempt.created_at_ms + offset
    now = max(agg.run.updated_at_ms, started) + gap
    outcome = record_local_handle(agg, handle_cmd(agg, started, "pid:42"), now)
    if started < attempt.created_at_ms:
        assert outcome == Rejected(Code.START_TIME_INVALID)
        return
    assert isinstance(outcome, Applied)
    after = outcome.aggregate
    stored = latest(after)
    assert stored.status is AttemptStatus.RUNNING
    assert after.run.status is RunStatus.RUNNING
    assert stored.executor_handle == "pid:42"
    assert stored.started_at_ms == started
    assert after.run.started_at_ms == started
    assert _event_shape(outcome) == [("run.running", None), ("attempt.running", stored.attempt_id)]
    for later in (now, now + 1, now + 100_000):
        same = record_local_handle(after, handle_cmd(after, started, "pid:42"), later)
        assert same == Replayed(Code.ALREADY_APPLIED)
        other = record_local_handle(after, handle_cmd(after, started, "pid:43"), later)
        assert other == Rejected(Code.HANDLE_CONFLICT)


@pytest.mark.spec("RUN-08")
@given(st.sampled_from(["completed", "stopped", "lost"]), st.sampled_from(["pid:7", "pid:9"]))
def test_handle_on_a_terminal_attempt_is_already_terminal(how: str, handle: str) -> None:
    """L2: once the local Attempt is terminal (completed, stopped or lost), recording any handle
    is `Replayed(already_terminal)` and writes nothing."""
    running = local_running("run-1", "a1", T0)
    terminal = _terminal(running, how)
    assert latest(terminal).status.terminal
    outcome = record_local_handle(terminal, handle_cmd(terminal, T0, handle), T0 + 500)
    assert outcome == Replayed(Code.ALREADY_TERMINAL)


def _terminal(running: RunAggregate, how: str) -> RunAggregate:
    at = running.run.updated_at_ms + 100
    if how == "completed":
        return ok(apply(running, complete_cmd(running, receipt_for(running)), at))
    if how == "stopped":
        cancelling = request_cancel(running, at, CancelReason.USER)
        return ok(
            apply(
                cancelling,
                RecordLocalStop(
                    run_id=running.run.run_id,
                    attempt_id=latest(running).attempt_id,
                    result=StopResult.ALREADY_EXITED,
                ),
                at,
            )
        )
    assert how == "lost"
    return ok(apply(running, not_running_cmd(running), at))


# -- L3 -------------------------------------------------------------------------------------------
_MUTATIONS = ("none", "run_id", "attempt_id", "seq_up", "seq_down", "digest", "start")


@pytest.mark.spec("RUN-03", "RUN-08")
@given(
    from_running=st.booleans(),
    mutation=st.sampled_from(_MUTATIONS),
    position=st.integers(0, 63),
    outcome=outcomes,
    exit_code=st.one_of(st.none(), st.integers(-2, 3)),
    gap=gaps,
    late_outcome=outcomes,
)
def test_receipt_authentication_and_first_terminal_fact_wins(
    *,
    from_running: bool,
    mutation: str,
    position: int,
    outcome: CompletionOutcome,
    exit_code: int | None,
    gap: int,
    late_outcome: CompletionOutcome,
) -> None:
    """L3: a receipt is applied iff it authenticates against the Attempt: same Run and Attempt
    ids, `callback_sequence` equal to the Attempt's, the token digest equal to the stored one
    (a single differing character is refused), and the start time equal to `started_at_ms` when
    the Attempt has one. Otherwise `Rejected(RECEIPT_UNAUTHENTICATED)`. An applied receipt makes
    Attempt and Run terminal with its outcome and exit code, `finished_at_ms` = observation time
    (from `starting` also `started_at_ms` = the receipt's start time), `run.<o>` then
    `attempt.<o>`. Afterwards any authentic receipt is `Replayed(already_terminal)`: the first
    terminal fact wins."""
    agg = (
        local_running("run-1", "a1", T0, started_at_ms=T0 + 5)
        if from_running
        else local_starting("run-1", "a1", T0)
    )
    attempt = latest(agg)
    base = receipt_for(agg, outcome, started_at_ms=T0 + 5, exit_code=exit_code)
    receipt = mutate_receipt(base, mutation, position)
    # V-5 with E-4: not before the recorded start (T0 + 5, the handle fact) either.
    now = max(agg.run.updated_at_ms, T0 + 5) + gap
    result = complete_local(agg, complete_cmd(agg, receipt), now)
    authentic = mutation == "none" or (mutation == "start" and attempt.started_at_ms is None)
    if not authentic:
        assert result == Rejected(Code.RECEIPT_UNAUTHENTICATED)
        return
    assert isinstance(result, Applied)
    assert result.code is Code.COMPLETED
    after = result.aggregate
    stored = latest(after)
    assert stored.status.value == outcome.value
    assert after.run.status.value == outcome.value
    assert stored.exit_code == exit_code
    if outcome is CompletionOutcome.FAILED:  # §1.2: a failed Run carries a stable code
        assert after.run.error_code is not None
    assert stored.finished_at_ms == now
    assert after.run.finished_at_ms == now
    assert stored.started_at_ms == receipt.started_at_ms
    assert stored.callback_sequence == attempt.callback_sequence
    assert _event_shape(result) == [
        (f"run.{outcome.value}", None),
        (f"attempt.{outcome.value}", "a1"),
    ]
    late = receipt_for(after, late_outcome, exit_code=7)
    for later in (now, now + 1, now + 60_000):
        assert complete_local(after, complete_cmd(after, late), later) == Replayed(
            Code.ALREADY_TERMINAL
        )
        assert complete_local(after, complete_cmd(after, receipt), later) == Replayed(
            Code.ALREADY_TERMINAL
        )


@pytest.mark.spec("RUN-08")
@given(st.sampled_from(["stopped", "lost"]), outcomes)
def test_a_late_receipt_after_another_terminal_fact_is_already_terminal(
    how: str, outcome: CompletionOutcome
) -> None:
    """L3: after a stop (L5) or startup recovery's `lost`, an authentic late receipt is
    `Replayed(already_terminal)`; the first terminal fact stays."""
    running = local_running("run-1", "a1", T0)
    terminal = _terminal(running, how)
    receipt = receipt_for(running, outcome)
    result = complete_local(terminal, complete_cmd(terminal, receipt), T0 + 10_000)
    assert result == Replayed(Code.ALREADY_TERMINAL)


@pytest.mark.spec("RUN-05")
def test_a_receipt_for_an_attempt_without_callback_pair_is_unauthenticated() -> None:
    """L3: an Attempt that was never activated locally (a pristine `claimed` one, a remote one)
    has no callback digest, so no receipt authenticates against it."""
    queued = admit("run-1", "a1", T0)
    remote = remote_started("run-2", "b1", T0, running=True)
    for agg in (queued, remote):
        attempt = latest(agg)
        forged = LocalReceipt(
            run_id=agg.run.run_id,
            attempt_id=attempt.attempt_id,
            callback_sequence=attempt.callback_sequence,
            token_sha256=callback_digest(attempt.attempt_id),
            outcome=CompletionOutcome.SUCCEEDED,
            started_at_ms=T0,
        )
        command = CompleteLocal(
            run_id=agg.run.run_id, attempt_id=attempt.attempt_id, receipt=forged
        )
        assert complete_local(agg, command, T0 + 1) == Rejected(Code.RECEIPT_UNAUTHENTICATED)


@pytest.mark.spec("RUN-05")
@pytest.mark.parametrize("authentic", [True, False])
def test_receipt_digest_is_compared_with_compare_digest(
    authentic: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """§0.4 / L3: the receipt token digest is compared with the stored digest through
    `hmac.compare_digest` (constant time), whether or not they match."""
    agg = local_running("run-1", "a1", T0)
    receipt = receipt_for(agg)
    if not authentic:
        receipt = mutate_receipt(receipt, "digest", 63)
    calls: list[tuple[bytes, bytes]] = []
    real: Callable[[bytes, bytes], bool] = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    result = complete_local(agg, complete_cmd(agg, receipt), T0 + 1)
    assert isinstance(result, Applied) is authentic
    stored = latest(agg).callback_token_sha256
    assert stored is not None
    pair = (receipt.token_sha256.encode(), stored.encode())
    assert pair in calls


class _RecordingDigest(str):
    """A digest that records every ordinary (short-circuiting) equality test made on it."""

    __slots__ = ()
    equality_tests: list[str] = []  # noqa: RUF012

    def __eq__(self, other: object) -> bool:
        _RecordingDigest.equality_tests.append("eq")
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        _RecordingDigest.equality_tests.append("ne")
        return str.__ne__(self, other)

    __hash__ = str.__hash__


@pytest.mark.spec("RUN-05")
def test_receipt_digest_is_never_compared_with_ordinary_equality() -> None:
    """§0.4 / L3: authenticating a receipt compares its token digest only in constant time; no
    ordinary `==`/`!=` is ever evaluated on it."""
    agg = local_running("run-1", "a1", T0)
    receipt = receipt_for(agg)
    spied = dataclasses.replace(receipt, token_sha256=_RecordingDigest(receipt.token_sha256))
    _RecordingDigest.equality_tests.clear()
    result = complete_local(agg, complete_cmd(agg, spied), T0 + 1)
    assert isinstance(result, Applied)
    assert _RecordingDigest.equality_tests == []


# -- L4 / L5 --------------------------------------------------------------------------------------
@pytest.mark.spec("RUN-03", "RUN-08")
@given(
    st.one_of(st.none(), st.sampled_from(CancelReason)),
    st.sampled_from(StopResult),
    gaps,
    gaps,
)
def test_stop_under_intent(
    reason: CancelReason | None, result: StopResult, gap_intent: int, gap_stop: int
) -> None:
    """L4/L5: a conclusive stop of a running local Attempt under a `timeout` intent makes Run
    and Attempt `timed_out`, under any other intent `cancelled`, with `finished_at_ms` = the
    observation time and `run.<s>`, `attempt.<s>`; without an intent nothing is written; a
    second stop is `Replayed(already_terminal)`."""
    agg = local_running("run-1", "a1", T0)
    now = T0 + gap_intent
    if reason is not None:
        agg = request_cancel(agg, now, reason)
    now += gap_stop
    stop = RecordLocalStop(run_id="run-1", attempt_id="a1", result=result)
    outcome = record_local_stop(agg, stop, now)
    if reason is None:
        assert isinstance(outcome, Rejected)
        assert outcome.code is Code.STOP_NOT_APPLICABLE
        return
    final = "timed_out" if reason is CancelReason.TIMEOUT else "cancelled"
    assert isinstance(outcome, Applied)
    assert outcome.code is Code.STOPPED
    after = outcome.aggregate
    assert after.run.status.value == final
    assert latest(after).status.value == final
    assert latest(after).finished_at_ms == now
    assert after.run.finished_at_ms == now
    assert _event_shape(outcome) == [(f"run.{final}", None), (f"attempt.{final}", "a1")]
    assert record_local_stop(after, stop, now + 1) == Replayed(Code.ALREADY_TERMINAL)


@pytest.mark.spec("RUN-03", "RUN-08")
@given(
    st.one_of(st.none(), st.sampled_from(CancelReason)),
    outcomes,
    st.sampled_from(["receipt", "startup_recovery"]),
    gaps,
)
def test_a_completion_under_an_intent_ends_with_the_intent_unless_it_succeeded(
    reason: CancelReason | None, outcome: CompletionOutcome, route: str, gap: int
) -> None:
    """Decision R-27 (L3 and §2.1 `completed` evidence of a local Attempt): under a `timeout`
    intent a completion that did not succeed ends Run and Attempt `timed_out`, under any other
    intent `cancelled`, as the stop (L4/L5) whose record a crash lost would have; the receipt's
    exit code is kept. A `succeeded` completion, and any completion without an intent, ends with
    its own outcome."""
    agg = local_running("run-1", "a1", T0, started_at_ms=T0 + 5)
    if reason is not None:
        agg = request_cancel(agg, T0 + 10, reason)
    now = max(agg.run.updated_at_ms, T0 + 5) + gap  # not before the start (V-5, E-4)
    attempt = latest(agg)
    command: CompleteLocal | RecoverLocalStartup
    if route == "receipt":
        command = complete_cmd(agg, receipt_for(agg, outcome, exit_code=-15))
    else:
        evidence = CompletedEvidence(outcome, attempt.callback_sequence, -15, T0 + 5)
        command = RecoverLocalStartup("run-1", "a1", evidence)
    result = apply(agg, command, now)
    assert isinstance(result, Applied)
    if reason is None or outcome is CompletionOutcome.SUCCEEDED:
        final = outcome.value
    else:
        final = "timed_out" if reason is CancelReason.TIMEOUT else "cancelled"
    after = result.aggregate
    assert after.run.status.value == final
    assert latest(after).status.value == final
    assert latest(after).exit_code == -15
    assert (after.run.error_code is not None) == (final == "failed")
    assert [e for e, _ in _event_shape(result)] == [f"run.{final}", f"attempt.{final}"]


@pytest.mark.spec("RUN-05")
@given(st.sampled_from(CancelReason), st.sampled_from(StopResult))
def test_a_starting_attempt_is_not_stopped_before_its_handle(
    reason: CancelReason, result: StopResult
) -> None:
    """§1.7: an Attempt still `starting` is stopped only after L2 recorded its handle: a stop
    submitted before that is not applied."""
    agg = request_cancel(local_starting("run-1", "a1", T0), T0 + 1, reason)
    stop = RecordLocalStop(run_id="run-1", attempt_id="a1", result=result)
    assert not isinstance(record_local_stop(agg, stop, T0 + 2), Applied)
