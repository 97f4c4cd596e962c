"""Named load-time plants: the patches `plant_plugin` installs for `QL3_PLANT=<name>`.

Each entry is a tuple of `SourcePatch`es of real source text, planted by an import hook before
the module is first executed, so that a whole pytest run tests the mutated code, e.g.

    QL3_PLANT=selftest_limit .venv/bin/python -m pytest model_tests/quality/test_plant_target.py \\
        -p model_tests.quality.plant_plugin

This module imports nothing but `plant` (naming a patch imports nothing), so loading it never
imports a module it plants into.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from model_tests.quality.plant import SourcePatch

PLANTS: Final[Mapping[str, tuple[SourcePatch, ...]]] = MappingProxyType(
    {
        # The self-test of the mechanism: `<=` becomes `<`, which test_plant_target.py catches.
        "selftest_limit": (
            SourcePatch(
                "model_tests.quality.plant_target", "return n <= LIMIT", "return n < LIMIT"
            ),
        ),
    }
)
