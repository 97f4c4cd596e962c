"""The local execution-control decisions of `kernel.local_control` (SPEC §1.7 L4/L5, §1.9, §2.1,
§2.2, Appendix D-1, D-11; ADR-0380 §3, O-2; CAD-15).

- `local_stop_candidates` against an independent reading of O-2 step 2 over Runs reached through
  the kernel's transitions (the edge runner's SQL is compared with it in
  `tests/runners/edge/test_local_sources.py`), and one Run per predicate term that misses only
  that term;
- `receipt_cleanup_allowed` (D-1, CAD-15), `launch_identity` (D-1, LR-9),
  `startup_budget_exhausted` (D-11), `local_idle` and `watched_after_startup`, each over its
  whole input domain (every status, every `Code`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import (
    Applied,
    AttemptStatus,
    CancelReason,
    Code,
    CompletionOutcome,
    Inspection,
    LiveEvidence,
    NotRunningEvidence,
    Outcome,
    Raced,
    RecoverLocalStartup,
    Rejected,
    Replayed,
    RequestCancel,
    RunAggregate,
    RunKind,
    RunOwner,
    RunStatus,
    UnknownEvidence,
    apply,
    launch_identity,
    local_idle,
    local_stop_candidates,
    receipt_cleanup_allowed,
    startup_budget_exhausted,
    watched_after_startup,
)
from kernel.entities import Attempt
from kernel.specs import BUDGETS, Profile
from kernel.specs.limits import STARTUP_RECOVERY_TOTAL_MAX
from kernel.specs.states import UnknownReason
from tests.support.recovery_fixtures import (
    T0,
    aggregate_sets,
    complete_cmd,
    latest,
    local_running,
    local_starting,
    not_running_cmd,
    ok,
    receipt_for,
    relabel_legacy,
    remote_started,
    request_cancel,
)

Item = tuple[str, str | None]

#: I-5: the statuses an Attempt never leaves (`lost` included), written out from the SPEC.
SETTLED_ATTEMPTS = frozenset(
    {
        AttemptStatus.SUCCEEDED,
        AttemptStatus.FAILED,
        AttemptStatus.CANCELLED,
        AttemptStatus.TIMED_OUT,
        AttemptStatus.LOST,
    }
)
#: §1.2: the Run statuses that are not settled (issue 15 item 4 lists them).
UNSETTLED_RUNS = frozenset(
    {
        RunStatus.CREATED,
        RunStatus.QUEUED,
        RunStatus.DISPATCHING,
        RunStatus.RUNNING,
        RunStatus.LOST,
        RunStatus.RETRY_WAIT,
    }
)


# -- local_stop_candidates -------------------------------------------------------------------------
def spec_local_stop(aggs: Sequence[RunAggregate]) -> list[Item]:
    """O-2 step 2 (L4/L5): runtime ordinary `running` Runs with an intent whose latest Attempt
    (highest number) was activated locally (it holds a callback digest) and is `running` under a
    recorded handle; order (cancel_requested_at, run_id)."""
    rows: list[tuple[tuple[int, str], Item]] = []
    for agg in aggs:
        run = agg.run
        newest = max(agg.attempts, key=lambda a: a.number, default=None)
        if (
            run.owner is RunOwner.RUNTIME
            and run.kind is RunKind.ORDINARY
            and run.status is RunStatus.RUNNING
            and run.cancel_requested_at_ms is not None
            and newest is not None
            and newest.status is AttemptStatus.RUNNING
            and newest.callback_token_sha256 is not None
            and newest.executor_handle is not None
        ):
            rows.append(((run.cancel_requested_at_ms, run.run_id), (run.run_id, newest.attempt_id)))
    return [item for _, item in sorted(rows)]


@st.composite
def stop_worlds(draw: st.DrawFn) -> list[RunAggregate]:
    """Reached Runs (local and remote, every stage), most given an intent at a
    drawn later time, so that running local Runs with an intent are common."""
    aggs = draw(
        aggregate_sets(
            min_size=2,
            max_size=16,
            scenarios=(
                "local_running",
                "local_running",
                "local_running",
                "local_starting",
                "local_lost",
                "remote_running",
                "remote_revoked",
                "queued",
                "terminal",
                "converged",
            ),
            cancel=False,
        )
    )
    out = []
    for agg in aggs:
        outcome: Outcome | None = None
        if draw(st.sampled_from([True, True, False])):
            at = agg.run.updated_at_ms + draw(st.sampled_from([0, 0, 1, 5_000]))
            reason = draw(st.sampled_from(list(CancelReason)))
            outcome = apply(agg, RequestCancel(run_id=agg.run.run_id, reason=reason), at)
        out.append(outcome.aggregate if isinstance(outcome, Applied) else agg)
    return out


def _items(aggs: Sequence[RunAggregate], limit: int, after: tuple[int, str] | None) -> list[Item]:
    return [(c.run_id, c.attempt_id) for c in local_stop_candidates(aggs, limit, after).items]


@given(stop_worlds(), st.integers(1, 4) | st.integers(1, 64))
def test_local_stop_source_is_the_first_limit_eligible(
    aggs: list[RunAggregate], limit: int
) -> None:
    """P-2/P-3: the page is exactly the first `limit` eligible Runs in the SPEC's order, with
    the keyset key `(cancel_requested_at_ms, run_id)`, `has_more` iff more exist, whatever the
    row order; following the cursor visits every eligible Run once, in order."""
    expected = spec_local_stop(aggs)
    page = local_stop_candidates(aggs, limit)
    assert [(c.run_id, c.attempt_id) for c in page.items] == expected[:limit]
    assert page.has_more == (len(expected) > limit)
    assert local_stop_candidates(list(reversed(aggs)), limit) == page
    by_run = {agg.run.run_id: agg for agg in aggs}
    for c in page.items:
        assert c.key == (by_run[c.run_id].run.cancel_requested_at_ms, c.run_id)
    walked: list[Item] = []
    after: tuple[int, str] | None = None
    for _ in range(len(expected) + 1):
        got = local_stop_candidates(aggs, limit, after)
        walked.extend((c.run_id, c.attempt_id) for c in got.items)
        if not got.has_more:
            break
        after = got.cursor
    assert walked == expected


def _candidate() -> RunAggregate:
    """A local Run running under handle `pid:7` with a user intent: the one shape selected."""
    return request_cancel(local_running("run-1", "a1", T0), T0 + 5, CancelReason.USER)


def _replace_latest(agg: RunAggregate, **changes: object) -> RunAggregate:
    attempts = (*agg.attempts[:-1], dataclasses.replace(latest(agg), **changes))  # type: ignore[arg-type]
    return dataclasses.replace(agg, attempts=attempts)


def _replace_run(agg: RunAggregate, **changes: object) -> RunAggregate:
    return dataclasses.replace(agg, run=dataclasses.replace(agg.run, **changes))  # type: ignore[arg-type]


def _newer_claimed(agg: RunAggregate) -> RunAggregate:
    newer = Attempt("a2", agg.run.run_id, 2, AttemptStatus.CLAIMED, "local", T0 + 6)
    return dataclasses.replace(agg, attempts=(*agg.attempts, newer))


#: Each misses exactly one term of the predicate. Reached states where the kernel can reach
#: them; otherwise the reached candidate with one field relabelled (as the fixtures relabel
#: `owner`), since the source must be right on any row the schema admits.
MISSES: dict[str, Callable[[], RunAggregate]] = {
    "no_intent": lambda: local_running("run-1", "a1", T0),
    "legacy": lambda: relabel_legacy(_candidate()),
    "workflow": lambda: _replace_run(_candidate(), kind=RunKind.WORKFLOW),
    "run_dispatching": lambda: _replace_run(_candidate(), status=RunStatus.DISPATCHING),
    "run_lost": lambda: _replace_run(_candidate(), status=RunStatus.LOST),
    "attempt_starting": lambda: _replace_latest(_candidate(), status=AttemptStatus.STARTING),
    "attempt_lost": lambda: _replace_latest(_candidate(), status=AttemptStatus.LOST),
    "no_handle": lambda: _replace_latest(_candidate(), executor_handle=None),
    "not_local": lambda: _replace_latest(_candidate(), callback_token_sha256=None),
    "not_latest": lambda: _newer_claimed(_candidate()),
    "remote_reached": lambda: request_cancel(
        remote_started("run-1", "a1", T0, running=True), T0 + 5, CancelReason.USER
    ),
    "starting_reached": lambda: request_cancel(
        local_starting("run-1", "a1", T0), T0 + 5, CancelReason.TIMEOUT
    ),
}


def test_the_candidate_shape_is_selected_with_its_key() -> None:
    for reason in CancelReason:
        agg = request_cancel(local_running("run-1", "a1", T0), T0 + 5, reason)
        page = local_stop_candidates([agg], 16)
        assert [(c.run_id, c.attempt_id, c.key) for c in page.items] == [
            ("run-1", "a1", (T0 + 5, "run-1"))
        ]
        assert not page.has_more


@pytest.mark.parametrize("miss", sorted(MISSES))
def test_each_term_of_the_stop_predicate_matters_alone(miss: str) -> None:
    """A Run missing only one term is not selected (a Run with an intent and no live execution
    belongs to `cancel_convergence_candidates` instead)."""
    agg = MISSES[miss]()
    assert spec_local_stop([agg]) == []
    assert local_stop_candidates([agg], 16).items == ()
    # ... and it does not hide the real candidate beside it.
    other = request_cancel(local_running("run-2", "b1", T0), T0 + 1, CancelReason.USER)
    assert _items([agg, other], 16, None) == [("run-2", "b1")]


def test_stop_candidates_order_by_intent_time_then_run_id() -> None:
    a = request_cancel(local_running("run-b", "x1", T0), T0 + 9, CancelReason.USER)
    b = request_cancel(local_running("run-a", "x2", T0), T0 + 9, CancelReason.USER)
    c = request_cancel(local_running("run-c", "x3", T0), T0 + 3, CancelReason.TIMEOUT)
    assert _items([a, b, c], 16, None) == [("run-c", "x3"), ("run-a", "x2"), ("run-b", "x1")]
    assert _items([a, b, c], 2, None) == [("run-c", "x3"), ("run-a", "x2")]
    assert local_stop_candidates([a, b, c], 2).has_more
    assert _items([a, b, c], 16, (T0 + 9, "run-a")) == [("run-b", "x1")]


# -- receipt_cleanup_allowed (D-1, CAD-15) ---------------------------------------------------------
SEQUENCES = st.integers(0, 4)


@pytest.mark.spec("CAD-15")
@given(st.none() | st.sampled_from(AttemptStatus), st.none() | SEQUENCES, SEQUENCES)
def test_cleanup_deletes_only_receipts_of_settled_attempts_with_the_same_sequence(
    status: AttemptStatus | None, attempt_sequence: int | None, receipt_sequence: int
) -> None:
    """D-1: a receipt is deleted only when its Attempt is terminal (I-5, `lost` included) and
    has the receipt's callback sequence; a non-terminal Attempt's receipt is never deleted
    (CAD-15), and neither is one the database does not know."""
    allowed = receipt_cleanup_allowed(status, attempt_sequence, receipt_sequence)
    assert allowed == (status in SETTLED_ATTEMPTS and attempt_sequence == receipt_sequence)
    if status is None or not status.terminal:
        assert not allowed


@pytest.mark.spec("CAD-15")
@pytest.mark.parametrize("status", list(AttemptStatus))
def test_every_attempt_status_against_an_equal_sequence(status: AttemptStatus) -> None:
    assert receipt_cleanup_allowed(status, 1, 1) is (status in SETTLED_ATTEMPTS)
    assert receipt_cleanup_allowed(status, 1, 2) is False
    assert receipt_cleanup_allowed(status, 2, 1) is False


@pytest.mark.spec("CAD-15")
def test_an_unknown_attempt_keeps_its_receipt() -> None:
    """Nothing proves an Attempt the database does not know is settled."""
    for sequence in (0, 1, 7):
        assert receipt_cleanup_allowed(None, None, sequence) is False
        assert receipt_cleanup_allowed(None, sequence, sequence) is False


@pytest.mark.spec("CAD-15")
def test_cleanup_over_reached_attempts() -> None:
    """A running local Attempt keeps its own receipt; once L3 applied it, the receipt may go;
    a receipt of another activation (another sequence) of a settled Attempt stays."""
    running = local_running("run-1", "a1", T0)
    receipt = receipt_for(running, CompletionOutcome.SUCCEEDED)
    attempt = latest(running)
    assert receipt.callback_sequence == attempt.callback_sequence == 1
    assert not receipt_cleanup_allowed(attempt.status, attempt.callback_sequence, 1)
    done = latest(ok(apply(running, complete_cmd(running, receipt), T0 + 10)))
    assert done.status is AttemptStatus.SUCCEEDED
    assert receipt_cleanup_allowed(done.status, done.callback_sequence, 1)
    assert not receipt_cleanup_allowed(done.status, done.callback_sequence, 2)
    lost = latest(ok(apply(running, not_running_cmd(running), T0 + 10)))
    assert lost.status is AttemptStatus.LOST
    assert receipt_cleanup_allowed(lost.status, lost.callback_sequence, 1)


# -- launch_identity (D-1, LR-9) -------------------------------------------------------------------
@pytest.mark.parametrize("journaled", [None, "pid:9"])
@pytest.mark.parametrize("handle", [None, "pid:7"])
@pytest.mark.parametrize("status", list(AttemptStatus))
def test_the_identity_inspected_is_the_handle_then_the_journal(
    status: AttemptStatus, handle: str | None, journaled: str | None
) -> None:
    """§2.1 step 2, D-1, LR-9: the recorded handle (L2) wins; without it, the identity the
    launcher journaled before sending the command; with neither, a `starting` Attempt never ran
    (trusted `not_running`) and any other is inconsistent with L2 (`handle_missing`)."""
    attempt = Attempt("a1", "run-1", 1, status, "local", T0, executor_handle=handle)
    expected: str | Inspection
    if handle is not None:
        expected = handle
    elif journaled is not None:
        expected = journaled
    elif status is AttemptStatus.STARTING:
        expected = Inspection.NOT_RUNNING
    else:
        expected = Inspection.HANDLE_MISSING
    assert launch_identity(attempt, journaled) == expected


def test_launch_identity_on_reached_attempts() -> None:
    """A crash between L1 and L2 leaves `starting` without a handle: the journal line decides;
    after L2 the handle fact is inspected even when the journal says something else."""
    starting = latest(local_starting("run-1", "a1", T0))
    assert starting.status is AttemptStatus.STARTING
    assert starting.executor_handle is None
    assert launch_identity(starting, None) is Inspection.NOT_RUNNING
    assert launch_identity(starting, "pid:9") == "pid:9"
    running = latest(local_running("run-1", "a1", T0))
    assert running.executor_handle == "pid:7"
    assert launch_identity(running, None) == "pid:7"
    assert launch_identity(running, "pid:9") == "pid:7"


# -- startup_budget_exhausted (D-11) ---------------------------------------------------------------
def test_startup_budget_boundary_is_the_profile_total() -> None:
    """D-11: the count is of at most `total + 1` candidates; exactly `total` is within budget."""
    for profile in (Profile.EDGE, Profile.STANDALONE):
        budget = BUDGETS[profile].startup_recovery
        assert budget is not None
        total = budget.total_per_startup
        assert total == STARTUP_RECOVERY_TOTAL_MAX == 1024
        assert not startup_budget_exhausted(0, total)
        assert not startup_budget_exhausted(total, total)
        assert startup_budget_exhausted(total + 1, total)


@given(st.integers(0, 2_100), st.integers(1, 1_024))
def test_startup_budget_is_exhausted_iff_more_than_the_total(counted: int, total: int) -> None:
    assert startup_budget_exhausted(counted, total) is (counted > total)


# -- local_idle ------------------------------------------------------------------------------------
@given(
    st.dictionaries(st.sampled_from(RunStatus), st.integers(0, 3)),
    st.integers(0, 2),
    st.integers(0, 2),
)
def test_idle_iff_nothing_unsettled_due_or_watched(
    counts: dict[RunStatus, int], due: int, watched: int
) -> None:
    """`--until-idle`: no Run in a status that is not settled, no due schedule, no watched
    process; settled Runs (any number of them) do not matter."""
    unsettled = sum(n for status, n in counts.items() if status in UNSETTLED_RUNS)
    assert local_idle(counts, due, watched) is (unsettled == 0 and due == 0 and watched == 0)


@pytest.mark.parametrize("status", list(RunStatus))
def test_one_run_of_each_status(status: RunStatus) -> None:
    assert local_idle({status: 1}, 0, 0) is (status not in UNSETTLED_RUNS)
    assert local_idle({status: 0}, 0, 0) is True


def test_idle_needs_no_due_schedule_and_no_watched_process() -> None:
    settled = {RunStatus.SUCCEEDED: 5, RunStatus.FAILED: 2, RunStatus.CANCELLED: 1}
    assert local_idle({}, 0, 0)
    assert local_idle(settled, 0, 0)
    assert not local_idle(settled, 1, 0)
    assert not local_idle(settled, 0, 1)
    assert not local_idle({**settled, RunStatus.RETRY_WAIT: 1}, 0, 0)


# -- watched_after_startup -------------------------------------------------------------------------
#: §2.1 adoption only: LR-9 superseded LR-6 (a lost handle fact is now inspected through the
#: journaled identity, so `handle_missing` is left and reported like any `unknown`).
WATCHED = frozenset({Code.LIVE})


@pytest.mark.parametrize("code", list(Code), ids=lambda c: str(c.value))
def test_only_an_adopted_live_attempt_stays_watched(code: Code) -> None:
    """§2.1, D-1, LR-9: after startup recovery execution control keeps watching only an
    Attempt adopted as `live`; every other code (`handle_missing` included since LR-9) is
    false, whatever the outcome kind carrying it."""
    for outcome in (Replayed(code), Rejected(code), Raced(code)):
        assert watched_after_startup(outcome) is (code in WATCHED)


def _startup(agg: RunAggregate, evidence: object) -> Outcome:
    latest_attempt = latest(agg)
    command = RecoverLocalStartup(
        run_id=agg.run.run_id,
        attempt_id=latest_attempt.attempt_id,
        evidence=evidence,  # type: ignore[arg-type]
    )
    return apply(agg, command, agg.run.updated_at_ms + 1)


def test_watched_after_the_kernels_own_startup_outcomes() -> None:
    """The outcomes startup recovery really produces: adoption (`live`) is watched; `lost`,
    a completed receipt and every `unknown` reason (fail closed, reported) are not."""
    running = local_running("run-1", "a1", T0)
    starting = local_starting("run-2", "b1", T0)
    live = _startup(running, LiveEvidence())
    assert live == Replayed(Code.LIVE)
    assert watched_after_startup(live)
    lost = _startup(starting, NotRunningEvidence())
    assert isinstance(lost, Applied)
    assert lost.code is Code.LOST
    assert not watched_after_startup(lost)
    for agg in (running, starting):
        for reason in UnknownReason:
            unknown = _startup(agg, UnknownEvidence(reason))
            assert unknown == Rejected(Code(reason.value))
            assert not watched_after_startup(unknown)
