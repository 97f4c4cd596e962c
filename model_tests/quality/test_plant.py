"""Self-tests of the planting mechanism (`plant.py`, `plant_plugin.py`) on a tiny module.

`plant_target.py` has, in small, what the kernel has: a helper looked up at call time, a
decorated function, a table and two registries. The in-process tests plant edits of its source
and check what is re-bound and that all of it is restored; the load-time test runs
`test_plant_target.py` in a subprocess under `-p model_tests.quality.plant_plugin` with
`QL3_PLANT=selftest_limit`, where it must fail, and without the plant, where it must pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from model_tests.quality import plant_plugin, plant_target
from model_tests.quality.plant import (
    PlantError,
    SourcePatch,
    definition_of,
    install_at_load,
    planted,
)
from model_tests.quality.plants import PLANTS

TARGET = "model_tests.quality.plant_target"
SCOPE = "model_tests.quality"
ROOT = Path(__file__).resolve().parents[2]
LIMIT_OFF_BY_ONE = SourcePatch(TARGET, "return n <= LIMIT", "return n < LIMIT")


def _state() -> tuple[object, ...]:
    return (
        plant_target.within_limit,
        plant_target.accepts,
        plant_target.SIZES,
        plant_target.CHECKS,
        dict(plant_target.BY_NAME),
        dict(plant_target.CHECKS),
    )


def test_a_patch_must_occur_exactly_once_and_change_the_text() -> None:
    with pytest.raises(PlantError, match=r"plant_target: .* 0 times .*'return n <= 4'"):
        SourcePatch(TARGET, "return n <= 4", "return n < 4").check()
    with pytest.raises(PlantError, match=r"plant_target: .* 3 times .*'LIMIT'"):
        SourcePatch(TARGET, "LIMIT", "CAP").check()
    with pytest.raises(PlantError, match=r"plant_target: the patch changes nothing"):
        SourcePatch(TARGET, "return n <= LIMIT", "return n <= LIMIT").check()
    LIMIT_OFF_BY_ONE.check()
    assert PLANTS["selftest_limit"] == (LIMIT_OFF_BY_ONE,)


def test_the_definition_is_the_top_level_function_or_table_around_the_text() -> None:
    function = definition_of(LIMIT_OFF_BY_ONE)
    assert (function.name, function.text.splitlines()[0]) == (
        "within_limit",
        "def within_limit(n: int) -> bool:",
    )
    decorated = definition_of(SourcePatch(TARGET, "n >= 0 and", "n > 0 and"))
    assert decorated.name == "accepts"
    assert decorated.text.startswith("@_tagged\n")  # the decorators belong to the definition
    table = definition_of(SourcePatch(TARGET, '"small": 1', '"small": 2'))
    assert table.name == "SIZES"
    with pytest.raises(PlantError, match="not inside one top-level definition"):
        definition_of(
            SourcePatch(TARGET, "LIMIT = 3\n\n\ndef _tagged", "LIMIT = 4\n\n\ndef _tagged")
        )
    with pytest.raises(PlantError, match="top-level ImportFrom"):
        definition_of(SourcePatch(TARGET, "from types import", "from typing import"))


def test_planting_in_process_rebinds_every_reference_and_restores_them() -> None:
    before = _state()
    original = plant_target.within_limit
    assert plant_target.accepts(plant_target.LIMIT)
    with planted([LIMIT_OFF_BY_ONE], scope=SCOPE):
        new = plant_target.within_limit
        assert new is not original
        assert not new(plant_target.LIMIT)
        assert new(plant_target.LIMIT - 1)
        # The unpatched caller looks its helper up in the module at call time.
        assert not plant_target.accepts(plant_target.LIMIT)
        # The executed definition lives in the real module and points at the real file.
        assert new.__globals__ is vars(plant_target)
        assert new.__code__.co_filename == plant_target.__file__
        assert new.__code__.co_firstlineno == original.__code__.co_firstlineno
        # Registries found by identity: a dict in place, a mapping proxy by a re-bound copy.
        assert plant_target.BY_NAME["within_limit"] is new
        assert plant_target.CHECKS["within_limit"] is new
        assert plant_target.CHECKS is not before[3]
        assert plant_target.CHECKS["accepts"] is plant_target.accepts
    assert _state() == before
    assert plant_target.within_limit is original
    assert plant_target.accepts(plant_target.LIMIT)


def _inside_accepts_plant(before: tuple[object, ...]) -> None:
    assert vars(plant_target.accepts)["tag"] == "checked"
    assert plant_target.accepts is not before[1]
    assert not plant_target.accepts(0)
    assert plant_target.accepts(1)
    assert plant_target.BY_NAME["accepts"] is plant_target.accepts
    assert plant_target.SIZES == {"small": 2, "large": 3}
    raise RuntimeError("boom")


def test_a_planted_function_gets_its_decorators_and_tables_can_be_planted() -> None:
    """Also: everything is restored when the block raises."""
    before = _state()
    patches = [
        SourcePatch(TARGET, "return n >= 0 and", "return n > 0 and"),
        SourcePatch(TARGET, '"small": 1', '"small": 2'),
    ]
    with pytest.raises(RuntimeError, match="boom"), planted(patches, scope=SCOPE):
        _inside_accepts_plant(before)
    assert _state() == before
    assert plant_target.accepts(0)


def test_two_edits_of_one_definition_are_planted_together() -> None:
    patches = [
        SourcePatch(TARGET, "return n >= 0 and", "return n > 0 and"),
        SourcePatch(TARGET, "within_limit(n)\n", "within_limit(n - 1)\n"),
    ]
    with planted(patches, scope=SCOPE):
        assert not plant_target.accepts(0)
        assert plant_target.accepts(plant_target.LIMIT + 1)
    assert plant_target.accepts(0)


def test_a_load_time_plant_refuses_a_module_already_imported() -> None:
    hooks = list(sys.meta_path)
    with pytest.raises(PlantError, match="plant_target: already imported"):
        install_at_load([LIMIT_OFF_BY_ONE])
    assert sys.meta_path == hooks


def test_a_load_time_plant_edits_the_source_before_the_first_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ql3_plant_probe.py").write_text("def answer() -> int:\n    return 41 + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ql3_plant_probe", raising=False)
    with pytest.raises(PlantError, match=r"ql3_plant_probe: .* 0 times"):
        install_at_load([SourcePatch("ql3_plant_probe", "return 40 + 1", "return 40")])
    planter = install_at_load([SourcePatch("ql3_plant_probe", "return 41 + 1", "return 41")])
    try:
        assert planter.loaded == []
        import ql3_plant_probe  # type: ignore[import-not-found]  # noqa: PLC0415

        assert ql3_plant_probe.answer() == 41
        assert planter.loaded == ["ql3_plant_probe"]
    finally:
        planter.uninstall()
        sys.modules.pop("ql3_plant_probe", None)
    assert planter not in sys.meta_path


def test_the_plugin_installs_only_a_known_plant() -> None:
    assert plant_plugin.install_from_environ({}) is None
    with pytest.raises(pytest.UsageError, match="QL3_PLANT=nope: no such plant"):
        plant_plugin.install_from_environ({plant_plugin.ENV: "nope"})
    with pytest.raises(pytest.UsageError, match="plant_target: already imported"):
        plant_plugin.install_from_environ({plant_plugin.ENV: "selftest_limit"})


def _pytest_run(plant: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != plant_plugin.ENV}
    if plant is not None:
        env[plant_plugin.ENV] = plant
    command = [
        sys.executable,
        "-m",
        "pytest",
        "model_tests/quality/test_plant_target.py",
        "-p",
        "model_tests.quality.plant_plugin",
        "-p",
        "no:cacheprovider",
        "-n",
        "0",  # in this process: the plant is loaded where the tests run, and -x stops at once
    ]
    return subprocess.run(  # noqa: S603 - the interpreter running this test, fixed arguments
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.slow
def test_a_whole_pytest_run_tests_the_code_planted_at_load() -> None:
    clean = _pytest_run(None)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "1 passed" in clean.stdout
    mutated = _pytest_run("selftest_limit")
    assert mutated.returncode == 1, mutated.stdout + mutated.stderr
    assert "planted: selftest_limit in model_tests.quality.plant_target" in mutated.stdout
    assert "model_tests.quality.plant_target: planted" in mutated.stdout
    assert "1 failed" in mutated.stdout
