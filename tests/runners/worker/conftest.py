"""Fixtures shared by the Worker runtime tests: a real journal of each adapter (`journal`,
parametrized file / SQLite, acquired and released) and the edge runner as the control plane
on a real SQLite file (`control`). A module that defines its own `journal` fixture overrides
this one."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from runners.worker.journal.port import JournalStore
from tests.support.worker_fixtures import JOURNALS, ControlPlane, ManualClock


@pytest.fixture(params=sorted(JOURNALS))
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JournalStore]:
    store = JOURNALS[request.param](tmp_path / "journal")
    store.acquire()
    yield store
    with contextlib.suppress(Exception):
        store.release()


@pytest.fixture
def control(tmp_path: Path) -> Iterator[ControlPlane]:
    plane = ControlPlane(tmp_path / "control.sqlite3", ManualClock())
    yield plane
    plane.close()
