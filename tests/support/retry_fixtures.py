"""Shared builders for the admission, lost-retry and cancellation tests.

Every state is reached through the kernel's own transitions (admission, grant, starting ACK,
edge expiry T8, lost-retry steps, cancellation), never by building rows by hand. The one
exception is `with_policy`, which the precedence tests use to store a policy that admission
would refuse (see its docstring).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from kernel import (
    AcknowledgeStarting,
    AdmitRun,
    Applied,
    CancelReason,
    Command,
    ConvergeCancel,
    Event,
    ExpireWithLease,
    Fence,
    GrantLease,
    LostRetryStep,
    Outcome,
    PolicyDefinition,
    Profile,
    RequestCancel,
    RunAggregate,
    RunKind,
    RunOwner,
    RunRetryPolicy,
    Safety,
    Secret,
    WorkerSession,
    WorkerSessionStatus,
    apply,
)

RUN_ID = "run-1"
FIRST_ATTEMPT = "a1"
EXECUTOR = "shell"
WORKER_ID = "w1"
T0 = 1_000_000
LEASE_MS = 30_000

WORKER = WorkerSession(
    worker_id=WORKER_ID,
    session_id="w1-s1",
    generation=1,
    status=WorkerSessionStatus.ONLINE,
    session_expires_at_ms=T0 + 10**12,
    executor_types=(EXECUTOR,),
)

SAFE = (Safety.IDEMPOTENT, Safety.DEDUPLICATED)


def lease_token(attempt_id: str, generation: int) -> Secret:
    """A deterministic test capability; only its digest is ever stored."""
    return Secret.of(f"lease_{attempt_id}_{generation}".ljust(40, "x"), "lease_token")


def policy(
    max_attempts: int = 3,
    retry_on_lost: bool = True,
    safety: Safety = Safety.IDEMPOTENT,
    backoff_base_ms: int = 1_000,
    backoff_max_ms: int = 60_000,
) -> PolicyDefinition:
    return PolicyDefinition(
        max_attempts=max_attempts,
        retry_on_lost=retry_on_lost,
        safety=safety,
        backoff_base_ms=backoff_base_ms,
        backoff_max_ms=backoff_max_ms,
    )


def admit_command(
    provider_policy: PolicyDefinition | None = None,
    *,
    run_id: str = RUN_ID,
    attempt_id: str = FIRST_ATTEMPT,
    project_id: str = "proj",
    task_id: str = "task",
    task_revision: int = 1,
    executor_type: str = EXECUTOR,
    kind: RunKind = RunKind.ORDINARY,
    owner: RunOwner = RunOwner.RUNTIME,
) -> AdmitRun:
    return AdmitRun(
        run_id=run_id,
        attempt_id=attempt_id,
        project_id=project_id,
        task_id=task_id,
        task_revision=task_revision,
        executor_type=executor_type,
        provider_policy=provider_policy,
        kind=kind,
        owner=owner,
    )


@dataclass
class Flow:
    """One Run driven through kernel transitions; keeps the aggregate and its Event log."""

    agg: RunAggregate | None = None
    events: list[Event] = field(default_factory=list)
    now: int = T0

    def step(self, command: Command, at: int | None = None) -> Outcome:
        when = self.now if at is None else at
        outcome = apply(self.agg, command, when)
        if isinstance(outcome, Applied):
            self.agg = outcome.aggregate
            self.events.extend(outcome.events)
            self.now = max(self.now, when)
        return outcome

    def must(self, command: Command, at: int | None = None) -> Applied:
        outcome = self.step(command, at)
        assert isinstance(outcome, Applied), (command.name, outcome)
        return outcome

    @property
    def aggregate(self) -> RunAggregate:
        assert self.agg is not None
        return self.agg

    # -- the path to a `lost` Run (T1, T2, T8 on edge) -------------------------------------
    def admit(self, provider_policy: PolicyDefinition | None, **kwargs: Any) -> Applied:
        return self.must(admit_command(provider_policy, **kwargs))

    def grant(self, gap_ms: int = 1) -> Applied:
        latest = self.aggregate.latest_attempt
        assert latest is not None
        generation = 1 + max(
            (x.lease_generation for x in self.aggregate.leases_of(latest.attempt_id)), default=0
        )
        return self.must(
            GrantLease(
                run_id=self.aggregate.run.run_id,
                attempt_id=latest.attempt_id,
                worker=WORKER,
                lease_token=lease_token(latest.attempt_id, generation),
                lease_duration_ms=LEASE_MS,
            ),
            self.now + gap_ms,
        )

    def fence(self) -> Fence:
        latest = self.aggregate.latest_attempt
        assert latest is not None
        lease = self.aggregate.current_lease(latest)
        assert lease is not None
        return Fence(
            worker_id=lease.worker_id,
            worker_session_id=lease.worker_session_id,
            worker_generation=lease.worker_generation,
            lease_generation=lease.lease_generation,
            lease_token=lease_token(lease.attempt_id, lease.lease_generation),
            expected_version=lease.version,
        )

    def starting(self, gap_ms: int = 1) -> Applied:
        latest = self.aggregate.latest_attempt
        assert latest is not None
        return self.must(
            AcknowledgeStarting(
                run_id=self.aggregate.run.run_id,
                attempt_id=latest.attempt_id,
                fence=self.fence(),
                worker=WORKER,
            ),
            self.now + gap_ms,
        )

    def expire_lost(self, gap_ms: int = LEASE_MS + 1) -> Applied:
        """T8 on edge: the lease of the `starting` Attempt expired; Run and Attempt `lost`."""
        latest = self.aggregate.latest_attempt
        assert latest is not None
        assert latest.lease_generation is not None
        return self.must(
            ExpireWithLease(
                run_id=self.aggregate.run.run_id,
                attempt_id=latest.attempt_id,
                lease_generation=latest.lease_generation,
                profile=Profile.EDGE,
            ),
            self.now + gap_ms,
        )

    def to_lost(self) -> Applied:
        """From `queued` (a pristine `claimed` latest Attempt) to `lost`."""
        self.grant()
        self.starting()
        return self.expire_lost()

    def lost_retry(self, new_attempt_id: str, at: int | None = None) -> Outcome:
        return self.step(
            LostRetryStep(run_id=self.aggregate.run.run_id, new_attempt_id=new_attempt_id), at
        )

    def request_cancel(self, reason: CancelReason = CancelReason.USER) -> Outcome:
        return self.step(RequestCancel(run_id=self.aggregate.run.run_id, reason=reason))

    def converge(self, at: int | None = None) -> Outcome:
        return self.step(ConvergeCancel(run_id=self.aggregate.run.run_id), at)


def lost_flow(provider_policy: PolicyDefinition | None, **kwargs: Any) -> Flow:
    """A Run admitted with `provider_policy` whose Attempt 1 is `lost` (edge T8)."""
    flow = Flow()
    flow.admit(provider_policy, **kwargs)
    flow.to_lost()
    return flow


def retry_wait_flow(provider_policy: PolicyDefinition) -> Flow:
    """A Run whose Attempt 1 is lost and which has been scheduled (R4): `retry_wait`."""
    flow = lost_flow(provider_policy)
    outcome = flow.lost_retry("a2")
    assert isinstance(outcome, Applied), outcome
    return flow


def with_policy(agg: RunAggregate, **changes: Any) -> RunAggregate:
    """`agg` with its stored policy changed by `dataclasses.replace`.

    Precedence tests need stored policies that violate several rules at once, for example
    `safety = unknown` together with retry enabled: admission refuses such a policy (A-4), and a
    policy row never changes after admission except for its cursor, so no transition sequence
    reaches it. The aggregate is otherwise the one the kernel reached (a real `lost` Run), and
    every transition still checks its input invariants through the contracts."""
    assert agg.policy is not None
    replaced: RunRetryPolicy = dataclasses.replace(agg.policy, **changes)
    return dataclasses.replace(agg, policy=replaced)


# -- strategies --------------------------------------------------------------------------------
def safe_enabled_policies(
    max_attempts: st.SearchStrategy[int] | None = None,
) -> st.SearchStrategy[PolicyDefinition]:
    """Valid, enabled, safe policies with varied backoff inside the A-3 limits."""

    @st.composite
    def build(draw: st.DrawFn) -> PolicyDefinition:
        maximum = draw(st.integers(0, 86_400_000) | st.sampled_from([0, 1, 60_000, 86_400_000]))
        base = draw(st.integers(0, maximum))
        return policy(
            max_attempts=draw(max_attempts if max_attempts is not None else st.integers(2, 16)),
            retry_on_lost=True,
            safety=draw(st.sampled_from(SAFE)),
            backoff_base_ms=base,
            backoff_max_ms=maximum,
        )

    return build()


def valid_policies() -> st.SearchStrategy[PolicyDefinition]:
    """Any policy inside the A-3 limits (enabled or not, any safety)."""

    @st.composite
    def build(draw: st.DrawFn) -> PolicyDefinition:
        maximum = draw(st.integers(0, 86_400_000))
        return policy(
            max_attempts=draw(st.integers(1, 16)),
            retry_on_lost=draw(st.booleans()),
            safety=draw(st.sampled_from(Safety)),
            backoff_base_ms=draw(st.integers(0, maximum)),
            backoff_max_ms=maximum,
        )

    return build()
