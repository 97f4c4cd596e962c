"""The boundary-generated Run corpus (issue 16 item 1, `model_tests.corpus.boundaries`): every
boundary derived from the selection oracle has a committed trace (or the kernel provably cannot
reach it), each trace is what its builder records, and the derivation follows the oracle."""

from __future__ import annotations

import inspect
import textwrap
from typing import Any

import pytest

from conformance.run.corpus import RUN_CORPUS, read_text, read_trace
from conformance.run.pages import SourceQuery
from conformance.run.trace import dumps
from kernel.specs.properties import PROPERTIES
from kernel.specs.states import Profile
from model_tests.corpus import boundaries, write_boundaries
from model_tests.corpus.scenarios import SCENARIOS

SOURCE_SPECS = ("RETRY-07", "RETRY-12", "RETRY-13", "RETRY-15", "REC-01", "REC-02", "REC-07")
REPORT = boundaries.coverage()
COVERED = [row for rows in REPORT.values() for row in rows if row.status == "covered"]


@pytest.mark.spec(*SOURCE_SPECS, "REC-12", "E-1", "LEASE-07", "RETRY-18")
def test_every_derived_boundary_of_every_source_has_a_trace_or_is_unreachable() -> None:
    uncovered = [
        f"{row.boundary.source} {row.boundary.name}: {row.detail}"
        for rows in REPORT.values()
        for row in rows
        if row.status == "uncovered"
    ]
    assert uncovered == []
    assert boundaries.extra_builders() == []
    assert set(REPORT) == set(boundaries.ORACLES)
    # Only the non-runtime owner of sources whose states a legacy Run cannot reach is exempt.
    unreachable = {
        (row.boundary.source, row.boundary.name)
        for rows in REPORT.values()
        for row in rows
        if row.status == "unreachable"
    }
    assert {name for _, name in unreachable} == {"exclude-non-runtime-owner"}
    assert all(
        "NOT_RUNTIME_OWNED" in r.detail
        for rows in REPORT.values()
        for r in rows
        if r.status == "unreachable"
    )


def test_the_derivation_reads_the_oracle_terms_times_keys_and_pages() -> None:
    """The boundary list follows `kernel.selection`: the time instants where a source compares
    with an observation time, one order boundary per key column, a cursor boundary per column
    for the sources that take `after`, and the three page edges everywhere."""
    names = {s: {b.name for b in boundaries.enumerate_boundaries(s)} for s in boundaries.ORACLES}
    timed = {"lost_retry", "runtime_recovery", "lease_expiry", "orphaned_created"}
    for source, found in names.items():
        assert {"page-exactly-full", "page-full-plus-one", "page-empty"} <= found
        has_time = {"time-equal", "time-one-ms-before", "time-one-ms-after"} <= found
        assert has_time == (source in timed), source
    assert {n for n in names["local_dispatch"] if n.startswith(("order-", "cursor-"))} == {
        "order-queued", "order-created_at_ms", "order-attempt_id",
        "cursor-queued", "cursor-created_at_ms", "cursor-attempt_id",
    }  # fmt: skip
    assert not any(n.startswith("cursor-") for n in names["lost_retry"])
    assert "order-class" in names["lost_retry"]
    assert "order-class" in names["runtime_recovery"]
    # where the oracle has no exclusion, the boundary pins that the source keeps such Runs
    assert "not-excluded-workflow" in names["lease_expiry"]
    assert "not-excluded-workflow" in names["local_dispatch"]
    assert "requires-cancel-intent" in names["cancel_convergence"]
    assert "exclude-cancel-intent" in names["lost_retry"]


def test_a_condition_the_oracle_gains_is_reported_uncovered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new eligibility term in an oracle appears as a boundary without a trace: the coverage
    report fails until someone writes its builder."""
    namespace: dict[str, Any] = {}
    source = textwrap.dedent(
        """
        def lost_retry_candidates(aggregates, observed_at_ms, limit):
            def select(agg):
                if not is_lost_retry_eligible(agg) or agg.run.priority_band > 3:
                    return None
                return Candidate(agg.run.run_id, None, (agg.run.created_at_ms, agg.run.run_id))
            return _page(aggregates, select, limit)
        """
    )
    exec(compile(source, "<oracle>", "exec"), namespace)  # noqa: S102 (a test fixture)
    fake = namespace["lost_retry_candidates"]
    original = inspect.getsource
    monkeypatch.setattr(inspect, "getsource", lambda f: source if f is fake else original(f))
    monkeypatch.setitem(boundaries.ORACLES, "lost_retry", (fake, Profile.EDGE))
    rows = {r.boundary.name: r for r in boundaries.coverage()["lost_retry"]}
    gained = [r for name, r in rows.items() if name.startswith("unmapped:")]
    assert [r.status for r in gained] == ["uncovered"]
    assert "priority_band" in gained[0].boundary.name
    assert rows["order-created_at_ms"].status == "uncovered"  # a key column with no trace
    assert ("lost_retry", "order-class") in boundaries.extra_builders()


@pytest.mark.parametrize("row", COVERED, ids=lambda r: r.detail)
def test_a_boundary_trace_is_committed_as_recorded_and_queries_its_source(row: Any) -> None:
    name = row.detail
    assert name in SCENARIOS
    assert name.split("-boundary-")[0] in PROPERTIES
    path = RUN_CORPUS / f"{name}.jsonl"
    assert read_text(path) == dumps(SCENARIOS[name]())
    queried = {s.page.source for s in read_trace(path).steps if isinstance(s.page, SourceQuery)}
    assert queried == {row.boundary.source}


# -- the guarded writes (model_tests.corpus.write_boundaries) -------------------------------------
WRITE_REPORT = write_boundaries.coverage()
WRITE_COVERED = [r for rows in WRITE_REPORT.values() for r in rows if r.status == "covered"]


@pytest.mark.spec("LEASE-02", "LEASE-04", "LEASE-05", "LEASE-07", "RUN-04", "RETRY-07", "E-1")
def test_every_derived_write_boundary_has_a_trace_or_a_reason() -> None:
    """Every refusal branch of every write in `kernel.transitions.TRANSITIONS` is a boundary;
    an uncovered one fails unless it is listed as pending (the list only shrinks), and the
    boundaries the issue names (a draining or offline Worker, the session and lease expiry at
    equal / one ms before / after, each fence field stale alone, the retry due time) are
    covered for grant_lease and the fenced writes."""
    assert write_boundaries.unlisted_gaps(WRITE_REPORT) == []
    assert write_boundaries.extra_builders() == []
    assert set(WRITE_REPORT) == set(write_boundaries.WRITES)
    covered = {(r.boundary.command, r.boundary.name) for r in WRITE_COVERED}
    for status in ("draining", "offline"):
        assert ("grant_lease", f"worker-unavailable-worker-status-{status}") in covered
    for instant in write_boundaries.INSTANTS:
        assert ("expire_with_lease", f"not-expired-time-{instant}") in covered
        assert ("lost_retry_step", f"not-due-time-{instant}") in covered
        for command in write_boundaries.FENCED:
            assert (command, f"lease-expired-time-{instant}") in covered
    for command in write_boundaries.FENCED:
        for name in write_boundaries.STALE_FENCE:
            assert (command, name) in covered
    reasons = [r for rows in WRITE_REPORT.values() for r in rows if r.status == "unreachable"]
    assert all(r.detail for r in reasons)


def test_the_write_derivation_reads_branches_operands_members_and_times() -> None:
    """The boundary list follows the transitions: each operand of a refusal test, the other
    members of a small enumeration, and three instants per comparison with the clock."""
    grant = {b.name: b for b in write_boundaries.enumerate_write_boundaries("grant_lease")}
    assert grant["worker-unavailable-worker-status-draining"].code == "WORKER_UNAVAILABLE"
    assert "worker-unavailable-worker-status-online" not in grant
    assert grant["clock-regression-time-equal"].kind == "time"
    renew = {b.name for b in write_boundaries.enumerate_write_boundaries("renew_lease")}
    # the fence helpers of B-16 are followed: identity, liveness and the Worker's session
    assert {"lease-token-mismatch", "lease-version-mismatch", "lease-expired-time-equal"} <= renew
    assert "worker-unavailable-worker-status-offline" in renew  # a draining one may renew
    assert "worker-unavailable-worker-status-draining" not in renew
    retry = {b.name for b in write_boundaries.enumerate_write_boundaries("lost_retry_step")}
    assert {"not-due-time-equal", "not-due-time-one-ms-before"} <= retry  # read through decide


def test_a_refusal_branch_the_kernel_gains_is_reported_uncovered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    namespace: dict[str, Any] = {}
    source = textwrap.dedent(
        """
        def grant_lease(aggregate, command, observed_at_ms):
            if aggregate is None or aggregate.run.run_id != command.run_id:
                return Rejected(Code.RUN_NOT_FOUND)
            if command.worker.priority_band > 3:
                return Rejected(Code.WORKER_UNAVAILABLE)
            return tx.commit()
        """
    )
    exec(compile(source, "<transition>", "exec"), namespace)  # noqa: S102 (a test fixture)
    fake = namespace["grant_lease"]
    original = inspect.getsource
    monkeypatch.setattr(inspect, "getsource", lambda f: source if f is fake else original(f))
    monkeypatch.setitem(write_boundaries.WRITES, "grant_lease", fake)
    report = write_boundaries.coverage()
    rows = {r.boundary.name: r for r in report["grant_lease"]}
    assert rows["worker-unavailable"].status == "uncovered"
    assert "priority_band" in rows["worker-unavailable"].detail
    assert any(
        "grant_lease worker-unavailable" in g for g in write_boundaries.unlisted_gaps(report)
    )
    assert ("grant_lease", "executor-type-mismatch") in write_boundaries.extra_builders()


@pytest.mark.parametrize("row", WRITE_COVERED, ids=lambda r: r.detail)
def test_a_write_boundary_trace_is_committed_as_recorded_and_sends_its_command(row: Any) -> None:
    name = row.detail
    assert name in SCENARIOS
    assert name.split("-write-")[0] in PROPERTIES
    path = RUN_CORPUS / f"{name}.jsonl"
    assert read_text(path) == dumps(SCENARIOS[name]())
    trace = read_trace(path)
    answered = {
        (s.command.name, (s.expect.code or "").lower())
        for s in trace.steps
        if s.command is not None
    }
    # a time trace sits on the instant, refused or applied as the comparison says; every other
    # trace shows its command answered with the boundary's code
    sent = {command for command, _ in answered}
    assert row.boundary.command in sent
    if row.boundary.kind != "time":
        assert (row.boundary.command, row.boundary.code.lower()) in answered
