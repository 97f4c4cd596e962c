"""`EngineControlPlane` reads the Worker session inside the command's transaction (issue 17
item 2: "the commands that take a WorkerSession read it from [the registry] table inside their
transaction"), and its E-3 read writes nothing; on the edge runner's real SQLite file.

The session view here is in memory (the cluster registry plugs in the same way): a storage
wrapper changes it at the moment a transaction begins, i.e. after the command was built and
before the kernel decides, so a test can tell which value the kernel used.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kernel.entities import WorkerSession
from kernel.specs.codes import Code
from kernel.specs.states import LeaseStatus, WorkerSessionStatus
from kernel.worker.control_plane_view import AuthorityFacts
from kernel.worker.record import Offer
from runners.edge.store import EdgeStore
from runners.engine import StorageTransaction
from runners.worker.control_plane import EngineControlPlane
from runners.worker.ports import ControlPlaneUnavailable
from tests.support.worker_fixtures import (
    DURATION_MS,
    WORKER_ID,
    ControlPlane,
    ManualClock,
    run_id,
    session,
)


class BeginHook:
    """A `Storage` around the edge store that runs `on_begin` as each transaction begins and
    remembers the transactions it opened."""

    def __init__(self, inner: EdgeStore) -> None:
        self.inner = inner
        self.on_begin: Callable[[], None] = lambda: None
        self.opened: list[StorageTransaction] = []

    @contextmanager
    def transaction(self) -> Iterator[StorageTransaction]:
        self.on_begin()
        with self.inner.transaction() as tx:
            self.opened.append(tx)
            yield tx


class Sessions:
    """The session view, recording the transaction each read ran in."""

    def __init__(self, current: dict[str, WorkerSession]) -> None:
        self.current = current
        self.read_in: list[StorageTransaction] = []
        self.fail = False

    def __call__(self, tx: StorageTransaction, worker_id: str) -> WorkerSession | None:
        self.read_in.append(tx)
        if self.fail:
            raise sqlite3.OperationalError("disk I/O error")
        return self.current.get(worker_id)


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    control = ControlPlane(tmp_path / "control.sqlite3", ManualClock())
    yield control
    control.close()


def _client(plane: ControlPlane) -> tuple[EngineControlPlane, BeginHook, Sessions]:
    hook = BeginHook(plane.store)
    sessions = Sessions(dict(plane.sessions))
    return EngineControlPlane(hook, sessions, plane.clock), hook, sessions


def _lease_version(plane: ControlPlane, offer: Offer) -> tuple[int, LeaseStatus]:
    attempt_id = offer.lease.attempt_id
    row = plane.aggregate(attempt_id).lease(attempt_id, offer.lease.lease_generation)
    assert row is not None
    return row.version, row.status


def test_the_session_is_the_one_read_in_the_transaction(plane: ControlPlane) -> None:
    """Online when the command is built, offline when its transaction begins: the kernel
    refuses with `worker_unavailable` (the in-transaction value), and the read ran in the very
    transaction the command ran in."""
    offer = plane.admit_and_grant(run_id())
    client, hook, sessions = _client(plane)
    before = _lease_version(plane, offer)

    def go_offline() -> None:
        sessions.current[WORKER_ID] = session(WorkerSessionStatus.OFFLINE)

    hook.on_begin = go_offline
    answer = client.acknowledge_starting(offer.lease)
    assert answer.code is Code.WORKER_UNAVAILABLE
    assert _lease_version(plane, offer) == before
    assert sessions.read_in == [hook.opened[0]]  # read inside the command's transaction


def test_a_session_known_only_inside_the_transaction_is_used(plane: ControlPlane) -> None:
    """Unknown when the command is built, registered when its transaction begins: the command
    runs with it (a view read before the transaction would have answered `worker_unknown`)."""
    offer = plane.admit_and_grant(run_id())
    client, hook, sessions = _client(plane)
    registered = sessions.current.pop(WORKER_ID)

    def register() -> None:
        sessions.current[WORKER_ID] = registered

    hook.on_begin = register
    answer = client.acknowledge_starting(offer.lease)
    assert answer.code is Code.APPLIED
    assert answer.version == offer.lease.version + 1


def test_an_unknown_worker_rolls_back_and_is_worker_unknown(plane: ControlPlane) -> None:
    """No session inside the transaction: `ControlPlaneUnavailable("worker_unknown")` (not a
    storage error), nothing written, and the store is free for the next command."""
    offer = plane.admit_and_grant(run_id())
    client, _hook, sessions = _client(plane)
    registered = sessions.current.pop(WORKER_ID)
    before = _lease_version(plane, offer)
    with pytest.raises(ControlPlaneUnavailable) as raised:
        client.renew(offer.lease, DURATION_MS)
    assert raised.value.reason == "worker_unknown"
    assert _lease_version(plane, offer) == before
    sessions.current[WORKER_ID] = registered
    assert client.acknowledge_starting(offer.lease).code is Code.APPLIED


def test_a_failing_session_read_is_a_storage_failure(plane: ControlPlane) -> None:
    offer = plane.admit_and_grant(run_id())
    client, _hook, sessions = _client(plane)
    sessions.fail = True
    before = _lease_version(plane, offer)
    with pytest.raises(ControlPlaneUnavailable) as raised:
        client.acknowledge_starting(offer.lease)
    assert raised.value.reason == "storage"
    assert _lease_version(plane, offer) == before


def test_the_read_writes_nothing_and_fails_as_unavailable(plane: ControlPlane) -> None:
    """E-3: `read_authority` answers the lease's facts in one transaction and changes nothing
    (the canonical projection is equal before and after); an unknown lease is `None`; a
    storage failure is `ControlPlaneUnavailable("storage")`."""
    offer = plane.admit_and_grant(run_id())
    client, hook, _sessions = _client(plane)
    lease = offer.lease
    projection = plane.store.project()
    facts = client.read_authority(lease.run_id, lease.attempt_id, lease.lease_generation)
    assert plane.store.project() == projection
    assert len(hook.opened) == 1
    assert isinstance(facts, AuthorityFacts)
    assert (facts.lease_status, facts.lease_version) == (LeaseStatus.LEASED, lease.version)
    assert (facts.worker_id, facts.worker_session_id) == (lease.worker_id, lease.worker_session_id)
    assert facts.terminal is None
    assert lease.lease_token.reveal() not in repr(facts)
    assert client.read_authority(lease.run_id, lease.attempt_id, 2) is None
    assert client.read_authority("run-x", lease.attempt_id, lease.lease_generation) is None
    plane.store.close()
    with pytest.raises(ControlPlaneUnavailable) as raised:
        client.read_authority(lease.run_id, lease.attempt_id, lease.lease_generation)
    assert raised.value.reason == "storage"
