"""A tiny module for the planting mechanism's self-test (`plant.py`, `test_plant.py`).

It has what the kernel has, in small: a helper looked up at call time, a decorated function, a
table, and registries (a dict and a mapping proxy) that hold the functions by identity. Nothing
but `test_plant_target.py` and `test_plant.py` imports it, so a load-time plant reaches it first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final

LIMIT = 3


def _tagged(fn: Callable[[int], bool]) -> Callable[[int], bool]:
    """A decorator whose effect a planted copy must carry too."""
    vars(fn)["tag"] = "checked"
    return fn


def within_limit(n: int) -> bool:
    return n <= LIMIT


@_tagged
def accepts(n: int) -> bool:
    return n >= 0 and within_limit(n)


SIZES: Final[Mapping[str, int]] = MappingProxyType({"small": 1, "large": LIMIT})

BY_NAME: dict[str, Callable[[int], bool]] = {"accepts": accepts, "within_limit": within_limit}
CHECKS: Final[Mapping[str, Callable[[int], bool]]] = MappingProxyType(BY_NAME.copy())
