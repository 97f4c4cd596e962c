"""The suite has teeth (issue 4 item 6): planted-bug variants of the edge runner
(`edge_mutants.py`) must make the conformance suite fail.

For every mutant: the patch really changes the runner (sanity), and replaying the bundled corpus
against the mutated runner diverges (stopping at the first diverged trace; run with `-s` for a
table line per mutant: name, trace:step that caught it, seconds). The mutants that the corpus
does not catch (`SURVIVORS`, established by replaying all 276 traces against each) are corpus
gaps, reported in the issue note and not counted here (no xfail hides them); the three
stale-guard survivors are caught by a directed stale write aimed at the dropped column. One
mutant also goes through `qlk conform`, which must exit 1.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping
from pathlib import Path

import pytest

from conformance.cli import main
from kernel import Effect, RunAggregate, UpdateLease, UpdateRun
from kernel.specs.states import LeaseStatus
from runners.edge import named_sql, sources, store
from runners.edge.store import EdgeStore
from runners.engine import StaleWrite, execute
from tests.runners.edge.edge_mutants import BY_NAME, MUTANTS, SURVIVORS, Mutant, hunt
from tests.runners.edge.test_edge_store import remote_script

CAUGHT = [m for m in MUTANTS if m.name not in SURVIVORS]
STALE_GUARD_SURVIVORS = frozenset(
    {"update_run_no_version_cas", "update_lease_no_token_digest", "update_lease_no_generation"}
)
SQL_MUTANTS = [m for m in MUTANTS if m.table != "method"]


def _line(mutant: Mutant, caught_by: str, traces: int, seconds: float) -> None:
    print(f"\nMUTANT {mutant.name:38} {caught_by:90} {traces:4} traces {seconds:6.2f}s")


def test_at_least_eight_mutants_are_caught() -> None:
    assert len(CAUGHT) >= 8
    assert set(BY_NAME) >= SURVIVORS


@pytest.mark.parametrize("mutant", SQL_MUTANTS, ids=lambda m: m.name)
def test_the_sql_patch_is_applied(mutant: Mutant, monkeypatch: pytest.MonkeyPatch) -> None:
    original = mutant.original()
    mutated = mutant.mutated()
    assert mutated != original

    def table() -> Mapping[str, str]:
        """The sections as the runner looks them up right now."""
        if mutant.table == "statements":
            found: Mapping[str, str] = getattr(store, "STATEMENTS")  # noqa: B009
        else:
            found = getattr(sources, "SOURCES")  # noqa: B009
        return found

    assert table()[mutant.section] == original
    with monkeypatch.context() as patch:
        mutant.apply(patch)
        assert table()[mutant.section] == mutated
        pristine = named_sql.STATEMENTS if mutant.table == "statements" else named_sql.SOURCES
        assert {k: v for k, v in table().items() if k != mutant.section} == {
            k: v for k, v in pristine.items() if k != mutant.section
        }
    assert table()[mutant.section] == original  # undone


def test_the_method_patches_are_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    before_tx, before_cls = EdgeStore.transaction, store.EdgeTransaction
    with monkeypatch.context() as patch:
        BY_NAME["events_after_commit"].apply(patch)
        assert EdgeStore.transaction is not before_tx
    with monkeypatch.context() as patch:
        BY_NAME["events_not_inserted"].apply(patch)
        assert store.EdgeTransaction is not before_cls
    assert EdgeStore.transaction is before_tx
    assert store.EdgeTransaction is before_cls


@pytest.mark.parametrize("mutant", CAUGHT, ids=lambda m: m.name)
def test_the_corpus_catches_the_mutant(mutant: Mutant, monkeypatch: pytest.MonkeyPatch) -> None:
    mutant.apply(monkeypatch)
    found = hunt(mutant)
    _line(mutant, found.caught_by, found.traces, found.seconds)
    assert found.divergence is not None, f"{mutant.name} survived the whole corpus"


def test_qlk_conform_fails_on_a_mutant(monkeypatch: pytest.MonkeyPatch) -> None:
    BY_NAME["events_not_inserted"].apply(monkeypatch)
    out = io.StringIO()
    assert main(["conform", "--quiet"], out=out) == 1
    assert "diverged" in out.getvalue()


def _stale_effect(name: str, agg: RunAggregate) -> Effect:
    """A write whose guard no longer holds, aimed at the fence column the mutant dropped."""
    run, lease = agg.run, agg.leases[0]
    released = dataclasses.replace(lease, status=LeaseStatus.RELEASED, version=lease.version + 1)
    if name == "update_run_no_version_cas":
        newer = dataclasses.replace(run, version=run.version + 1)
        return UpdateRun(newer, expected_version=run.version - 1)
    if name == "update_lease_no_token_digest":
        forged = dataclasses.replace(released, token_digest="f" * 64)
        return UpdateLease(forged, lease.version, LeaseStatus.LEASED)
    assert name == "update_lease_no_generation"
    other = dataclasses.replace(released, lease_generation=lease.lease_generation + 1)
    return UpdateLease(other, lease.version, LeaseStatus.LEASED)


@pytest.mark.parametrize("name", sorted(STALE_GUARD_SURVIVORS))
def test_a_directed_stale_write_catches_what_the_corpus_misses(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The corpus replays serially, so a dropped guard column never matters there; a stale
    write aimed at that column (as `test_edge_store` does) is what catches the mutant."""
    edge = EdgeStore(tmp_path / "edge.sqlite3")
    try:
        for command, now in remote_script()[:3]:
            assert execute(edge, command, now).kind.value == "applied"
        with edge.transaction() as tx:
            agg = tx.load_run("run-1")
        assert agg is not None
        effect = _stale_effect(name, agg)
        with pytest.raises(StaleWrite), edge.transaction() as tx:  # the runner as shipped
            tx.execute(effect)
        before = edge.project()
        BY_NAME[name].apply(monkeypatch)
        with edge.transaction() as tx:  # the mutant accepts the stale write: caught
            tx.execute(effect)
        assert edge.project() != before
    finally:
        edge.close()
