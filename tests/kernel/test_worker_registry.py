"""The Worker session machine and the grant target (SPEC §1.1 Worker session, §1.7 T1, §3.8 D-8,
Appendix E-2; kernel/worker_registry.py, kernel/specs/worker_session.py).

- The table walk: `decide_session` takes every edge of `SESSION_TABLE` and refuses every missing
  pair with the table's code, changing nothing (RUN-05's rule for this machine).
- Unit cases for each refusal and each row's effect (generation, session id, expiry, version).
- Hypothesis: `decide_session` is total over arbitrary requests and rows; `grant_target` never
  picks a draining, offline, expired, wrong-type or full session, and picks one whenever one fits.
- The cluster dispatch machine (kernel/cluster_dispatch.py) over a fake source: D-13 order,
  capacity, the grant limit, a refused target.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import (
    AdmitRun,
    Applied,
    ClusterDispatchDone,
    ClusterDispatchEnd,
    DrainSession,
    ExpireSession,
    GrantAnswered,
    GrantTo,
    HeartbeatSession,
    PageRead,
    Raced,
    ReadGrantPage,
    RegisterSession,
    Rejected,
    ResumeSession,
    RunAggregate,
    SessionApplied,
    SessionLoad,
    SessionRecord,
    SessionRefused,
    SessionRequest,
    StopSession,
    TargetRefused,
    admit_run,
    cluster_dispatch_advance,
    cluster_dispatch_begin,
    decide_session,
    dispatch_executor_types,
    effective_status,
    grant_fits,
    grant_target,
    session_view,
)
from kernel.selection import Candidate, Page
from kernel.specs import (
    SESSION_REFUSALS,
    SESSION_TABLE,
    Code,
    Paging,
    SessionCode,
    SessionTrigger,
    WorkerSessionStatus,
)
from tests.support.session_fixtures import (
    DRAINING,
    KEY,
    NOW,
    OFFLINE,
    ONLINE,
    T0,
    TTL,
    record,
    request_for,
    rows_in,
)


@pytest.mark.spec("RUN-05")
def test_every_edge_is_taken_and_every_missing_pair_refused_unchanged() -> None:
    taken = set()
    for source in SESSION_TABLE.sources:
        for trigger in SESSION_TABLE.triggers:
            current = rows_in(source, trigger)
            decision = decide_session(current, request_for(trigger, current), NOW)
            targets = SESSION_TABLE.lookup(source, trigger)
            if targets is None:
                assert isinstance(decision, SessionRefused), (source, trigger)
                assert decision.code is SESSION_REFUSALS[source], (source, trigger)
            else:
                assert isinstance(decision, SessionApplied), (source, trigger, decision)
                assert decision.record.status in targets
                assert decision.before == current
                taken.add((source, trigger, decision.record.status))
    assert taken == {(e.source, e.trigger, e.target) for e in SESSION_TABLE.edges()}
    assert set(SESSION_REFUSALS) == {s for s, _t in SESSION_TABLE.missing()}


def test_register_is_a_new_session_and_generation_on_every_start() -> None:
    first = decide_session(None, RegisterSession("w1", "s1", ("shell",), 2, KEY, TTL), T0)
    assert isinstance(first, SessionApplied)
    assert (first.record.generation, first.record.version) == (1, 1)
    assert first.record.session_expires_at_ms == T0 + TTL
    again = decide_session(
        first.record, RegisterSession("w1", "s2", ("shell", "py"), 3, KEY, TTL), T0 + 5
    )
    assert isinstance(again, SessionApplied)
    assert (again.record.session_id, again.record.generation, again.record.version) == ("s2", 2, 2)
    assert again.record.executor_types == ("shell", "py")
    reused = decide_session(
        again.record, RegisterSession("w1", "s2", ("shell",), 2, KEY, TTL), T0 + 6
    )
    assert reused == SessionRefused(SessionTrigger.REGISTER, SessionCode.SESSION_ID_REUSED)
    stopped = replace(again.record, status=OFFLINE)
    after_stop = decide_session(
        stopped, RegisterSession("w1", "s3", ("shell",), 2, KEY, TTL), T0 + 7
    )
    assert isinstance(after_stop, SessionApplied)
    assert (after_stop.record.status, after_stop.record.generation) == (ONLINE, 3)


def test_resume_keeps_the_session_only_while_it_is_live() -> None:
    row = record(status=DRAINING)
    resumed = decide_session(row, ResumeSession("w1", "s1", 1, TTL), T0 + 100)
    assert isinstance(resumed, SessionApplied)
    assert (resumed.record.session_id, resumed.record.generation) == ("s1", 1)
    assert resumed.record.status is DRAINING  # a draining session stays draining
    assert resumed.record.session_expires_at_ms == T0 + 100 + TTL
    expired = decide_session(record(), ResumeSession("w1", "s1", 1, TTL), T0 + TTL)
    assert expired == SessionRefused(SessionTrigger.RESUME, SessionCode.OFFLINE)
    other = decide_session(record(), ResumeSession("w1", "s0", 1, TTL), T0 + 1)
    assert other == SessionRefused(SessionTrigger.RESUME, SessionCode.SUPERSEDED)
    older = decide_session(record(generation=2), ResumeSession("w1", "s1", 1, TTL), T0 + 1)
    assert older == SessionRefused(SessionTrigger.RESUME, SessionCode.SUPERSEDED)
    new_key = bytes(32)
    rekeyed = decide_session(record(), ResumeSession("w1", "s1", 1, TTL, new_key), T0 + 1)
    assert isinstance(rekeyed, SessionApplied)
    assert rekeyed.record.public_key == new_key


def test_heartbeat_drain_stop_and_expire() -> None:
    row = record()
    beat = decide_session(row, HeartbeatSession("w1", "s1", 1, TTL), T0 + 10)
    assert isinstance(beat, SessionApplied)
    assert beat.record.session_expires_at_ms == T0 + 10 + TTL
    assert beat.record.version == 2
    late = decide_session(row, HeartbeatSession("w1", "s1", 1, TTL), T0 + TTL)
    assert late == SessionRefused(SessionTrigger.HEARTBEAT, SessionCode.OFFLINE)
    regressed = decide_session(row, HeartbeatSession("w1", "s1", 1, TTL), T0 - 1)
    assert regressed == SessionRefused(SessionTrigger.HEARTBEAT, SessionCode.CLOCK_REGRESSION)
    drained = decide_session(row, DrainSession("w1", "s1", 1), T0 + 1)
    assert isinstance(drained, SessionApplied)
    assert drained.record.status is DRAINING
    assert drained.record.session_expires_at_ms == row.session_expires_at_ms  # not renewed
    stopped = decide_session(drained.record, StopSession("w1", "s1", 1), T0 + 2)
    assert isinstance(stopped, SessionApplied)
    assert stopped.record.status is OFFLINE
    assert stopped.record.session_expires_at_ms == T0 + 2
    assert decide_session(row, ExpireSession("w1"), T0 + 5) == SessionRefused(
        SessionTrigger.EXPIRE, SessionCode.NOT_EXPIRED
    )
    expired = decide_session(row, ExpireSession("w1"), T0 + TTL)
    assert isinstance(expired, SessionApplied)
    assert expired.record.status is OFFLINE
    assert decide_session(None, HeartbeatSession("w1", "s1", 1, TTL), T0) == SessionRefused(
        SessionTrigger.HEARTBEAT, SessionCode.UNKNOWN
    )


@pytest.mark.parametrize(
    "bad",
    [
        RegisterSession("w1", "s1", (), 2, KEY, TTL),
        RegisterSession("w1", "s1", ("shell", "shell"), 2, KEY, TTL),
        RegisterSession("w1", "s1", ("shell",), 0, KEY, TTL),
        RegisterSession("w1", "s1", ("shell",), 2, KEY[:31], TTL),
        RegisterSession("w1", "s1", ("shell",), 2, KEY, 4_999),
        RegisterSession("w1", "s1", ("shell",), 2, KEY, 600_001),
        RegisterSession("", "s1", ("shell",), 2, KEY, TTL),
        HeartbeatSession("w1", "s1", 0, TTL),
        ResumeSession("w1", "s1", 1, TTL, b"short"),
    ],
)
def test_a_malformed_request_is_refused_invalid(bad: SessionRequest) -> None:
    assert decide_session(record(), bad, T0 + 1) == SessionRefused(bad.trigger, SessionCode.INVALID)


def test_expiry_is_decided_on_read() -> None:
    row = record()
    assert effective_status(row, T0 + TTL - 1) is ONLINE
    assert effective_status(row, T0 + TTL) is OFFLINE
    assert session_view(row, T0 + TTL).status is OFFLINE
    assert session_view(record(status=DRAINING), T0).status is DRAINING


_ids = st.sampled_from(["w1", "w2", "", "s1", "s2", "x" * 300])
_ints = st.integers(min_value=-(2**40), max_value=2**40)
_requests = st.one_of(
    st.builds(
        RegisterSession,
        _ids,
        _ids,
        st.lists(st.sampled_from(["shell", "py", ""]), max_size=3).map(tuple),
        _ints,
        st.sampled_from([KEY, b"", b"k" * 33]),
        _ints,
    ),
    st.builds(ResumeSession, _ids, _ids, _ints, _ints, st.sampled_from([None, KEY, b"x"])),
    st.builds(HeartbeatSession, _ids, _ids, _ints, _ints),
    st.builds(DrainSession, _ids, _ids, _ints),
    st.builds(StopSession, _ids, _ids, _ints),
    st.builds(ExpireSession, _ids),
)
_rows = st.one_of(
    st.none(),
    st.builds(
        record,
        worker_id=st.sampled_from(["w1", "w2"]),
        status=st.sampled_from(list(WorkerSessionStatus)),
        session_id=st.sampled_from(["s1", "s2"]),
        generation=st.integers(1, 3),
        expires=st.integers(T0 - 10, T0 + 10),
        updated=st.integers(T0 - 10, T0 + 10),
    ),
)


@pytest.mark.spec("RUN-05")
@given(current=_rows, request=_requests, now=st.integers(T0 - 20, T0 + 20))
def test_decide_session_is_total_and_walks_only_table_edges(
    current: SessionRecord | None, request: SessionRequest, now: int
) -> None:
    decision = decide_session(current, request, now)
    assert isinstance(decision, SessionApplied | SessionRefused)
    if isinstance(decision, SessionApplied):
        source = None if current is None else current.status
        if request.trigger is not SessionTrigger.EXPIRE and current is not None:
            source = effective_status(current, now)
        if request.trigger is SessionTrigger.REGISTER and current is not None:
            source = current.status
        assert SESSION_TABLE.allows(source, request.trigger, decision.record.status)
        assert decision.record.version == (1 if current is None else current.version + 1)
        assert decision.record.updated_at_ms == now
        assert decision.record.worker_id == request.worker_id


_slots = st.lists(
    st.builds(
        lambda wid, status, types, cap, load, expires: SessionLoad(
            record(wid, status=status, types=types, capacity=cap, expires=expires), load
        ),
        st.sampled_from(["w1", "w2", "w3", "w4"]),
        st.sampled_from(list(WorkerSessionStatus)),
        st.lists(st.sampled_from(["shell", "py"]), min_size=1, max_size=2, unique=True).map(tuple),
        st.integers(1, 3),
        st.integers(0, 4),
        st.integers(T0 - 5, T0 + 5),
    ),
    max_size=6,
)


@given(slots=_slots, executor_type=st.sampled_from(["shell", "py", "go"]))
def test_grant_target_never_picks_draining_offline_expired_wrong_type_or_full(
    slots: list[SessionLoad], executor_type: str
) -> None:
    """§1.7 T1's Worker guard with capacity: a pick is online, unexpired at `now`, advertises the
    type and has spare capacity; there is a pick whenever such a session exists; the pick is the
    least loaded, ties to the smallest worker id."""
    now = T0
    chosen = grant_target(executor_type, slots, now)
    fitting = [
        s
        for s in slots
        if s.record.status is ONLINE
        and s.record.session_expires_at_ms > now
        and executor_type in s.record.executor_types
        and s.load < s.record.capacity
    ]
    if not fitting:
        assert chosen is None
        assert executor_type not in dispatch_executor_types(slots, now)
        return
    assert chosen is not None
    assert chosen in fitting
    assert (chosen.load, chosen.record.worker_id) == min(
        (s.load, s.record.worker_id) for s in fitting
    )
    assert executor_type in dispatch_executor_types(slots, now)


def test_grant_fits_counts_the_new_lease() -> None:
    assert grant_fits(record(capacity=2), 2)
    assert not grant_fits(record(capacity=2), 3)


# -- the cluster dispatch machine -------------------------------------------------------------


def _candidate(i: int) -> Candidate[tuple[int, int, str]]:
    return Candidate(f"r{i}", f"a{i}", (i, i, f"a{i}"))


def _applied() -> Applied:
    outcome = admit_run(
        None,
        AdmitRun(
            run_id="r",
            attempt_id="a",
            project_id="p",
            task_id="t",
            task_revision=1,
            executor_type="shell",
        ),
        T0,
    )
    assert isinstance(outcome, Applied)
    assert isinstance(outcome.aggregate, RunAggregate)
    return outcome


def _drive(
    slots: tuple[SessionLoad, ...],
    source: dict[str, list[Candidate[tuple[int, int, str]]]],
    grants: int,
    answer: object = None,
) -> tuple[ClusterDispatchDone, list[tuple[str, str]]]:
    scan, action = cluster_dispatch_begin(Paging(grants, 1), grants, slots, T0)
    granted: list[tuple[str, str]] = []
    while not isinstance(action, ClusterDispatchDone):
        if isinstance(action, ReadGrantPage):
            items = [
                c
                for c in source.get(action.executor_type, [])
                if action.after is None or c.key > action.after
            ]
            page = Page(tuple(items[: action.limit]), len(items) > action.limit)
            scan, action = cluster_dispatch_advance(scan, PageRead(page))
        else:
            assert isinstance(action, GrantTo)
            if callable(answer):
                event = answer(action)
            else:
                event = GrantAnswered(action.candidate, action.target.worker_id, _applied())
            if isinstance(event, GrantAnswered) and isinstance(event.outcome, Applied):
                granted.append((action.candidate.attempt_id or "", action.target.worker_id))
            scan, action = cluster_dispatch_advance(scan, event)
    return action, granted


def test_dispatch_grants_in_key_order_within_capacity_to_the_least_loaded() -> None:
    slots = (
        SessionLoad(record("w1", capacity=2), 0),
        SessionLoad(record("w2", capacity=3), 1),
        SessionLoad(record("w3", status=DRAINING, capacity=9), 0),
    )
    done, granted = _drive(slots, {"shell": [_candidate(i) for i in range(10)]}, grants=16)
    assert [a for a, _w in granted] == [f"a{i}" for i in range(4)]  # 2 + (3 - 1) fit
    # least loaded first, ties to the smallest worker id: w1 (0), w1 (1) = w2 (1), w2 (2)
    assert [w for _a, w in granted] == ["w1", "w1", "w2", "w2"]
    assert all(w != "w3" for _a, w in granted)
    assert done.end is ClusterDispatchEnd.SCANNED
    assert done.ends == (("shell", "DISPATCH_NO_CAPACITY"),)


def test_dispatch_stops_at_the_grant_limit_and_a_raced_candidate_uses_its_page_slot() -> None:
    slots = (SessionLoad(record("w1", capacity=50), 0),)
    source = {"shell": [_candidate(i) for i in range(10)]}
    done, granted = _drive(slots, source, 3)
    assert [a for a, _w in granted] == ["a0", "a1", "a2"]
    assert (done.end, done.granted) == (ClusterDispatchEnd.GRANT_LIMIT, 3)

    def answer(action: GrantTo) -> GrantAnswered:
        outcome = Raced(Code.NOT_ELIGIBLE) if action.candidate.run_id == "r1" else _applied()
        return GrantAnswered(action.candidate, action.target.worker_id, outcome)

    done, granted = _drive(slots, source, 3, answer)
    assert [a for a, _w in granted] == ["a0", "a2"]  # one page of 3 per type and cycle
    assert done.end is ClusterDispatchEnd.SCANNED
    assert done.ends == (("shell", "DISPATCH_SCAN_LIMIT"),)


def test_a_refused_target_is_dropped_and_the_candidate_goes_to_the_next() -> None:
    slots = (SessionLoad(record("w1", capacity=5), 0), SessionLoad(record("w2", capacity=5), 1))

    def answer(action: GrantTo) -> TargetRefused | GrantAnswered:
        if action.target.worker_id == "w1":
            return TargetRefused(action.candidate, "w1")
        return GrantAnswered(action.candidate, "w2", _applied())

    done, granted = _drive(slots, {"shell": [_candidate(0), _candidate(1)]}, 16, answer)
    assert granted == [("a0", "w2"), ("a1", "w2")]
    assert done.ends == (("shell", "DISPATCH_NOTHING_TO_ACTIVATE"),)


def test_a_worker_unavailable_refusal_drops_the_target() -> None:
    slots = (SessionLoad(record("w1", capacity=5), 0),)

    def answer(action: GrantTo) -> GrantAnswered:
        return GrantAnswered(action.candidate, "w1", Rejected(Code.WORKER_UNAVAILABLE))

    done, granted = _drive(slots, {"shell": [_candidate(0), _candidate(1)]}, 16, answer)
    assert granted == []
    assert done.tried == 2  # the second candidate found no target left
    assert done.ends == (("shell", "DISPATCH_NO_CAPACITY"),)


def test_each_advertised_type_is_scanned_in_order() -> None:
    slots = (SessionLoad(record("w1", types=("py", "shell"), capacity=9), 0),)
    source = {"py": [_candidate(5)], "shell": [_candidate(1)], "go": [_candidate(0)]}
    done, granted = _drive(slots, source, 16)
    assert granted == [("a5", "w1"), ("a1", "w1")]
    assert [t for t, _e in done.ends] == ["py", "shell"]
