"""The suite has teeth (issue 4 item 6): every planted-bug variant of the edge runner
(`edge_mutants.py`) makes `qlk conform` fail.

`qlk conform` has three parts, and each mutant names the ones that must catch it (`modes`):
the corpus replay (a trace diverges), the guard mode (the runner accepts a stale write that one
of its guards should refuse, `conformance.run.guards`), and the kill mode (a SIGKILL at a statement
boundary leaves a state that is neither the before- nor the after-state,
`conformance.run.kill_edge`).
Every mutant is checked against every mode it names (run with `-s` for a table line per
mutant: name, what caught it, seconds), and one mutant per mode goes through `qlk conform`
end to end, which must exit 1 saying why.
"""

from __future__ import annotations

import io
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.run.corpus import RUN_CORPUS
from conformance.run.edge import make_edge_adapter
from conformance.run.guards import probe_every_write
from conformance.run.kill_edge import kill_every_write
from runners.edge import named_sql, sources, store
from runners.edge.store import EdgeStore
from tests.runners.edge.edge_mutants import BY_NAME, MUTANTS, Mutant, hunt

pytestmark = pytest.mark.slow  # the planted-bug tier of the SQL (corpus, guard and kill modes)

MODES = ("corpus", "guards", "kill")
SQL_MUTANTS = [m for m in MUTANTS if m.table != "method"]


def _of(mode: str) -> list[Mutant]:
    return [m for m in MUTANTS if mode in m.modes]


def _line(mutant: Mutant, mode: str, caught_by: str, seconds: float) -> None:
    print(f"\nMUTANT {mutant.name:32} {mode:6} {caught_by:100} {seconds:6.2f}s")


def test_at_least_eight_mutants_each_with_a_mode_that_catches_it() -> None:
    assert len(MUTANTS) >= 8
    assert len(BY_NAME) == len(MUTANTS)
    for mutant in MUTANTS:
        assert mutant.modes, mutant.name
        assert set(mutant.modes) <= set(MODES), mutant.name
        assert ("guards" in mutant.modes) == (mutant.guard is not None), mutant.name
    assert {mode for m in MUTANTS for mode in m.modes} == set(MODES)


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


@pytest.mark.parametrize("mutant", _of("corpus"), ids=lambda m: m.name)
def test_the_corpus_catches_the_mutant(mutant: Mutant, monkeypatch: pytest.MonkeyPatch) -> None:
    mutant.apply(monkeypatch)
    found = hunt(mutant)
    _line(mutant, "corpus", f"{found.caught_by} after {found.traces} traces", found.seconds)
    assert found.divergence is not None, f"{mutant.name} survived the whole corpus"


@pytest.mark.parametrize("mutant", _of("guards"), ids=lambda m: m.name)
def test_guard_mode_catches_the_mutant(mutant: Mutant, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner as shipped refuses every stale variant (checked in tests/conformance); the
    mutant accepts the stale variant of exactly the guard it dropped."""
    assert mutant.guard is not None
    effect, guard = mutant.guard
    mutant.apply(monkeypatch)
    started = time.perf_counter()
    report = probe_every_write(make_edge_adapter)
    failures = report.accepted
    hits = [line for line in failures if f"{effect}[" in line and f"].{guard}:" in line]
    shown = hits[0] if hits else (failures[0] if failures else "SURVIVED")
    _line(
        mutant, "guards", f"{len(failures)} accepted, e.g. {shown}", time.perf_counter() - started
    )
    assert hits, f"{mutant.name}: no stale {effect}.{guard} was accepted: {failures[:3]}"


@pytest.mark.parametrize("mutant", _of("kill"), ids=lambda m: m.name)
def test_kill_mode_catches_the_mutant(mutant: Mutant, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kill mode's children are forked from this process, so they run the mutant too."""
    mutant.apply(monkeypatch)
    started = time.perf_counter()
    results = kill_every_write()
    failures = [line for r in results for line in r.failures]
    shown = failures[0] if failures else "SURVIVED"
    _line(mutant, "kill", f"{len(failures)} torn, e.g. {shown}", time.perf_counter() - started)
    assert any("not the before-state" in line or "not the after-state" in line for line in failures)


#: One mutant per part of `qlk conform`, with the options that leave only that part running
#: (over a few named traces, so the end-to-end check stays quick) and what the output must say.
END_TO_END = (
    ("lost_lease_left_leased", ("--no-guards", "--no-kill"), "expected outcome"),
    ("update_run_no_version_cas", ("--no-kill",), "UpdateRun[0].version: stale write accepted"),
    ("events_after_commit", ("--no-guards",), "not the before-state"),
)
SUBSET = (
    "LEASE-07-local-expiry-lost-and-release-in-one-step.jsonl",
    "LEASE-09-old-worker-fenced-after-lost-release.jsonl",
    "RETRY-08-due-retry-wait-requeued-exactly-once.jsonl",
)


@pytest.mark.parametrize(("name", "options", "says"), END_TO_END, ids=[e[0] for e in END_TO_END])
def test_qlk_conform_fails_on_a_mutant(
    name: str,
    options: tuple[str, ...],
    says: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    for trace in SUBSET:
        shutil.copy(RUN_CORPUS / trace, traces / trace)
    argv = ["conform", "--quiet", "--traces", str(traces), *options]
    clean = io.StringIO()
    assert main(argv, out=clean) == 0, clean.getvalue()  # the runner as shipped passes
    assert says not in clean.getvalue()
    BY_NAME[name].apply(monkeypatch)
    out = io.StringIO()
    assert main(argv, out=out) == 1
    assert says in out.getvalue()
