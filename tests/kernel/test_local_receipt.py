"""What a local completion receipt proves about an Attempt (SPEC §1.7 L3, §2.1 step 1, §2.2).

`kernel.local_receipt.local_receipt_read` is the one question startup recovery and execution
control both ask: no receipt is `absent`; a receipt that is this Attempt's (Run and Attempt ids,
callback sequence, token digest, and the start time when the Attempt has one) is `valid` with
the completed evidence; any other is a `conflict`. Each mismatch is checked alone, and the
answer is compared with what L3 (`complete_local`) and startup recovery (`RecoverLocalStartup`
with the evidence the read gives) do with the same receipt.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import (
    Applied,
    AttemptStatus,
    Code,
    CompletedEvidence,
    CompletionOutcome,
    Inspection,
    LocalReceipt,
    ReceiptRead,
    ReceiptState,
    RecoverLocalStartup,
    Rejected,
    RunAggregate,
    UnknownEvidence,
    apply,
    collect_evidence,
    complete_local,
    local_receipt_read,
)
from kernel.specs.states import UnknownReason
from tests.support.recovery_fixtures import (
    RECEIPT_MUTATIONS,
    T0,
    admit,
    callback_digest,
    complete_cmd,
    latest,
    local_running,
    local_starting,
    mutate_receipt,
    receipt_for,
    remote_started,
)

OUTCOMES = st.sampled_from(CompletionOutcome)
EXIT_CODES = st.none() | st.integers(-2, 255)
STARTED = T0 + 5  # the handle fact of the running Attempt, and every receipt's start time

MISMATCHES = RECEIPT_MUTATIONS


def _stage(running: bool) -> RunAggregate:
    """L1 (and L2 at `STARTED` when `running`): the callback pair is stored."""
    if running:
        return local_running("run-1", "a1", T0, started_at_ms=STARTED)
    return local_starting("run-1", "a1", T0)


# -- absent and valid ------------------------------------------------------------------------------
@pytest.mark.parametrize("running", [False, True], ids=["starting", "running"])
def test_no_receipt_is_absent(running: bool) -> None:
    read = local_receipt_read(latest(_stage(running)), None)
    assert read == ReceiptRead(ReceiptState.ABSENT)
    assert read.completed is None


@given(running=st.booleans(), outcome=OUTCOMES, exit_code=EXIT_CODES)
def test_the_attempts_own_receipt_is_valid_with_its_facts(
    running: bool, outcome: CompletionOutcome, exit_code: int | None
) -> None:
    """The completed evidence carries the receipt's outcome, callback sequence, exit code and
    start time, unchanged."""
    agg = _stage(running)
    receipt = receipt_for(agg, outcome, started_at_ms=STARTED, exit_code=exit_code)
    read = local_receipt_read(latest(agg), receipt)
    assert read.state is ReceiptState.VALID
    assert read.completed == CompletedEvidence(
        outcome=outcome, callback_sequence=1, exit_code=exit_code, started_at_ms=STARTED
    )


@given(st.integers(0, 10**6))
def test_a_starting_attempt_takes_the_start_time_from_the_receipt(offset: int) -> None:
    """An Attempt still `starting` has no handle fact: any start time is its own (the receipt
    tells it), so only the other facts decide."""
    agg = local_starting("run-1", "a1", T0)
    assert latest(agg).started_at_ms is None
    receipt = receipt_for(agg, started_at_ms=T0 + offset)
    read = local_receipt_read(latest(agg), receipt)
    assert read.state is ReceiptState.VALID
    assert read.completed is not None
    assert read.completed.started_at_ms == T0 + offset


# -- conflicts -------------------------------------------------------------------------------------
@given(st.integers(1, 10**6))
def test_a_receipt_started_before_the_attempt_existed_is_a_conflict(before: int) -> None:
    """L3 refuses it (`START_TIME_INVALID`) and recovery too (`receipt_conflict`): the read says
    the same, so the two never disagree about which receipt completes a `starting` Attempt."""
    agg = local_starting("run-1", "a1", T0)
    attempt = latest(agg)
    receipt = receipt_for(agg, started_at_ms=attempt.created_at_ms - before)
    assert local_receipt_read(attempt, receipt) == ReceiptRead(ReceiptState.CONFLICT)


@pytest.mark.parametrize("which", MISMATCHES)
def test_each_mismatch_alone_is_a_conflict_for_a_running_attempt(which: str) -> None:
    agg = _stage(running=True)
    receipt = mutate_receipt(receipt_for(agg, started_at_ms=STARTED), which)
    read = local_receipt_read(latest(agg), receipt)
    assert read == ReceiptRead(ReceiptState.CONFLICT)
    assert read.completed is None


@pytest.mark.parametrize("which", MISMATCHES)
def test_only_the_start_time_is_not_checked_for_a_starting_attempt(which: str) -> None:
    agg = _stage(running=False)
    receipt = mutate_receipt(receipt_for(agg, started_at_ms=STARTED), which)
    state = local_receipt_read(latest(agg), receipt).state
    assert state is (ReceiptState.VALID if which.startswith("start") else ReceiptState.CONFLICT)


@given(running=st.booleans(), position=st.integers(0, 63))
def test_one_differing_digest_character_is_a_conflict(running: bool, position: int) -> None:
    agg = _stage(running)
    receipt = mutate_receipt(receipt_for(agg, started_at_ms=STARTED), "digest", position)
    assert local_receipt_read(latest(agg), receipt).state is ReceiptState.CONFLICT


def test_an_attempt_without_a_callback_pair_has_no_receipt_of_its_own() -> None:
    """A pristine `claimed` Attempt and a remote one never stored a callback digest: a receipt
    naming them, with every other fact equal, is a conflict."""
    for agg in (admit("run-1", "a1", T0), remote_started("run-1", "a1", T0, running=True)):
        attempt = latest(agg)
        assert attempt.callback_token_sha256 is None
        forged = LocalReceipt(
            run_id=attempt.run_id,
            attempt_id=attempt.attempt_id,
            callback_sequence=attempt.callback_sequence,
            token_sha256=callback_digest(attempt.attempt_id),
            outcome=CompletionOutcome.SUCCEEDED,
            started_at_ms=attempt.started_at_ms or T0,
        )
        assert local_receipt_read(attempt, forged).state is ReceiptState.CONFLICT


def test_a_receipt_of_an_earlier_activation_is_a_conflict() -> None:
    """The callback pair is per activation: a receipt with the right ids and token digest of
    another activation (another sequence) is not this activation's."""
    agg = _stage(running=True)
    attempt = latest(agg)
    later = dataclasses.replace(attempt, callback_sequence=2)
    receipt = receipt_for(agg, started_at_ms=STARTED)
    assert receipt.callback_sequence == 1
    assert local_receipt_read(later, receipt).state is ReceiptState.CONFLICT
    assert local_receipt_read(attempt, receipt).state is ReceiptState.VALID


# -- the same answer as L3 and as startup recovery -------------------------------------------------
@given(
    running=st.booleans(),
    which=st.sampled_from(("none", *MISMATCHES)),
    position=st.integers(0, 63),
    outcome=OUTCOMES,
    exit_code=EXIT_CODES,
)
def test_a_valid_read_completes_exactly_as_l3_does(
    running: bool, which: str, position: int, outcome: CompletionOutcome, exit_code: int | None
) -> None:
    """A receipt read `valid` is exactly one L3 applies, and startup recovery with the read's
    evidence makes the same Attempt and Run facts; a `conflict` is one L3 refuses as
    unauthenticated, and startup recovery stops at `unknown(receipt_conflict)` without
    inspecting the process."""
    agg = _stage(running)
    attempt = latest(agg)
    base = receipt_for(agg, outcome, started_at_ms=STARTED, exit_code=exit_code)
    receipt = base if which == "none" else mutate_receipt(base, which, position)
    read = local_receipt_read(attempt, receipt)
    now = agg.run.updated_at_ms + 10
    live = complete_local(agg, complete_cmd(agg, receipt), now)
    inspected: list[int] = []

    def inspect() -> Inspection:
        inspected.append(1)
        return Inspection.RUNNING

    evidence = collect_evidence(lambda: read, inspect)
    assert inspected == []
    restart = apply(agg, RecoverLocalStartup("run-1", attempt.attempt_id, evidence), now)
    if read.state is ReceiptState.CONFLICT:
        assert live == Rejected(Code.RECEIPT_UNAUTHENTICATED)
        assert evidence == UnknownEvidence(UnknownReason.RECEIPT_CONFLICT)
        assert restart == Rejected(Code.RECEIPT_CONFLICT)
        return
    assert read.state is ReceiptState.VALID
    assert isinstance(live, Applied)
    assert isinstance(restart, Applied)
    for after in (live.aggregate, restart.aggregate):
        stored = latest(after)
        assert stored.status is AttemptStatus(outcome.value)
        assert stored.exit_code == exit_code
        assert stored.started_at_ms == receipt.started_at_ms
        assert stored.finished_at_ms == now
        assert after.run.status.value == outcome.value
    assert latest(live.aggregate) == latest(restart.aggregate)
