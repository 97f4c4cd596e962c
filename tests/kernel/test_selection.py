"""Candidate selection oracles (SPEC §1.8.2, §1.9, §2.2, §2.3, §3.16, P-rules) against
independent readings of the SPEC.

Every selection predicate below is written again from the SPEC text, without calling the
kernel's own eligibility helpers, and compared with `kernel.selection` over sets of Runs reached
through the kernel's transitions (`tests/support/recovery_fixtures.py`).
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import (
    Applied,
    AttemptStatus,
    Code,
    FailOrphanedCreated,
    LeaseStatus,
    Raced,
    ReleaseReason,
    RunAggregate,
    RunKind,
    RunOwner,
    RunStatus,
    apply,
    fail_orphaned_created,
)
from kernel.entities import Attempt
from kernel.selection import (
    Page,
    PageError,
    cancel_convergence_candidates,
    check_limit,
    lease_expiry_candidates,
    local_dispatch_candidates,
    local_startup_backlog_exceeds,
    local_startup_candidates,
    lost_retry_candidates,
    orphaned_created_candidates,
    runtime_recovery_candidates,
)
from kernel.specs.limits import STARTUP_RECOVERY_TOTAL_MAX
from tests.support.recovery_fixtures import (
    LOCAL,
    OBSERVED,
    T0,
    admit,
    aggregate_sets,
    create_cmd,
    local_running,
    local_starting,
    ok,
    relabel_legacy,
    remote_started,
    rename,
)
from tests.support.sim import START_MS as SIM_START
from tests.support.sim import Sim, run_random

Item = tuple[str, str | None]  # (run_id, attempt_id) of one selected candidate
LIMITS = st.one_of(st.integers(1, 6), st.integers(1, 64))

_LIVE = frozenset({AttemptStatus.CLAIMED, AttemptStatus.STARTING, AttemptStatus.RUNNING})
_STARTED = frozenset({AttemptStatus.STARTING, AttemptStatus.RUNNING})


# -- the SPEC's selection rules, written independently ---------------------------------------------
def _live_attempt(agg: RunAggregate) -> Attempt | None:
    """I-1: at most one non-terminal Attempt, and it is the latest."""
    live = [a for a in agg.attempts if a.status in _LIVE]
    return live[-1] if live else None


def _runtime_ordinary(agg: RunAggregate) -> bool:
    return agg.run.owner is RunOwner.RUNTIME and agg.run.kind is RunKind.ORDINARY


def spec_runtime_recovery(aggs: Sequence[RunAggregate], now: int) -> list[Item]:
    """§2.3: runtime, not Workflow, Run in dispatching|running|lost, Attempt claimed|starting|
    running, lease missing (no `leased` row) or leased and expired at `now`, not a pristine
    claimed Attempt (B-33: no binding, no lease row of any status, no offer, no start facts).
    Order (expires_at nulls first, attempt_id) (B-35)."""
    rows: list[tuple[tuple[bool, int, str], Item]] = []
    for agg in aggs:
        run = agg.run
        attempt = _live_attempt(agg)
        if not _runtime_ordinary(agg) or attempt is None:
            continue
        if run.status not in (RunStatus.DISPATCHING, RunStatus.RUNNING, RunStatus.LOST):
            continue
        lease_rows = [x for x in agg.leases if x.attempt_id == attempt.attempt_id]
        leased = [x for x in lease_rows if x.status is LeaseStatus.LEASED]
        if leased and leased[0].expires_at_ms > now:
            continue
        pristine = (
            attempt.status is AttemptStatus.CLAIMED
            and attempt.worker_id is None
            and attempt.offer_id is None
            and attempt.lease_generation is None
            and not lease_rows
            and attempt.started_at_ms is None
            and attempt.executor_handle is None
        )
        if pristine:
            continue
        expires = leased[0].expires_at_ms if leased else None
        key = (expires is not None, expires or 0, attempt.attempt_id)
        rows.append((key, (run.run_id, attempt.attempt_id)))
    return [item for _, item in sorted(rows)]


def spec_local_startup(aggs: Sequence[RunAggregate], now: int) -> list[Item]:
    """§2.2: ordinary runtime Runs whose latest Attempt is a local-executor Attempt (local
    Attempts never hold a lease, B-22) in starting|running; keyset (attempt_id)."""
    rows: list[tuple[str, Item]] = []
    for agg in aggs:
        latest = agg.latest_attempt
        if (
            _runtime_ordinary(agg)
            and latest is not None
            and latest.status in _STARTED
            and latest.lease_generation is None
        ):
            rows.append((latest.attempt_id, (agg.run.run_id, latest.attempt_id)))
    return [item for _, item in sorted(rows)]


def spec_lost_retry(aggs: Sequence[RunAggregate], now: int) -> list[Item]:
    """§1.8.2: runtime, ordinary, no intent, latest Attempt lost; `lost` Runs by
    (latest.finished_at, run_id), then due `retry_wait` Runs by (next_attempt_at, run_id)."""
    lost: list[tuple[tuple[int, str], Item]] = []
    waiting: list[tuple[tuple[int, str], Item]] = []
    for agg in aggs:
        run = agg.run
        latest = agg.latest_attempt
        if (
            not _runtime_ordinary(agg)
            or run.cancel_requested_at_ms is not None
            or latest is None
            or latest.status is not AttemptStatus.LOST
        ):
            continue
        item = (run.run_id, latest.attempt_id)
        if run.status is RunStatus.LOST:
            assert latest.finished_at_ms is not None  # V-6
            lost.append(((latest.finished_at_ms, run.run_id), item))
        elif run.status is RunStatus.RETRY_WAIT:
            assert agg.policy is not None
            due = agg.policy.next_attempt_at_ms
            assert due is not None  # I-3
            if due <= now:
                waiting.append(((due, run.run_id), item))
    return [item for _, item in sorted(lost)] + [item for _, item in sorted(waiting)]


def spec_lease_expiry(aggs: Sequence[RunAggregate], now: int) -> list[Item]:
    """§3.16: `leased` leases with expires_at <= now of runtime-owned, active Attempts;
    keyset (expires_at, attempt_id)."""
    rows: list[tuple[tuple[int, str], Item]] = []
    for agg in aggs:
        for lease in agg.leases:
            attempt = agg.attempt(lease.attempt_id)
            if (
                agg.run.owner is RunOwner.RUNTIME
                and attempt is not None
                and attempt.status in _LIVE
                and lease.status is LeaseStatus.LEASED
                and lease.expires_at_ms <= now
            ):
                key = (lease.expires_at_ms, lease.attempt_id)
                rows.append((key, (agg.run.run_id, lease.attempt_id)))
    return [item for _, item in sorted(rows)]


def spec_orphaned_created(aggs: Sequence[RunAggregate], process_started: int) -> list[Item]:
    """§2.2 (B-30): `created` Runs created before the process started, runtime-owned and not
    Workflow Runs (ordinary startup recovery never selects one, REC-07); keyset
    (created_at, run_id)."""
    rows = [
        ((agg.run.created_at_ms, agg.run.run_id), (agg.run.run_id, None))
        for agg in aggs
        if agg.run.status is RunStatus.CREATED
        and _runtime_ordinary(agg)
        and agg.run.created_at_ms < process_started
    ]
    return [item for _, item in sorted(rows)]


def spec_cancel_convergence(aggs: Sequence[RunAggregate], now: int) -> list[Item]:
    """§1.9: runtime ordinary Runs with an intent and no live execution (created, queued, lost,
    retry_wait, or dispatching with a claimed Attempt; E-1: or a dispatching / running Run whose
    starting / running Attempt's current lease was released `lease_expired`, T9); order
    (cancel_requested_at, run_id)."""
    rows: list[tuple[tuple[int, str], Item]] = []
    for agg in aggs:
        run = agg.run
        latest = agg.latest_attempt
        current = (
            agg.lease(latest.attempt_id, latest.lease_generation)
            if latest is not None and latest.lease_generation is not None
            else None
        )
        revoked = (
            run.status in (RunStatus.DISPATCHING, RunStatus.RUNNING)
            and latest is not None
            and latest.status in (AttemptStatus.STARTING, AttemptStatus.RUNNING)
            and current is not None
            and current.status is LeaseStatus.RELEASED
            and current.release_reason is ReleaseReason.LEASE_EXPIRED
        )
        no_live = (
            run.status
            in (
                RunStatus.CREATED,
                RunStatus.QUEUED,
                RunStatus.LOST,
                RunStatus.RETRY_WAIT,
            )
            or (
                run.status is RunStatus.DISPATCHING
                and latest is not None
                and latest.status is AttemptStatus.CLAIMED
            )
            or revoked
        )
        if _runtime_ordinary(agg) and run.cancel_requested_at_ms is not None and no_live:
            rows.append(((run.cancel_requested_at_ms, run.run_id), (run.run_id, None)))
    return [item for _, item in sorted(rows)]


def spec_local_dispatch(aggs: Sequence[RunAggregate], now: int) -> list[Item]:
    """§1.8.3 (D-13): the latest claimed Attempt of an uncancelled runtime queued Run with the
    local executor type; key (queued_at, attempt_created_at, attempt_id)."""
    rows: list[tuple[tuple[int, int, str], Item]] = []
    for agg in aggs:
        run = agg.run
        latest = agg.latest_attempt
        if (
            run.owner is RunOwner.RUNTIME
            and run.status is RunStatus.QUEUED
            and run.cancel_requested_at_ms is None
            and latest is not None
            and latest.status is AttemptStatus.CLAIMED
            and latest.executor_type == LOCAL
        ):
            assert run.queued_at_ms is not None
            key = (run.queued_at_ms, latest.created_at_ms, latest.attempt_id)
            rows.append((key, (run.run_id, latest.attempt_id)))
    return [item for _, item in sorted(rows)]


# -- the sources under test, behind one calling convention ---------------------------------------
Call = Callable[[Sequence[RunAggregate], int, int, Any], "Page[Any]"]


@dataclass(frozen=True)
class Source:
    name: str
    call: Call
    spec: Callable[[Sequence[RunAggregate], int], list[Item]]
    keyset: bool  # takes a cursor (`after`); the others keep none between calls


SOURCES: tuple[Source, ...] = (
    Source(
        "runtime_recovery",
        lambda aggs, now, limit, after: runtime_recovery_candidates(aggs, now, limit),
        spec_runtime_recovery,
        keyset=False,
    ),
    Source(
        "lost_retry",
        lambda aggs, now, limit, after: lost_retry_candidates(aggs, now, limit),
        spec_lost_retry,
        keyset=False,
    ),
    Source(
        "cancel_convergence",
        lambda aggs, now, limit, after: cancel_convergence_candidates(aggs, limit),
        spec_cancel_convergence,
        keyset=False,
    ),
    Source(
        "local_startup",
        lambda aggs, now, limit, after: local_startup_candidates(aggs, limit, after),
        spec_local_startup,
        keyset=True,
    ),
    Source(
        "orphaned_created",
        orphaned_created_candidates,
        spec_orphaned_created,
        keyset=True,
    ),
    Source(
        "local_dispatch",
        lambda aggs, now, limit, after: local_dispatch_candidates(aggs, LOCAL, limit, after),
        spec_local_dispatch,
        keyset=True,
    ),
    Source(
        "lease_expiry",
        lease_expiry_candidates,
        spec_lease_expiry,
        keyset=True,
    ),
)


def _items(page: Page[Any]) -> list[Item]:
    return [(c.run_id, c.attempt_id) for c in page.items]


# -- P-1 ------------------------------------------------------------------------------------------
@pytest.mark.spec("REC-02", "RETRY-13")
@pytest.mark.parametrize("bad", [0, 65, -1, 1_000, 2**70, True, False, 1.0, 16.0, "16", None])
def test_check_limit_rejects_out_of_range_and_non_integers(bad: object) -> None:
    """P-1: a page size is an integer 1..64; 0, 65, bools and non-integers raise `PageError`
    naming `limit`, and so does every source given such a limit (before reading anything)."""
    with pytest.raises(PageError) as info:
        check_limit(bad)  # type: ignore[arg-type]
    assert info.value.field == "limit"
    assert str(info.value).startswith("limit:")
    for source in SOURCES:
        with pytest.raises(PageError) as from_source:
            source.call([], T0, bad, None)  # type: ignore[arg-type]
        assert from_source.value.field == "limit", source.name


@pytest.mark.spec("REC-02", "RETRY-13")
@given(st.integers(-(2**16), 2**16))
def test_check_limit_accepts_exactly_1_to_64(limit: int) -> None:
    """P-1: `check_limit` returns the limit unchanged iff 1 <= limit <= 64."""
    if 1 <= limit <= 64:
        assert check_limit(limit) == limit
    else:
        with pytest.raises(PageError, match=r"^limit:"):
            check_limit(limit)


# -- P-2, P-3, P-6 for every source ----------------------------------------------------------------
def _check_first_pages(aggs: Sequence[RunAggregate], now: int, limit: int) -> None:
    for source in SOURCES:
        expected = source.spec(aggs, now)
        page = source.call(aggs, now, limit, None)
        assert len(page.items) <= limit, source.name
        assert _items(page) == expected[:limit], source.name
        assert page.has_more == (len(expected) > limit), source.name
        assert source.call(list(reversed(aggs)), now, limit, None) == page, source.name
        # P-2 with a source that keeps no cursor: calling again is the same page (REC-02).
        assert source.call(aggs, now, limit, None) == page, source.name


@pytest.mark.spec("REC-01", "REC-02", "RETRY-07", "RETRY-12", "RETRY-13", "RETRY-15")
@given(aggregate_sets(), OBSERVED, LIMITS)
def test_every_source_returns_exactly_the_first_limit_eligible(
    aggs: list[RunAggregate], now: int, limit: int
) -> None:
    """P-2/P-6 for every source: the page is exactly the first `limit` eligible items in the
    SPEC's total order (so at most `limit`, every item eligible at `now`, no not-yet-due
    `retry_wait` Run, every `lost` before every `retry_wait`), `has_more` is exactly "more
    eligible items exist", and the result does not depend on the order rows are read in."""
    _check_first_pages(aggs, now, limit)


@pytest.mark.spec("REC-01", "REC-02", "RETRY-13")
@given(st.data(), st.integers(0, 4), st.integers(1, 4))
def test_every_source_on_simulated_runs(data: st.DataObject, runs: int, limit: int) -> None:
    """As above, over Runs produced by random simulator walks (commands, replays, stale
    fences, clock steps), each renamed to its own Run id."""
    aggs: list[RunAggregate] = []
    for i in range(runs):
        sim = run_random(data, Sim(), 12)
        if sim.agg is not None:
            aggs.append(rename(sim.agg, f"s{i}"))
    now = data.draw(st.integers(SIM_START, SIM_START + 400_000), label="now")
    _check_first_pages(aggs, now, limit)


@pytest.mark.spec("REC-02", "RETRY-13")
@given(aggregate_sets(), OBSERVED, st.integers(1, 5))
def test_keyset_pages_partition_the_eligible_set_in_order(
    aggs: list[RunAggregate], now: int, limit: int
) -> None:
    """P-3: following the cursor (the key of the last item) page by page visits every eligible
    item exactly once, in order; every page holds at most `limit` items strictly after the
    cursor, and `has_more` is false exactly on the page that ends the set."""
    for source in SOURCES:
        if not source.keyset:
            continue
        expected = source.spec(aggs, now)
        seen: list[Item] = []
        cursor: Any = None
        for _ in range(len(expected) + 1):
            page = source.call(aggs, now, limit, cursor)
            assert len(page.items) <= limit, source.name
            if cursor is not None:
                assert all(c.key > cursor for c in page.items), source.name
            seen.extend(_items(page))
            assert page.has_more == (len(seen) < len(expected)), source.name
            if not page.has_more:
                break
            assert page.cursor is not None
            cursor = page.cursor
        assert seen == expected, source.name
        assert len(set(seen)) == len(seen), source.name


# -- §2.3 runtime recovery source (REC-01, REC-02, REC-07) -----------------------------------------
@pytest.mark.spec("REC-01", "REC-07")
@given(aggregate_sets(), OBSERVED)
def test_runtime_source_never_selects_workflow_pristine_created_or_live(
    aggs: list[RunAggregate], now: int
) -> None:
    """REC-01/REC-07: the cluster source never returns a Workflow Run, a non-runtime Run, a
    `created` Run, a pristine `claimed` Attempt or an Attempt whose lease is still live."""
    page = runtime_recovery_candidates(aggs, now, 64)
    by_run = {a.run.run_id: a for a in aggs}
    for candidate in page.items:
        agg = by_run[candidate.run_id]
        assert agg.run.kind is RunKind.ORDINARY
        assert agg.run.owner is RunOwner.RUNTIME
        assert agg.run.status is not RunStatus.CREATED
        attempt = agg.attempt(candidate.attempt_id or "")
        assert attempt is not None
        assert attempt.status in _LIVE
        assert attempt.status is not AttemptStatus.CLAIMED or any(agg.leases_of(attempt.attempt_id))
        leased = agg.leased_lease(attempt.attempt_id)
        assert leased is None or leased.expires_at_ms <= now


@pytest.mark.spec("REC-01", "REC-02")
def test_runtime_source_orders_missing_leases_first_then_expiry_then_attempt_id() -> None:
    """B-35: order `(lease.expires_at_ms nulls first, attempt_id)`; `limit + 1` rows decide
    `has_more`: with 4 eligible rows, limit 3 has more and limit 4 does not."""
    at = T0
    expired_late = remote_started("r1", "b-late", at, running=True, duration_ms=60_000)
    expired_early_b = remote_started("r2", "b-early", at, running=False, duration_ms=5_000)
    expired_early_a = remote_started("r3", "a-early", at, running=True, duration_ms=5_000)
    no_lease = local_running("r4", "z-local", at)  # a started Attempt without any lease
    live = remote_started("r5", "a-live", at + 100_000, running=True)
    pristine = admit("r6", "a-pristine", at)
    aggs = [expired_late, live, expired_early_b, pristine, no_lease, expired_early_a]
    now = at + 60_000
    page = runtime_recovery_candidates(aggs, now, 16)
    assert [c.attempt_id for c in page.items] == ["z-local", "a-early", "b-early", "b-late"]
    assert not page.has_more
    three = runtime_recovery_candidates(aggs, now, 3)
    assert [c.attempt_id for c in three.items] == ["z-local", "a-early", "b-early"]
    assert three.has_more
    assert not runtime_recovery_candidates(aggs, now, 4).has_more


@pytest.mark.spec("REC-07")
@given(
    aggregate_sets(
        min_size=1,
        scenarios=("remote_starting", "remote_running", "local_starting", "local_running"),
        kinds=(RunKind.WORKFLOW,),
        legacy=False,
        cancel=False,
    ),
    st.integers(T0 + 2_000_000, T0 + 3_000_000),
)
def test_with_only_workflow_runs_ordinary_recovery_scans_nothing(
    aggs: list[RunAggregate], now: int
) -> None:
    """REC-07: with only Workflow Runs present, the cluster source and ordinary startup
    recovery select 0 rows, although the same Runs as ordinary Runs would be selected."""
    assert all(a.run.kind is RunKind.WORKFLOW for a in aggs)
    for page in (runtime_recovery_candidates(aggs, now, 64), local_startup_candidates(aggs, 64)):
        assert page.items == ()
        assert not page.has_more
    assert not local_startup_backlog_exceeds(aggs)
    as_ordinary = [
        dataclasses.replace(a, run=dataclasses.replace(a.run, kind=RunKind.ORDINARY)) for a in aggs
    ]
    selected = {c.run_id for c in runtime_recovery_candidates(as_ordinary, now, 64).items}
    selected |= {c.run_id for c in local_startup_candidates(as_ordinary, 64).items}
    assert selected == {a.run.run_id for a in aggs}


@pytest.mark.spec("REC-07", "REC-12")
def test_orphaned_created_scan_never_selects_a_workflow_run() -> None:
    """REC-07: with only Workflow Runs present, ordinary startup recovery (which includes the
    orphaned `created` scan of §2.2) scans 0 rows and fails nothing; the same Run as an
    ordinary Run is selected and failed."""
    command = FailOrphanedCreated(run_id="wf1", process_started_at_ms=T0 + 1)
    workflow = ok(apply(None, create_cmd("wf1", kind=RunKind.WORKFLOW), T0))
    assert orphaned_created_candidates([workflow], T0 + 1, 16).items == ()
    assert fail_orphaned_created(workflow, command, T0 + 2) == Raced(Code.NOT_ELIGIBLE)
    ordinary = ok(apply(None, create_cmd("wf1"), T0))
    assert [c.run_id for c in orphaned_created_candidates([ordinary], T0 + 1, 16).items] == ["wf1"]
    assert isinstance(fail_orphaned_created(ordinary, command, T0 + 2), Applied)


# -- §3.16 lease expiry source -------------------------------------------------------------
@pytest.mark.spec("LEASE-07")
def test_lease_expiry_source_ignores_legacy_runs() -> None:
    """§3.16: the expiry source that feeds T7..T9 returns only leases of runtime-owned Runs (a
    legacy Run here is a reached runtime Run relabelled, see the fixtures)."""
    runtime = remote_started("r1", "a1", T0, running=True)
    legacy = relabel_legacy(runtime)
    assert lease_expiry_candidates([legacy], T0 + 10**6, 16).items == ()
    assert [c.attempt_id for c in lease_expiry_candidates([runtime], T0 + 10**6, 16).items] == [
        "a1"
    ]


# -- §1.8.2 lost retry source (RETRY-07, RETRY-12, RETRY-13, RETRY-15) -----------------------------
@pytest.mark.spec("RETRY-07", "RETRY-12", "RETRY-13", "RETRY-15")
@given(
    aggregate_sets(
        scenarios=("local_lost", "remote_lost", "retry_wait", "requeued", "local_running"),
    ),
    LIMITS,
    st.data(),
)
def test_lost_retry_source_rules(aggs: list[RunAggregate], limit: int, data: st.DataObject) -> None:
    """RETRY-07: never a `retry_wait` Run before its `next_attempt_at_ms` (the observation time
    is drawn around those times too: one ms before, at, one ms after). RETRY-12: never a
    Workflow Run, a non-runtime Run, a Run with an intent or one whose latest Attempt is not
    `lost`. RETRY-15: every `lost` precedes every `retry_wait`. RETRY-13: at most `limit`
    items and `has_more` exactly when more eligible Runs exist."""
    dues = [
        a.policy.next_attempt_at_ms + d
        for a in aggs
        if a.policy is not None and a.policy.next_attempt_at_ms is not None
        for d in (-1, 0, 1)
    ]
    now = data.draw(st.one_of(OBSERVED, st.sampled_from(dues)) if dues else OBSERVED, "now")
    page = lost_retry_candidates(aggs, now, limit)
    by_run = {a.run.run_id: a for a in aggs}
    statuses = []
    for candidate in page.items:
        agg = by_run[candidate.run_id]
        latest = agg.latest_attempt
        assert latest is not None
        assert candidate.attempt_id == latest.attempt_id
        assert latest.status is AttemptStatus.LOST
        assert agg.run.kind is RunKind.ORDINARY
        assert agg.run.owner is RunOwner.RUNTIME
        assert agg.run.cancel_requested_at_ms is None
        if agg.run.status is RunStatus.RETRY_WAIT:
            assert agg.policy is not None
            due = agg.policy.next_attempt_at_ms
            assert due is not None
            assert due <= now
        else:
            assert agg.run.status is RunStatus.LOST
        statuses.append(agg.run.status)
    assert statuses == sorted(statuses, key=lambda s: s is RunStatus.RETRY_WAIT)
    eligible = spec_lost_retry(aggs, now)
    assert [(c.run_id, c.attempt_id) for c in page.items] == eligible[:limit]
    assert len(page.items) == min(limit, len(eligible))
    assert page.has_more == (len(eligible) > limit)


# -- D-11 local startup backlog ------------------------------------------------------------------
@functools.cache
def _backlog_rows(kind: str, count: int) -> tuple[RunAggregate, ...]:
    """`count` startup candidates (`kind == "c"`: local starting/running) or non-candidates
    (queued, remote running), each under its own Run id; built once, they are immutable."""
    if kind == "c":
        bases = (local_running("base", "b1", T0), local_starting("base", "b1", T0))
    else:
        bases = (admit("base", "b1", T0), remote_started("base", "b1", T0, running=True))
    return tuple(rename(bases[i % 2], f"{kind}{i:05d}") for i in range(count))


def _backlog(candidates: int, others: int) -> list[RunAggregate]:
    return [*_backlog_rows("c", 3000)[:candidates], *_backlog_rows("n", 300)[:others]]


@pytest.mark.spec("REC-07")
@pytest.mark.parametrize(
    ("candidates", "others", "exceeds"),
    [
        (0, 0, False),
        (1, 0, False),
        (1024, 0, False),
        (1024, 300, False),
        (1025, 0, True),
        (1025, 300, True),
        (3000, 10, True),
    ],
)
def test_local_startup_backlog_exceeds_iff_more_than_1024(
    candidates: int, others: int, exceeds: bool
) -> None:
    """D-11/B-31: the backlog check is true iff more than 1024 startup candidates exist;
    non-candidates do not count."""
    assert STARTUP_RECOVERY_TOTAL_MAX == 1024
    aggs = _backlog(candidates, others)
    assert local_startup_backlog_exceeds(aggs) is exceeds
    assert local_startup_backlog_exceeds(reversed(aggs)) is exceeds


@pytest.mark.spec("REC-07")
@given(st.integers(1000, 1100), st.integers(0, 60), st.randoms(use_true_random=False))
def test_local_startup_backlog_counts_with_limit_1025(
    candidates: int, others: int, rnd: random.Random
) -> None:
    """D-11: the count is `LIMIT 1025`: the answer is `candidates > 1024` in any row order, and
    no row after the 1025th candidate is read."""
    aggs = _backlog(candidates, others)
    rnd.shuffle(aggs)
    consumed = 0

    def rows() -> Iterator[RunAggregate]:
        nonlocal consumed
        for agg in aggs:
            consumed += 1
            yield agg

    assert local_startup_backlog_exceeds(rows()) is (candidates > 1024)
    if candidates > 1024:
        positions = [i for i, a in enumerate(aggs) if a.run.run_id.startswith("c")]
        assert consumed == positions[1024] + 1
