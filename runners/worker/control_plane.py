"""The Worker's control-plane client on a runner's storage port (SPEC §1.7 T1-T6, §3.2, §3.5,
E-3).

`EngineControlPlane` is the in-process client a Worker uses when the control plane is a runner
in the same deployment (edge: the SQLite `EdgeStore`; cluster: the `ClusterStore`): each call
builds the kernel command from the journal's lease snapshot, runs it through
`runners.engine.execute_observed` (one transaction, the kernel decides, replay semantics
T2r/T4r/T6r included), and answers with the kernel's code plus the lease's current version and
expiry. The Worker session a fenced command carries is read inside that transaction, after the
load (`resolve=`): the registry's value at database time under the command's own snapshot,
never one read before the transaction began (issue 17). `read_authority` is the one read
(E-3): the lease authority and completion facts (`kernel.worker.authority_facts`) in one
transaction that writes nothing. No business rule lives here.

`offer_for` is the dispatcher's half of §3.2: the offer the control plane hands a Worker for a
granted lease (its `offer_id` derived from the lease authority, §0.4, and the ExecutionSpec's
digest), so tests and the kill matrix deliver exactly what a control plane would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from kernel import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    Command,
    CompleteWithLease,
    FailStart,
    Fence,
    Outcome,
    RenewLease,
    RunAggregate,
    Secret,
    WorkerSession,
    execution_spec_digest,
    offer_id,
)
from kernel.specs import DeliveryKind, LeaseStatus, WorkerSessionStatus
from kernel.worker import (
    AuthorityFacts,
    CompletionSubmission,
    Offer,
    OfferCandidate,
    OfferLease,
    OfferWorker,
    authority_facts,
    lease_answer,
)
from runners.engine import Observe, Storage, StorageTransaction, execute_observed
from runners.worker.ports import Clock, ControlPlaneUnavailable, LeaseAck

#: The control plane's view of a Worker (K-4: a command input, never looked up by the kernel),
#: read in the command's open transaction (the cluster registry's table at database time; an
#: in-memory view ignores the transaction). `None`: the control plane does not know the Worker.
SessionView = Callable[[StorageTransaction, str], WorkerSession | None]

_Fenced = AcknowledgeStarting | RenewLease | AcknowledgeRunning | FailStart | CompleteWithLease


def _unresolved(worker_id: str, session_id: str, generation: int) -> WorkerSession:
    """The session a command is built with before its transaction (the fence's own names);
    `resolve` replaces it after the load. Were it ever to reach the kernel it is offline and
    expired, so the fence refuses (fail closed)."""
    return WorkerSession(worker_id, session_id, generation, WorkerSessionStatus.OFFLINE, 0, ())


def _fence(lease: OfferLease, expected_version: int | None = None) -> Fence:
    return Fence(
        worker_id=lease.worker_id,
        worker_session_id=lease.worker_session_id,
        worker_generation=lease.worker_generation,
        lease_generation=lease.lease_generation,
        lease_token=lease.lease_token,
        expected_version=lease.version if expected_version is None else expected_version,
    )


class EngineControlPlane:
    """`ControlPlaneClient` over a `runners.engine.Storage` (module docstring).

    :param storage: the control plane's store (edge or cluster).
    :param sessions: the control plane's Worker session view, called with the command's open
        transaction and the fence's Worker id.
    :param clock: the control plane's observation time for each command.
    :param observe: when given, reads the observation time inside each command's transaction
        instead of `clock` (the cluster: the database's time, as every cluster command).
    """

    __slots__ = ("_observe", "_sessions", "_storage")

    def __init__(
        self,
        storage: Storage,
        sessions: SessionView,
        clock: Clock,
        *,
        observe: Observe | None = None,
    ) -> None:
        self._storage = storage
        self._sessions = sessions
        self._observe: Observe = (lambda _tx: clock()) if observe is None else observe

    def __repr__(self) -> str:
        return "EngineControlPlane()"

    # -- ControlPlaneClient ----------------------------------------------------------------
    def acknowledge_starting(self, lease: OfferLease) -> LeaseAck:
        worker = _unresolved(lease.worker_id, lease.worker_session_id, lease.worker_generation)
        command = AcknowledgeStarting(lease.run_id, lease.attempt_id, _fence(lease), worker)
        return self._run(command, lease)

    def renew(self, lease: OfferLease, duration_ms: int) -> LeaseAck:
        worker = _unresolved(lease.worker_id, lease.worker_session_id, lease.worker_generation)
        command = RenewLease(lease.run_id, lease.attempt_id, _fence(lease), worker, duration_ms)
        return self._run(command, lease)

    def acknowledge_running(
        self, lease: OfferLease, executor_handle: str, started_at_ms: int
    ) -> LeaseAck:
        worker = _unresolved(lease.worker_id, lease.worker_session_id, lease.worker_generation)
        command = AcknowledgeRunning(
            lease.run_id, lease.attempt_id, _fence(lease), worker, executor_handle, started_at_ms
        )
        return self._run(command, lease)

    def fail_start(self, lease: OfferLease, failure_code: str) -> LeaseAck:
        worker = _unresolved(lease.worker_id, lease.worker_session_id, lease.worker_generation)
        command = FailStart(lease.run_id, lease.attempt_id, _fence(lease), worker, failure_code)
        return self._run(command, lease)

    def complete(self, submission: CompletionSubmission) -> LeaseAck:
        s = submission
        fence = Fence(
            worker_id=s.worker_id,
            worker_session_id=s.worker_session_id,
            worker_generation=s.worker_generation,
            lease_generation=s.lease_generation,
            lease_token=s.lease_token,
            expected_version=s.expected_version,
        )
        worker = _unresolved(s.worker_id, s.worker_session_id, s.worker_generation)
        command = CompleteWithLease(
            s.run_id, s.attempt_id, fence, worker, s.callback_sequence, s.outcome, s.exit_code
        )
        return self._ack(self._execute(command), s.attempt_id, s.lease_generation)

    def read_authority(
        self, run_id: str, attempt_id: str, lease_generation: int
    ) -> AuthorityFacts | None:
        """E-3: the aggregate loaded in one transaction that writes nothing, answered by the
        kernel's `authority_facts`. A storage failure is `ControlPlaneUnavailable("storage")`."""
        try:
            with self._storage.transaction() as tx:
                aggregate = tx.load_run_of_attempt(attempt_id)
            return authority_facts(aggregate, run_id, attempt_id, lease_generation)
        except Exception:  # storage or lock failure: nothing is known
            raise ControlPlaneUnavailable("storage") from None

    # -- internals --------------------------------------------------------------------------
    def _execute(self, command: _Fenced) -> Outcome:
        worker_id = command.fence.worker_id

        def resolve(tx: StorageTransaction, _built: Command) -> Command:
            # The session is read here, in the command's transaction after the load: the value
            # the kernel decides on is the one committed under the same snapshot (issue 17).
            worker = self._sessions(tx, worker_id)
            if worker is None:  # raising rolls the transaction back; nothing was written
                raise ControlPlaneUnavailable("worker_unknown")
            return dataclasses.replace(command, worker=worker)

        try:
            # The time is read inside the transaction, after the load (and its locks): the
            # times of conflicting commands then follow their commit order (PG-4).
            return execute_observed(self._storage, command, self._observe, resolve=resolve)
        except ControlPlaneUnavailable:
            raise
        except Exception:  # storage or lock failure: nothing is known about the outcome
            raise ControlPlaneUnavailable("storage") from None

    def _run(
        self,
        command: AcknowledgeStarting | RenewLease | AcknowledgeRunning | FailStart,
        lease: OfferLease,
    ) -> LeaseAck:
        return self._ack(self._execute(command), lease.attempt_id, lease.lease_generation)

    def _ack(self, outcome: Outcome, attempt_id: str, lease_generation: int) -> LeaseAck:
        row = None
        try:
            with self._storage.transaction() as tx:
                aggregate = tx.load_run_of_attempt(attempt_id)
                if aggregate is not None:
                    row = aggregate.lease(attempt_id, lease_generation)
        except Exception:  # the answer stands; only the version is unknown
            row = None
        return lease_answer(outcome.code, row)


def offer_for(
    aggregate: RunAggregate,
    attempt_id: str,
    lease_token: Secret,
    execution_spec: Mapping[str, object],
    delivery_kind: DeliveryKind = DeliveryKind.NEW_CLAIM,
) -> Offer:
    """The offer for the Attempt's `leased` lease (§3.2), as the dispatcher sends it.

    :raises ValueError: the Attempt has no `leased` lease (nothing to offer).
    """
    attempt = aggregate.attempt(attempt_id)
    row = aggregate.leased_lease(attempt_id)
    if attempt is None or row is None:
        raise ValueError("offer_for: the Attempt has no leased lease")
    run = aggregate.run
    lease = OfferLease(
        run_id=run.run_id,
        attempt_id=attempt_id,
        lease_generation=row.lease_generation,
        version=row.version,
        status=LeaseStatus.LEASED,
        worker_id=row.worker_id,
        worker_session_id=row.worker_session_id,
        worker_generation=row.worker_generation,
        lease_token=lease_token,
        expires_at_ms=row.expires_at_ms,
    )
    return Offer(
        offer_id=offer_id(
            attempt_id,
            row.lease_generation,
            row.worker_id,
            row.worker_session_id,
            row.worker_generation,
        ),
        execution_spec_digest=execution_spec_digest(execution_spec),
        delivery_kind=delivery_kind,
        candidate=OfferCandidate(
            run_id=run.run_id,
            attempt_id=attempt_id,
            project_id=run.project_id,
            task_id=run.task_id,
            task_revision=run.task_revision,
            executor_type=attempt.executor_type,
        ),
        worker=OfferWorker(row.worker_id, row.worker_session_id, row.worker_generation),
        lease=lease,
        execution_spec=execution_spec,
    )
