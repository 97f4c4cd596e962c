"""The quality tier (issue 3): every planted bug must be caught by the models.

For each mutant of `model_tests.quality.mutants.MUTANTS`:

- `test_the_models_catch_the_planted_bug` applies it to the kernel as shipped (with its icontract
  checks) and hunts it with the models under the active profile's budget (`ci` by default). A
  mutant that survives every engine fails the test. When the first catch is the kernel's own
  contract, the hunt runs again with the models alone (no kernel contract, no kernel invariant
  predicate): they must catch it on their own.
- `test_the_mutant_changes_the_kernel` checks, on a directed example, that the patch really takes
  effect (and is undone afterwards), so a mutant that silently does not apply cannot pass.
- `test_every_mutant_still_matches_the_kernel_source` checks that each mutant's `old` text
  occurs exactly once in the current kernel source, inside one top-level definition, so a kernel
  edit that removes it fails here, naming the mutant, rather than in a confusing hunt.

Run with `-s` to see one line per mutant (caught by what, after how many steps and seconds); the
same lines are printed in the terminal summary (`model_tests/quality/conftest.py`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

import icontract
import pytest

import kernel.transitions
from kernel.specs.properties import PROPERTIES
from kernel.transitions import run_lost_retry
from model_tests.quality.hunt import ENGINES, Catch, engine_order, hunt
from model_tests.quality.mutants import KERNEL, MUTANTS, Mutant, by_name, play
from model_tests.quality.plant import Definition, PlantError, definition_of

pytestmark = pytest.mark.slow  # model checking / planted bugs: a slow tier

PARAMS = [pytest.param(m, id=m.name, marks=pytest.mark.spec(m.spec)) for m in MUTANTS]


def _report(catch: Catch) -> None:
    print(f"\n{catch.line()}\n    {catch.message[:160]}")


@pytest.mark.parametrize("mutant", PARAMS)
def test_the_models_catch_the_planted_bug(mutant: Mutant) -> None:
    shipped = hunt(mutant)
    assert shipped is not None, (
        f"{mutant.name} ({mutant.spec}: {mutant.description}) survived the models' whole "
        f"budget: {', '.join(engine_order(mutant))}"
    )
    _report(shipped)
    assert shipped.mechanism in ("model", "icontract")
    assert shipped.steps > 0
    if shipped.mechanism == "icontract":
        # The kernel caught itself. The models must also catch the bug on their own: without
        # the kernel's contracts and without the invariant predicates they borrow from it.
        alone = hunt(mutant, contracts=False, kernel_predicates=False)
        assert alone is not None, f"{mutant.name} is caught only by the kernel's own contracts"
        _report(alone)
        assert alone.mechanism == "model"
        assert alone.spec != "RUN-01"


@pytest.mark.parametrize("mutant", PARAMS)
def test_the_mutant_changes_the_kernel(mutant: Mutant) -> None:
    script = mutant.probe()
    baseline = play(script)
    with mutant.applied(contracts=False):
        mutated = play(script)
    assert mutated != baseline, f"{mutant.name} does not change the kernel's answers"
    try:
        with mutant.applied():
            shipped: tuple[str, ...] | None = play(script)
    except icontract.ViolationError:
        shipped = None  # the kernel's contracts refuse the mutated step: also a change
    assert shipped != baseline
    assert play(script) == baseline, f"{mutant.name} was not undone"


@pytest.mark.parametrize("mutant", PARAMS)
def test_every_mutant_still_matches_the_kernel_source(mutant: Mutant) -> None:
    """Each patch's `old` text occurs exactly once in the current source of its kernel module,
    inside one top-level function or table, and the edit changes it."""
    for patch in mutant.patches:
        try:
            definition = definition_of(patch)
        except PlantError as exc:
            pytest.fail(f"mutant {mutant.name} no longer matches the kernel source: {exc}")
        assert definition.name in vars(importlib.import_module(patch.module)), mutant.name


def _definitions(mutant: Mutant) -> list[Definition]:
    return [definition_of(patch) for patch in mutant.patches]


def test_the_registry_plants_enough_distinct_bugs() -> None:
    """Issue 3 asks for at least 10; every mutant names a registered SPEC id, edits the source
    of a kernel module, and is aimed at a real engine."""
    assert len(MUTANTS) >= 12
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
    engines = {name for name, _ in ENGINES}
    for mutant in MUTANTS:
        assert mutant.spec in PROPERTIES, mutant.name
        assert mutant.patches, mutant.name
        assert mutant.aim in engines, mutant.name
        for patch in mutant.patches:
            assert patch.module.startswith(f"{KERNEL}."), (mutant.name, patch.module)
            assert patch.old != patch.new, mutant.name
    patched = {(d.module, d.name) for m in MUTANTS for d in _definitions(m)}
    assert len(patched) >= 10  # a spread over the kernel, not one function mutated many ways


def _contracted(value: object) -> bool:
    return hasattr(value, "__postconditions__")


def _inside(
    mutant: Mutant, table: Mapping[type, object], originals: dict[tuple[str, str], object]
) -> None:
    """Checks made while `mutant` is applied with the contracts off, then an error."""
    assert kernel.transitions.TRANSITIONS is not table
    assert not any(_contracted(fn) for fn in kernel.transitions.TRANSITIONS.values())
    assert not _contracted(vars(run_lost_retry)["backoff_delay_ms"])
    command_of = {id(fn): command for command, fn in table.items()}
    for definition in _definitions(mutant):
        now = vars(importlib.import_module(definition.module))[definition.name]
        original = originals[(definition.module, definition.name)]
        assert now is not original, (mutant.name, definition.name)
        if id(original) in command_of:  # a transition: planted where `apply` dispatches too
            assert kernel.transitions.TRANSITIONS[command_of[id(original)]] is now, mutant.name
    raise RuntimeError("boom")


def test_applying_a_mutant_is_undone_even_on_error() -> None:
    """The patches (and the contracts switch) leave nothing behind, also when the block raises."""
    table = kernel.transitions.TRANSITIONS
    originals = {
        (d.module, d.name): vars(importlib.import_module(d.module))[d.name]
        for m in MUTANTS
        for d in _definitions(m)
    }
    for mutant in MUTANTS:
        with pytest.raises(RuntimeError, match="boom"), mutant.applied(contracts=False):
            _inside(mutant, table, originals)
        assert kernel.transitions.TRANSITIONS is table
        for (module, name), value in originals.items():
            assert vars(importlib.import_module(module))[name] is value
    assert all(_contracted(fn) for fn in table.values())
    assert _contracted(vars(run_lost_retry)["backoff_delay_ms"])


def test_the_explorer_is_a_working_fallback() -> None:
    """The last engine of every hunt is the exhaustive explorer; it must catch on its own too
    (a directed check, since the machines usually catch first)."""
    mutant = by_name("starting_replay_appends_event")
    catch = hunt(mutant, engines=("exhaustive",), record=False)
    assert catch is not None
    assert (catch.engine, catch.mechanism, catch.spec) == ("exhaustive", "model", "RUN-03")
    assert catch.steps > 0
