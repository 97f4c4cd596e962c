"""Naming the runner under test: `edge`, `cluster`, `reference` or `package.module:factory`.

A factory is a zero-argument callable returning a fresh `ConformanceAdapter` (a new, empty
database per call: the replayer calls it once per trace). Built-in names map to the project's
runners; anything with a colon is imported, which is how a third-party adapter joins the suite
(`qlk conform --runner mypkg.adapter:make_adapter`, or the pytest plugin's `--ql3-runner`).

The module is looked up in the current directory first, as `python -m` and uvicorn's app-dir
do: an adapter author runs `qlk conform --runner jsonstore:make_adapter` from the folder that
holds `jsonstore.py`, without installing it and without setting `PYTHONPATH` (issue 16 item 4).
"""

from __future__ import annotations

import importlib
import os
import sys
import typing
from collections.abc import Callable
from typing import Any

from conformance.run.adapter import ConformanceAdapter, ReferenceAdapter

AdapterFactory = Callable[[], ConformanceAdapter]

BUILTIN = {
    "edge": "conformance.run.edge:make_edge_adapter",
    "cluster": "conformance.run.cluster:make_cluster_adapter",
}


class FactoryError(ValueError):
    """A runner name that cannot be turned into an adapter factory; the message says what to
    fix, in one line."""


def _importable_from_here() -> None:
    """Put the current directory first on the import path unless it is there already, as
    `python -m` does. A console script (`qlk`, `pytest`) starts with its own bin folder there
    instead, so without this a module beside the user would not be found."""
    here = os.getcwd()
    if any(os.path.abspath(entry or os.curdir) == here for entry in sys.path):
        return
    sys.path.insert(0, here)
    importlib.invalidate_caches()


def resolve(spec: str, *, dsn: str | None = None) -> AdapterFactory:
    """The adapter factory named by `spec`. `dsn` is passed to the cluster runner."""
    if spec == "reference":
        return ReferenceAdapter
    target = BUILTIN.get(spec, spec)
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise FactoryError(
            f"--runner {spec!r}: use edge, cluster, reference or package.module:factory"
        )
    if spec not in BUILTIN:
        _importable_from_here()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise FactoryError(f"--runner {spec!r}: cannot import {module_name} ({exc})") from None
    factory: Any = getattr(module, attribute, None)
    if not callable(factory):
        raise FactoryError(f"--runner {spec!r}: {module_name} has no callable {attribute!r}")
    if spec == "cluster":
        if not dsn:
            raise FactoryError(
                "--runner cluster needs a database: pass --dsn or set QL3_PG_DSN "
                "(e.g. postgresql://postgres@127.0.0.1:5432/test)"
            )
        return lambda: factory(dsn)
    return typing.cast(AdapterFactory, factory)
