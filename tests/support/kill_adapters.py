"""Third-party adapters for kill mode through the adapter port (`conformance.run.kill_port`),
importable by name from a child process (never runners under test of their own)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from examples.adapter.jsonstore import Data, JsonAdapter, JsonStore, JsonTransaction, make_adapter
from kernel.approved_action import AnyActionEffect
from kernel.workflow import WorkflowEffect


class _EagerTransaction(JsonTransaction):
    """Writes the whole file after every effect: each effect is its own commit."""

    def __init__(self, data: Data, store: JsonStore) -> None:
        super().__init__(data)
        self._store = store

    def execute(self, effect: WorkflowEffect | AnyActionEffect) -> None:
        super().execute(effect)
        self._store._write(self.data)  # the planted bug: persisted outside one transaction


class NonAtomicJsonStore(JsonStore):
    """The example JSON store with its persistence made non-atomic: a write of m effects is m
    separate commits, so a process killed between two effects leaves a torn state (RUN-06)."""

    @contextmanager
    def transaction(self) -> Iterator[JsonTransaction]:
        yield _EagerTransaction(self._read(), self)


def make_non_atomic(locator: str | None = None) -> JsonAdapter:
    """`examples.adapter.jsonstore:make_adapter` over `NonAtomicJsonStore`."""
    adapter = make_adapter(locator)
    adapter.store = NonAtomicJsonStore(Path(adapter.store.path))
    return adapter


class WithoutLocator(JsonAdapter):
    """Declares `kill` but offers no `locator()`: the port is incomplete."""

    locator = None  # type: ignore[assignment]


def make_without_locator() -> WithoutLocator:
    folder = Path(tempfile.mkdtemp(prefix="jsonstore-"))
    return WithoutLocator(folder / "db.json", owned=folder)
