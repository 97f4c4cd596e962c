"""Naming the runner under test: `edge`, `cluster`, `reference` or `package.module:factory`.

A factory is a zero-argument callable returning a fresh `ConformanceAdapter` (a new, empty
database per call: the replayer calls it once per trace). Built-in names map to the project's
runners; anything with a colon is imported, which is how a third-party adapter joins the suite
(`qlk conform --runner mypkg.adapter:make_adapter`, or the pytest plugin's `--ql3-runner`).
"""

from __future__ import annotations

import importlib
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
