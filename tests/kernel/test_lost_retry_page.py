"""The lost-retry page: candidate selection and the page tally (SPEC §1.8.2, §0.3 re-check rule,
P-rules, B-25; RETRY-07, RETRY-12, RETRY-13, RETRY-14, RETRY-15).

`kernel.selection.lost_retry_candidates` is the oracle each runner's SQL is compared with
(RETRY-07/12/13/15 are CONF items; here the kernel side is checked against an independent
reading of §1.8.2 over many aggregates reached through kernel transitions). `kernel.lost_retry_page`
tallies one page's outcomes so every runner reports the same counts (RETRY-14).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import icontract
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import (
    Applied,
    AttemptStatus,
    CancelReason,
    Code,
    LostRetryStep,
    Outcome,
    PolicyDefinition,
    Raced,
    Rejected,
    Replayed,
    RunAggregate,
    RunKind,
    RunOwner,
    RunStatus,
    Safety,
    lost_retry_step,
)
from kernel.lost_retry_page import (
    CANDIDATE_ERROR,
    CandidateError,
    LostRetryPageResult,
    classify,
    stops_page,
    tally,
)
from kernel.selection import PageError, lost_retry_candidates
from tests.support.retry_fixtures import T0, Flow, policy, with_policy

RETRY_POLICY = policy(max_attempts=16, backoff_base_ms=1_000, backoff_max_ms=60_000)


# -- a pool of Runs in every relevant state, reached through kernel transitions ----------------
def _flow(
    run_id: str, start: int, provider_policy: PolicyDefinition | None = RETRY_POLICY, **kw: Any
) -> Flow:
    flow = Flow(now=T0 + start)
    flow.admit(provider_policy, run_id=run_id, **kw)
    return flow


def _lost(run_id: str, start: int, **kw: Any) -> Flow:
    flow = _flow(run_id, start, **kw)
    flow.to_lost()
    return flow


def _waiting(run_id: str, start: int, extra_ms: int = 0) -> Flow:
    flow = _lost(run_id, start)
    flow.lost_retry(f"{run_id}-a2", flow.now + extra_ms)
    assert flow.aggregate.run.status is RunStatus.RETRY_WAIT
    return flow


def _build_pool() -> list[RunAggregate]:
    pool: list[RunAggregate] = []
    # eligible `lost` Runs, two of them tied on finish time (ordered by run id)
    for run_id, start in (("L-b", 0), ("L-a", 0), ("L-c", 5_000), ("L-d", 90_000), ("L-e", 3)):
        pool.append(_lost(run_id, start).aggregate)
    pool.append(_lost("L-nopolicy", 7, provider_policy=None).aggregate)
    # eligible `retry_wait` Runs, due at various times (some scheduled late)
    for run_id, start, extra in (
        ("W-a", 0, 0),
        ("W-b", 0, 0),
        ("W-c", 40_000, 0),
        ("W-d", 2_000, 500_000),
        ("W-e", 120_000, 0),
    ):
        pool.append(_waiting(run_id, start, extra).aggregate)
    # never selected (RETRY-12 and intent): other states, workflow, legacy, intent
    queued = _flow("X-queued", 0)
    pool.append(queued.aggregate)
    dispatching = _flow("X-dispatching", 0)
    dispatching.grant()
    pool.append(dispatching.aggregate)
    starting = _flow("X-starting", 0)
    starting.grant()
    starting.starting()
    pool.append(starting.aggregate)
    requeued = _waiting("X-requeued", 0)
    policy_row = requeued.aggregate.policy
    assert policy_row is not None
    assert policy_row.next_attempt_at_ms is not None
    requeued.lost_retry("X-requeued-a2", policy_row.next_attempt_at_ms)
    assert requeued.aggregate.latest_attempt is not None
    assert requeued.aggregate.latest_attempt.status is AttemptStatus.CLAIMED
    pool.append(requeued.aggregate)
    failed = _lost("X-failed", 0, provider_policy=None)
    failed.lost_retry("X-failed-a2")
    pool.append(failed.aggregate)
    pool.append(_lost("X-workflow", 0, kind=RunKind.WORKFLOW).aggregate)
    legacy = _lost("X-legacy", 0).aggregate
    # A legacy Run cannot be granted a lease (T1 is runtime-only), so it is made legacy here.
    pool.append(
        dataclasses.replace(legacy, run=dataclasses.replace(legacy.run, owner=RunOwner.LEGACY))
    )
    for flow in (_lost("X-lost-intent", 0), _waiting("X-wait-intent", 0)):
        flow.request_cancel(CancelReason.USER)
        pool.append(flow.aggregate)
    cancelled = _lost("X-cancelled", 0)
    cancelled.request_cancel(CancelReason.TIMEOUT)
    cancelled.converge()
    pool.append(cancelled.aggregate)
    return pool


POOL = _build_pool()
BY_ID = {agg.run.run_id: agg for agg in POOL}
HORIZON = max(agg.run.updated_at_ms for agg in POOL) + 200_000


def _spec_eligible(agg: RunAggregate) -> bool:
    """§1.8.2 common rule, read independently: runtime-owned, ordinary, no intent, latest
    Attempt `lost`, Run `lost` or `retry_wait`."""
    run = agg.run
    latest = agg.attempts[-1] if agg.attempts else None
    return (
        run.owner is RunOwner.RUNTIME
        and run.kind is RunKind.ORDINARY
        and run.cancel_requested_at_ms is None
        and run.status in (RunStatus.LOST, RunStatus.RETRY_WAIT)
        and latest is not None
        and latest.status is AttemptStatus.LOST
    )


def _spec_order(aggs: list[RunAggregate], now: int) -> list[str]:
    """B-25: `lost` by `(latest.finished_at_ms, run_id)`, then due `retry_wait` by
    `(next_attempt_at_ms, run_id)`; a not-yet-due `retry_wait` Run is never listed (P-6)."""
    lost: list[tuple[int, str]] = []
    waiting: list[tuple[int, str]] = []
    for agg in aggs:
        if not _spec_eligible(agg):
            continue
        if agg.run.status is RunStatus.LOST:
            finished = agg.attempts[-1].finished_at_ms
            assert finished is not None
            lost.append((finished, agg.run.run_id))
        else:
            assert agg.policy is not None
            assert agg.policy.next_attempt_at_ms is not None
            if agg.policy.next_attempt_at_ms <= now:
                waiting.append((agg.policy.next_attempt_at_ms, agg.run.run_id))
    return [r for _, r in sorted(lost)] + [r for _, r in sorted(waiting)]


@pytest.mark.spec("RETRY-12", "RETRY-15")
def test_pool_covers_every_kind_of_candidate() -> None:
    """The pool is only useful if it has eligible `lost`, eligible `retry_wait` and ineligible
    Runs, and a tie on the finish time."""
    statuses = Counter((agg.run.status, _spec_eligible(agg)) for agg in POOL)
    assert statuses[(RunStatus.LOST, True)] >= 5
    assert statuses[(RunStatus.RETRY_WAIT, True)] >= 5
    assert sum(n for (_, ok), n in statuses.items() if not ok) >= 10
    assert BY_ID["L-a"].attempts[-1].finished_at_ms == BY_ID["L-b"].attempts[-1].finished_at_ms


@st.composite
def pages(draw: st.DrawFn) -> tuple[list[RunAggregate], int, int]:
    chosen = draw(st.lists(st.sampled_from(POOL), unique_by=lambda a: a.run.run_id))
    order = draw(st.permutations(chosen))
    now = draw(st.integers(T0, HORIZON) | st.sampled_from([T0, HORIZON]))
    limit = draw(st.integers(1, 8) | st.sampled_from([16, 64]))
    return list(order), now, limit


@pytest.mark.spec("RETRY-07", "RETRY-12", "RETRY-13", "RETRY-15")
@settings(max_examples=200)
@given(pages())
def test_lost_retry_candidates_match_the_spec_reading(
    page_input: tuple[list[RunAggregate], int, int],
) -> None:
    """§1.8.2 / P-2 / P-6: for any set of Runs (in any input order), observation time and
    limit 1..64, the page is exactly the first `limit` eligible candidates in B-25 order and
    `has_more` is true exactly when more eligible ones exist. Hence RETRY-07 (no `retry_wait`
    Run before its `next_attempt_at_ms`), RETRY-12 (no Workflow, non-runtime, cancelled-intent
    or not-`lost`-latest Run), RETRY-13 (at most `limit` items, exact `has_more`) and RETRY-15
    (every `lost` before every `retry_wait`)."""
    aggs, now, limit = page_input
    page = lost_retry_candidates(aggs, now, limit)
    expected = _spec_order(aggs, now)
    ids = [c.run_id for c in page.items]
    assert ids == expected[:limit]
    assert len(page.items) <= limit
    assert page.has_more is (len(expected) > limit)
    statuses = [BY_ID[r].run.status for r in ids]
    assert statuses == sorted(statuses, key=lambda s: s is RunStatus.RETRY_WAIT)
    for candidate in page.items:
        agg = BY_ID[candidate.run_id]
        assert _spec_eligible(agg)
        latest = agg.latest_attempt
        assert latest is not None
        assert candidate.attempt_id == latest.attempt_id
        if agg.run.status is RunStatus.RETRY_WAIT:
            assert agg.policy is not None
            assert agg.policy.next_attempt_at_ms is not None
            assert agg.policy.next_attempt_at_ms <= now
    assert page.cursor == (page.items[-1].key if page.items else None)
    # The same rows in another order give the same page (total, stable keyset order).
    assert lost_retry_candidates(list(reversed(aggs)), now, limit) == page


@pytest.mark.spec("RETRY-13")
@pytest.mark.parametrize("limit", [0, -1, 65, 1_000])
def test_page_size_outside_1_to_64_is_refused(limit: int) -> None:
    """P-1: a page size outside 1..64 is an error, never a silently clamped page."""
    with pytest.raises(PageError):
        lost_retry_candidates(POOL, HORIZON, limit)


@pytest.mark.spec("RETRY-13")
def test_page_size_must_be_an_integer() -> None:
    """P-1: a boolean or non-integer page size is an error."""
    with pytest.raises(PageError):
        lost_retry_candidates(POOL, HORIZON, True)
    with pytest.raises(PageError):
        lost_retry_candidates(POOL, HORIZON, 2.0)  # type: ignore[arg-type]


@pytest.mark.spec("RETRY-07")
def test_retry_wait_is_returned_from_its_due_time_on() -> None:
    """RETRY-07 / P-6 at the boundary: one ms before `next_attempt_at_ms` the Run is absent,
    at `next_attempt_at_ms` it is present."""
    agg = BY_ID["W-c"]
    assert agg.policy is not None
    assert agg.policy.next_attempt_at_ms is not None
    due = agg.policy.next_attempt_at_ms
    assert lost_retry_candidates([agg], due - 1, 16).items == ()
    assert [c.run_id for c in lost_retry_candidates([agg], due, 16).items] == ["W-c"]


# -- the tally (RETRY-14) ----------------------------------------------------------------------
def _representative_outcomes() -> dict[str, list[Outcome | CandidateError]]:
    """Real kernel outcomes for every disposition, plus the non-applied results, by bucket."""
    lost = BY_ID["L-a"]
    waiting = BY_ID["W-a"]
    assert waiting.policy is not None
    assert waiting.policy.next_attempt_at_ms is not None
    due = max(waiting.policy.next_attempt_at_ms, waiting.run.updated_at_ms)
    t_lost = lost.run.updated_at_ms

    def step(agg: RunAggregate, now: int) -> Outcome:
        return lost_retry_step(agg, LostRetryStep(run_id=agg.run.run_id, new_attempt_id="n1"), now)

    second = _waiting("E-second", 0)
    second_policy = second.aggregate.policy
    assert second_policy is not None
    assert second_policy.next_attempt_at_ms is not None
    requeued = second.lost_retry("E-second-a2", second_policy.next_attempt_at_ms)
    assert isinstance(requeued, Applied)
    second.to_lost()
    exhausted = with_policy(second.aggregate, max_attempts=2)  # Attempt 2 of 2 is lost
    return {
        "scheduled": [step(lost, t_lost)],
        "requeued": [step(waiting, due)],
        "failed": [
            step(BY_ID["L-nopolicy"], BY_ID["L-nopolicy"].run.updated_at_ms),
            step(with_policy(lost, safety=Safety.UNKNOWN), t_lost),
            step(exhausted, exhausted.run.updated_at_ms),
            step(with_policy(lost, max_attempts=1), t_lost),
        ],
        "raced": [
            step(BY_ID["X-queued"], HORIZON),
            step(waiting, waiting.run.updated_at_ms),  # NOT_DUE met on the re-read
            step(lost, t_lost - 1),  # CLOCK_REGRESSION met on the re-read
            Raced(Code.NOT_ELIGIBLE),
        ],
        "errored": [CANDIDATE_ERROR],
    }


BUCKETS = _representative_outcomes()


@pytest.mark.spec("RETRY-14")
def test_representative_outcomes_are_what_they_claim() -> None:
    """The fixtures above really are the kernel results they stand for."""
    assert [o.code for o in BUCKETS["scheduled"] if isinstance(o, Applied)] == [Code.SCHEDULED]
    assert [o.code for o in BUCKETS["requeued"] if isinstance(o, Applied)] == [Code.REQUEUED]
    assert {o.code for o in BUCKETS["failed"] if isinstance(o, Applied)} == {
        Code.FAILED_DISABLED,
        Code.FAILED_UNSAFE,
        Code.FAILED_EXHAUSTED,
    }
    assert BUCKETS["raced"][:3] == [
        Raced(Code.NOT_ELIGIBLE),
        Rejected(Code.NOT_DUE),
        Rejected(Code.CLOCK_REGRESSION),
    ]


@pytest.mark.spec("RETRY-14")
@pytest.mark.parametrize("bucket", sorted(BUCKETS))
def test_classify_puts_each_outcome_in_its_counter(bucket: str) -> None:
    """§1.8.2 / §0.3 re-check rule: `scheduled`, `requeued` and the three failures count as
    themselves (`failed`); `Raced` and a `NOT_DUE` or `CLOCK_REGRESSION` rejection met on the
    re-read count as `raced`; a storage failure (`CANDIDATE_ERROR`) counts as `errored`."""
    for outcome in BUCKETS[bucket]:
        assert classify(outcome) == bucket


_ANY_OUTCOME = st.sampled_from(
    [o for outcomes in BUCKETS.values() for o in outcomes]
    + [Rejected(Code.ATTEMPT_ID_CONFLICT), Replayed(Code.EXISTING), Rejected(Code.NOT_DUE)]
)


@pytest.mark.spec("RETRY-14")
@given(st.integers(1, 64), st.data(), st.booleans())
def test_tally_is_balanced_for_any_outcome_list(
    limit: int, data: st.DataObject, has_more: bool
) -> None:
    """RETRY-14: for any list of at most `limit` outcomes, `scheduled + requeued + failed +
    raced + errored = scanned = len(outcomes) <= limit`, each counter equals the number of
    outcomes `classify` puts in it, and `has_more` is passed through."""
    outcomes = data.draw(st.lists(_ANY_OUTCOME, max_size=limit))
    result = tally(outcomes, limit=limit, has_more=has_more)
    assert result.balanced
    assert result.scanned == len(outcomes) <= limit
    assert (
        result.scheduled + result.requeued + result.failed + result.raced + result.errored
        == result.scanned
    )
    counts = Counter(classify(o) for o in outcomes)
    assert (result.scheduled, result.requeued, result.failed, result.raced, result.errored) == (
        counts["scheduled"],
        counts["requeued"],
        counts["failed"],
        counts["raced"],
        counts["errored"],
    )
    assert result.has_more is has_more


@pytest.mark.spec("RETRY-17")
@given(_ANY_OUTCOME, st.booleans())
def test_a_fail_closed_page_stops_on_every_outcome_that_would_count_errored(
    outcome: Any, fail_closed: bool
) -> None:
    """RETRY-17 with Appendix E-5: a cluster (fail-closed) page stops on every candidate that
    would be counted `errored`, a storage failure and an `ATTEMPT_ID_CONFLICT` alike, so a
    cluster page never reports `errored`; a local page stops on nothing."""
    assert stops_page(outcome, fail_closed=fail_closed) is (
        fail_closed and classify(outcome) == "errored"
    )
    if fail_closed:
        assert stops_page(Rejected(Code.ATTEMPT_ID_CONFLICT), fail_closed=True)
        assert stops_page(CANDIDATE_ERROR, fail_closed=True)


@pytest.mark.spec("RETRY-14")
@given(st.integers(1, 64), st.integers(1, 5))
def test_tally_refuses_more_outcomes_than_the_limit(limit: int, extra: int) -> None:
    """P-2: a page never holds more than `limit` items; a caller that tallies more is a bug
    and the contract fails instead of reporting `scanned > limit`."""
    with pytest.raises(icontract.ViolationError):
        tally([CANDIDATE_ERROR] * (limit + extra), limit=limit, has_more=False)


@pytest.mark.spec("RETRY-14")
def test_balanced_detects_an_unbalanced_result() -> None:
    """The `balanced` check can fail: a result whose counters do not add up is not balanced."""
    bad = LostRetryPageResult(
        scanned=3, scheduled=1, requeued=1, failed=0, raced=0, errored=0, has_more=False
    )
    assert not bad.balanced


@pytest.mark.spec("RETRY-14", "RETRY-09", "RETRY-13")
@settings(max_examples=100)
@given(pages())
def test_a_page_driven_through_the_kernel_tallies_and_a_second_pass_is_raced(
    page_input: tuple[list[RunAggregate], int, int],
) -> None:
    """RETRY-14 end to end over a store as of the observation time: each selected candidate is
    stepped once at the page's observation time (P-5); the tally is balanced with
    `scanned = len(page) <= limit`, `lost` candidates are scheduled or failed and due
    `retry_wait` ones requeued. Replaying the whole page against the
    committed aggregates (a lost response) is counted `raced`, except a schedule whose retry is
    already due, which requeues Attempt N+1 and nothing beyond it (RETRY-09)."""
    chosen, now, limit = page_input
    # The store as of `now`: no row was written after the pass's observation time.
    aggs = [a for a in chosen if a.run.updated_at_ms <= now]
    page = lost_retry_candidates(aggs, now, limit)
    current = {a.run.run_id: a for a in aggs}
    first: list[Outcome | CandidateError] = []
    for candidate in page.items:
        agg = current[candidate.run_id]
        command = LostRetryStep(run_id=candidate.run_id, new_attempt_id=f"{candidate.run_id}-n")
        outcome = lost_retry_step(agg, command, now)
        first.append(outcome)
        if isinstance(outcome, Applied):
            current[candidate.run_id] = outcome.aggregate
    result = tally(first, limit=limit, has_more=page.has_more)
    assert result.balanced
    assert result.scanned == len(page.items) <= limit
    n_lost = sum(BY_ID[c.run_id].run.status is RunStatus.LOST for c in page.items)
    assert result.scheduled + result.failed == n_lost
    assert result.requeued == len(page.items) - n_lost
    assert result.raced == result.errored == 0

    second: list[Outcome | CandidateError] = []
    for candidate, previous in zip(page.items, first, strict=True):
        agg = current[candidate.run_id]
        command = LostRetryStep(run_id=candidate.run_id, new_attempt_id=f"{candidate.run_id}-n")
        outcome = lost_retry_step(agg, command, now)
        second.append(outcome)
        if isinstance(outcome, Applied):
            assert isinstance(previous, Applied)
            assert previous.code is Code.SCHEDULED
            assert outcome.code is Code.REQUEUED
            original = BY_ID[candidate.run_id].latest_attempt
            assert original is not None
            assert outcome.aggregate.attempts[-1].number == original.number + 1
    replay = tally(second, limit=limit, has_more=page.has_more)
    assert replay.balanced
    assert replay.scanned == result.scanned
    assert replay.scheduled == replay.failed == replay.errored == 0
