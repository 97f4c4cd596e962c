"""The tiny test that must catch the self-test plant (`plants.PLANTS["selftest_limit"]`).

Run alone it passes; `test_plant.py` runs it in a subprocess with the load-time plant
(`-p model_tests.quality.plant_plugin`, `QL3_PLANT=selftest_limit`), where it must fail.
"""

from __future__ import annotations

from model_tests.quality import plant_target


def test_the_limit_itself_is_within_the_limit() -> None:
    assert plant_target.within_limit(plant_target.LIMIT)
    assert plant_target.accepts(plant_target.LIMIT)
    assert not plant_target.accepts(plant_target.LIMIT + 1)
