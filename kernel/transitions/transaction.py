"""One kernel transaction: collects row changes and Events and turns them into an `Applied`.

Every transition builds its result through `Tx`, so the mechanics that the SPEC states once are
implemented once: the Run CAS and version bump (V-1), the lease version bump and the Attempt's
lease mirror (V-2, I-6), Event numbering, dedupe keys and times (V-3, V-4), the effect order
(the global lock order Run -> Attempt -> policy -> lease, D-7), and the check of every status
change against the literal transition tables (`kernel.specs.tables`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kernel.effects import (
    AppendEvent,
    Effect,
    InsertAttempt,
    InsertLease,
    InsertPolicy,
    InsertRun,
    UpdateAttempt,
    UpdateLease,
    UpdatePolicy,
    UpdateRun,
)
from kernel.entities import Attempt, Event, Lease, Payload, Run, RunAggregate, RunRetryPolicy
from kernel.outcomes import Applied, Rejected
from kernel.specs.codes import Code
from kernel.specs.states import Actor
from kernel.specs.tables import ATTEMPT_TABLE, LEASE_TABLE, RUN_TABLE, CommandName


def event_id(run_id: str, seq: int) -> str:
    """Event ids are derived, not drawn: unique per Run and stable under replay."""
    return f"evt:{run_id}:{seq}"


class Tx:
    """A mutable scratchpad that lives for one transition call and never escapes it."""

    __slots__ = (
        "_attempt_order",
        "_attempts",
        "_events",
        "_inserted_attempts",
        "_inserted_leases",
        "_inserted_policy",
        "_lease_order",
        "_leases",
        "command",
        "now",
        "old",
        "policy",
        "run",
    )

    def __init__(self, old: RunAggregate | None, command: str, now: int, run: Run) -> None:
        self.old = old
        self.command = command
        self.now = now
        self.run = run
        self.policy: RunRetryPolicy | None = old.policy if old else None
        self._attempts: dict[str, Attempt] = {}
        self._attempt_order: list[str] = []
        self._leases: dict[tuple[str, int], Lease] = {}
        self._lease_order: list[tuple[str, int]] = []
        self._inserted_attempts: set[str] = set()
        self._inserted_leases: set[tuple[str, int]] = set()
        self._inserted_policy = False
        self._events: list[
            tuple[str, Actor, str | None, str | None, Payload, str | None, str | None]
        ] = []
        if old is not None:
            for attempt in old.attempts:
                self._attempts[attempt.attempt_id] = attempt
                self._attempt_order.append(attempt.attempt_id)
            for lease in old.leases:
                key = (lease.attempt_id, lease.lease_generation)
                self._leases[key] = lease
                self._lease_order.append(key)

    @classmethod
    def begin(cls, old: RunAggregate, command: str, now: int) -> Tx:
        return cls(old, command, now, old.run)

    @classmethod
    def create(cls, run: Run, command: str, now: int) -> Tx:
        return cls(None, command, now, run)

    # -- row changes -----------------------------------------------------------------------
    def set_run(self, **changes: Any) -> None:
        self.run = dataclasses.replace(self.run, **changes)

    def attempt(self, attempt_id: str) -> Attempt:
        return self._attempts[attempt_id]

    def set_attempt(self, attempt_id: str, **changes: Any) -> None:
        self._attempts[attempt_id] = dataclasses.replace(self._attempts[attempt_id], **changes)

    def insert_attempt(self, attempt: Attempt) -> None:
        self._attempts[attempt.attempt_id] = attempt
        self._attempt_order.append(attempt.attempt_id)
        self._inserted_attempts.add(attempt.attempt_id)

    def set_policy(self, **changes: Any) -> None:
        assert self.policy is not None
        self.policy = dataclasses.replace(
            self.policy, **changes, version=self.policy.version + 1, updated_at_ms=self.now
        )

    def insert_policy(self, policy: RunRetryPolicy) -> None:
        self.policy = policy
        self._inserted_policy = True

    def lease(self, attempt_id: str, generation: int) -> Lease:
        return self._leases[(attempt_id, generation)]

    def set_lease(self, attempt_id: str, generation: int, **changes: Any) -> None:
        """V-2: every lease mutation adds exactly one to its version and stamps the time."""
        key = (attempt_id, generation)
        lease = self._leases[key]
        self._leases[key] = dataclasses.replace(
            lease, **changes, version=lease.version + 1, updated_at_ms=self.now
        )

    def insert_lease(self, lease: Lease) -> None:
        key = (lease.attempt_id, lease.lease_generation)
        self._leases[key] = lease
        self._lease_order.append(key)
        self._inserted_leases.add(key)

    def event(
        self,
        type_: str,
        actor: Actor,
        attempt_id: str | None = None,
        code: str | None = None,
        payload: Payload = (),
        *,
        step_run_id: str | None = None,
        event_id: str | None = None,
    ) -> None:
        """Append an Event; `event_id` only where the SPEC derives it otherwise (the Task
        admission Event's `wte:` id, §4.6), `step_run_id` on Workflow Task Events (§4)."""
        self._events.append((type_, actor, attempt_id, code, payload, step_run_id, event_id))

    # -- commit ----------------------------------------------------------------------------
    def commit(self, code: Code = Code.APPLIED, *, bump_run: bool = True) -> Applied | Rejected:
        """Build the `Applied` outcome. `bump_run=False` only for renew-only transactions (V-1).
        An illegal status change (not in the tables) fails closed as `INVALID_TRANSITION`."""
        old = self.old
        # V-2 / I-6: the Attempt mirrors its current lease version in the same transaction.
        for (attempt_id, generation), lease in self._leases.items():
            attempt = self._attempts[attempt_id]
            if attempt.lease_generation == generation and attempt.lease_version != lease.version:
                self._attempts[attempt_id] = dataclasses.replace(
                    attempt, lease_version=lease.version
                )

        run = self.run
        if bump_run or old is None:
            version = 1 if old is None else old.run.version + 1
            run = dataclasses.replace(
                run,
                version=version,
                event_seq=(0 if old is None else old.run.event_seq) + len(self._events),
                updated_at_ms=self.now,
            )
        elif self._events or run != old.run:
            raise AssertionError("a renew-only transaction may not change the Run or add Events")

        if not self._legal(run):
            return Rejected(Code.INVALID_TRANSITION)

        effects: list[Effect] = []
        if old is None:
            effects.append(InsertRun(run))
        elif bump_run:
            effects.append(UpdateRun(run, expected_version=old.run.version))
        old_attempts = {a.attempt_id: a for a in old.attempts} if old else {}
        for attempt_id in self._attempt_order:
            attempt = self._attempts[attempt_id]
            if attempt_id in self._inserted_attempts:
                effects.append(InsertAttempt(attempt))
            elif attempt != old_attempts[attempt_id]:
                before = old_attempts[attempt_id]
                effects.append(UpdateAttempt(attempt, before.status, before.lease_version))
        if self.policy is not None:
            if self._inserted_policy:
                effects.append(InsertPolicy(self.policy))
            elif old is not None and old.policy is not None and self.policy != old.policy:
                effects.append(UpdatePolicy(self.policy, expected_version=old.policy.version))
        old_leases = {(x.attempt_id, x.lease_generation): x for x in old.leases} if old else {}
        for key in self._lease_order:
            lease = self._leases[key]
            if key in self._inserted_leases:
                effects.append(InsertLease(lease))
            elif lease != old_leases[key]:
                before_lease = old_leases[key]
                effects.append(UpdateLease(lease, before_lease.version, before_lease.status))
        first_seq = (0 if old is None else old.run.event_seq) + 1
        for offset, event in enumerate(self._events):
            type_, actor, ev_attempt, ev_code, payload, ev_step, ev_id = event
            seq = first_seq + offset
            subject = ev_attempt or ev_step or run.run_id
            effects.append(
                AppendEvent(
                    Event(
                        event_id=ev_id if ev_id is not None else event_id(run.run_id, seq),
                        run_id=run.run_id,
                        seq=seq,
                        type=type_,
                        actor=actor,
                        dedupe_key=f"{self.command}:{type_}:{subject}:v{run.version}",
                        at_ms=self.now,
                        attempt_id=ev_attempt,
                        step_run_id=ev_step,
                        code=ev_code,
                        payload=payload,
                    )
                )
            )
        aggregate = RunAggregate(
            run=run,
            attempts=tuple(sorted(self._attempts.values(), key=lambda a: a.number)),
            policy=self.policy,
            leases=tuple(self._leases[k] for k in sorted(self._leases)),
        )
        return Applied(aggregate, tuple(effects), code)

    def _legal(self, run: Run) -> bool:
        """Every status change must be an edge of the literal tables for this command."""
        old = self.old
        try:
            cmd = CommandName(self.command)
        except ValueError:
            return False  # not a command of the tables: nothing it does is legal
        if old is None:
            if not RUN_TABLE.allows(None, cmd, run.status):
                return False
        # Every applied transition on an existing Run is a table pair, even one that keeps the
        # Run's status (T2, T3, T9, `request_cancel`).
        elif not RUN_TABLE.allows(old.run.status, cmd, run.status):
            return False
        old_attempts = {a.attempt_id: a for a in old.attempts} if old else {}
        for attempt_id, attempt in self._attempts.items():
            if attempt_id in self._inserted_attempts:
                if not ATTEMPT_TABLE.allows(None, cmd, attempt.status):
                    return False
                continue
            before = old_attempts[attempt_id]
            if attempt != before and not ATTEMPT_TABLE.allows(before.status, cmd, attempt.status):
                return False
        old_leases = {(x.attempt_id, x.lease_generation): x for x in old.leases} if old else {}
        for key, lease in self._leases.items():
            if key in self._inserted_leases:
                if not LEASE_TABLE.allows(None, cmd, lease.status):
                    return False
                continue
            before_lease = old_leases[key]
            if lease != before_lease and not LEASE_TABLE.allows(
                before_lease.status, cmd, lease.status
            ):
                return False
        return True
