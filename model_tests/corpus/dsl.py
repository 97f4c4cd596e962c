"""A small recording language for the named scenario traces (issue 3, item 4a).

A `Scenario` drives the reference store through a `conformance.run.recorder.Recorder` and **checks
every step it is told to expect** while recording, so a named trace cannot silently stop showing
what its name claims: if the kernel's behaviour changes, regeneration fails at the step whose
expectation broke (and the committed trace fails replay in CI).

Fences are built from the durable lease row (generation, version) and the token the scenario
granted, so scenarios read like the protocol: `grant`, `starting`, `running`, `complete`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from conformance.run.adapter import StepResult
from conformance.run.faults import Fault, FaultKind
from conformance.run.pages import LostRetryPass, SourceQuery
from conformance.run.recorder import Recorder
from conformance.run.trace import AnyCommand, Trace, TraceCommand, TraceHeader, trace_token
from kernel import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    AdmitRun,
    Applied,
    Command,
    CompleteWithLease,
    CompletionOutcome,
    ExpireWithLease,
    Fence,
    GrantLease,
    PolicyDefinition,
    RenewLease,
    RunAggregate,
    Safety,
    Secret,
    WorkerSession,
    WorkerSessionStatus,
    apply,
)
from kernel.specs.states import Profile, RunKind, RunOwner

START_MS = 1_000_000
LEASE_MS = 30_000
FAR_MS = 10**12
EXECUTOR = "shell"
RETRY = PolicyDefinition(3, True, Safety.IDEMPOTENT, 1_000, 60_000)


class ScenarioError(AssertionError):
    """A named scenario no longer shows what it claims (its expectation failed)."""


def worker(
    worker_id: str = "w1",
    *,
    session: str = "s1",
    generation: int = 1,
    status: WorkerSessionStatus = WorkerSessionStatus.ONLINE,
    expires_at_ms: int = FAR_MS,
    executor_types: tuple[str, ...] = (EXECUTOR,),
) -> WorkerSession:
    return WorkerSession(worker_id, session, generation, status, expires_at_ms, executor_types)


class Scenario:
    """One named trace being recorded."""

    def __init__(
        self,
        name: str,
        description: str,
        *,
        profile: Profile = Profile.EDGE,
        capabilities: tuple[str, ...] = (),
        component: str = "run",
    ) -> None:
        header = TraceHeader(
            name=name,
            component=component,
            profile=profile.value,
            seed=0,
            description=description,
            capabilities=capabilities,
        )
        self.recorder = Recorder(header)
        self.profile = profile
        self.now = START_MS
        self.tokens: dict[tuple[str, int], Secret] = {}
        self.token_count = 0

    # -- time and state ------------------------------------------------------------------------
    def tick(self, ms: int) -> int:
        self.now += ms
        return self.now

    def agg(self, run_id: str) -> RunAggregate:
        for agg in self.recorder.adapter.store.aggregates():
            if agg.run.run_id == run_id:
                return agg
        raise ScenarioError(f"{self.recorder.header.name}: no Run {run_id}")

    def trace(self) -> Trace:
        return self.recorder.trace()

    # -- steps ---------------------------------------------------------------------------------
    def do(
        self,
        command: AnyCommand | None,
        expect: str | None = None,
        *,
        fault: Fault | None = None,
        at: int | None = None,
    ) -> StepResult:
        """Record one step; `expect` is `kind` or `kind:code` and must match."""
        result = self.recorder.step(command, self.now if at is None else at, fault)
        self._check(result, expect)
        return result

    def raw(self, name: str, args: dict[str, Any], expect: str, **extra: Any) -> StepResult:
        """A command as the wire carries it (e.g. refused by strict decoding)."""
        result = self.recorder.raw(TraceCommand(name, args, extra.get("provider_policy")), self.now)
        self._check(result, expect)
        return result

    def reopen(self) -> None:
        self._check(self.recorder.step(None, self.now, Fault(FaultKind.REOPEN)), "reopened")

    def query(
        self,
        source: str,
        expect_items: list[str],
        *,
        has_more: bool = False,
        limit: int = 16,
        **params: Any,
    ) -> dict[str, Any]:
        """A source page; `expect_items` are the run ids in the order the source must give."""
        after = params.pop("after", None)
        request = SourceQuery(source, limit, after, **params)
        result = self.recorder.page(request, self.now)
        assert result.page is not None
        got = [item[0] for item in result.page["items"]]
        if got != expect_items or result.page["has_more"] != has_more:
            raise ScenarioError(
                f"{self.recorder.header.name} step {len(self.recorder.steps)}: query {source} "
                f"gave {got} has_more={result.page['has_more']}, "
                f"expected {expect_items} has_more={has_more}"
            )
        return result.page

    def lost_retry_page(
        self,
        expect: dict[str, int | bool],
        *,
        limit: int = 16,
        fail_closed: bool = False,
        fail_candidate: int | None = None,
        expect_kind: str = "page",
        attempt_suffix: str | None = None,
    ) -> dict[str, Any]:
        """One lost-retry page; every counter named in `expect` must match. A requeue creates
        Attempt `<run_id>-<attempt_suffix>` (by default one no Attempt has)."""
        suffix = attempt_suffix or f"s{len(self.recorder.steps) + 1}"
        fault = None
        if fail_candidate is not None:
            fault = Fault(FaultKind.IO_ERROR, at_candidate=fail_candidate)
        result = self.recorder.page(LostRetryPass(limit, fail_closed, suffix), self.now, fault)
        assert result.page is not None
        wrong = {k: result.page[k] for k, v in expect.items() if result.page[k] != v}
        if result.kind != expect_kind or wrong:
            raise ScenarioError(
                f"{self.recorder.header.name} step {len(self.recorder.steps)}: page "
                f"{result.kind} {result.page}, expected {expect_kind} {expect}"
            )
        return result.page

    def _check(self, result: StepResult, expect: str | None) -> None:
        if expect is None:
            return
        kind, _, code = expect.partition(":")
        if result.kind != kind or (code and result.code != code):
            raise ScenarioError(
                f"{self.recorder.header.name} step {len(self.recorder.steps)}: got "
                f"{result.kind}:{result.code}, expected {expect}"
            )

    # -- the protocol --------------------------------------------------------------------------
    def admit(
        self,
        run_id: str,
        policy: PolicyDefinition | None = None,
        *,
        attempt_id: str | None = None,
        executor: str = EXECUTOR,
        kind: RunKind = RunKind.ORDINARY,
        owner: RunOwner = RunOwner.RUNTIME,
        expect: str | None = "applied",
    ) -> str:
        aid = attempt_id if attempt_id is not None else f"{run_id}-a1"
        command = AdmitRun(run_id, aid, "project", "task", 1, executor, policy, kind, owner)
        self.do(command, expect)
        return aid

    def grant(
        self,
        run_id: str,
        attempt_id: str,
        by: WorkerSession,
        *,
        duration_ms: int = LEASE_MS,
        expect: str | None = "applied",
    ) -> Secret:
        token = self.grant_token()
        self.do(GrantLease(run_id, attempt_id, by, token, duration_ms), expect)
        lease = self.agg(run_id).leased_lease(attempt_id)
        if lease is not None:
            self.tokens[(attempt_id, lease.lease_generation)] = token
        return token

    def grant_token(self) -> Secret:
        """A fresh lease token for a grant sent by hand (see `remember`)."""
        self.token_count += 1
        return trace_token(f"{self.recorder.header.name}-lease-{self.token_count}")

    def remember(self, token: Secret, run_id: str, attempt_id: str) -> None:
        lease = self.agg(run_id).leased_lease(attempt_id)
        assert lease is not None
        self.tokens[(attempt_id, lease.lease_generation)] = token

    def effects(self, command: Command, run_id: str | None = None) -> int:
        """How many statements (kernel effects) `command` would write now (D-3)."""
        target = None
        try:
            target = self.agg(run_id if run_id is not None else command.run_id)
        except ScenarioError:
            target = None
        outcome = apply(target, command, self.now)
        if not isinstance(outcome, Applied):
            raise ScenarioError(f"{command.name} would not apply now: {outcome.code}")
        return len(outcome.effects)

    def all_faults(self, command: Command) -> None:
        """A crash before commit, then an I/O error at every statement: nothing changes."""
        self.do(command, "crashed", fault=Fault(FaultKind.CRASH_BEFORE_COMMIT))
        for k in range(1, self.effects(command) + 1):
            self.do(command, "error", fault=Fault(FaultKind.IO_ERROR, at_effect=k))

    def fence(self, run_id: str, attempt_id: str, by: WorkerSession, **changes: Any) -> Fence:
        """The fence of the live lease as its holder would send it; `changes` make it stale."""
        lease = self.agg(run_id).leased_lease(attempt_id)
        if lease is None:
            raise ScenarioError(f"{attempt_id} has no leased lease")
        fence = Fence(
            by.worker_id,
            by.session_id,
            by.generation,
            lease.lease_generation,
            self.tokens[(attempt_id, lease.lease_generation)],
            lease.version,
        )
        return dataclasses.replace(fence, **changes)

    def starting(
        self, run_id: str, aid: str, by: WorkerSession, expect: str | None = "applied"
    ) -> Fence:
        fence = self.fence(run_id, aid, by)
        self.do(AcknowledgeStarting(run_id, aid, fence, by), expect)
        return fence

    def running(
        self, run_id: str, aid: str, by: WorkerSession, expect: str | None = "applied"
    ) -> Fence:
        fence = self.fence(run_id, aid, by)
        self.do(AcknowledgeRunning(run_id, aid, fence, by, f"pid:{aid}", self.now), expect)
        return fence

    def renew(
        self, run_id: str, aid: str, by: WorkerSession, expect: str | None = "applied"
    ) -> Fence:
        fence = self.fence(run_id, aid, by)
        self.do(RenewLease(run_id, aid, fence, by, LEASE_MS), expect)
        return fence

    def launched(self, run_id: str, by: WorkerSession, policy: PolicyDefinition | None) -> str:
        """Admit, grant, starting and running: a Run executing remotely."""
        aid = self.admit(run_id, policy)
        self.grant(run_id, aid, by)
        self.starting(run_id, aid, by)
        self.running(run_id, aid, by)
        return aid

    def completion(
        self,
        run_id: str,
        aid: str,
        by: WorkerSession,
        fence: Fence,
        *,
        sequence: int = 1,
        outcome: CompletionOutcome = CompletionOutcome.SUCCEEDED,
        exit_code: int | None = 0,
    ) -> CompleteWithLease:
        return CompleteWithLease(run_id, aid, fence, by, sequence, outcome, exit_code)

    def expire(
        self, run_id: str, aid: str, generation: int = 1, expect: str | None = "applied"
    ) -> StepResult:
        return self.do(ExpireWithLease(run_id, aid, generation, self.profile), expect)

    def lost(self, run_id: str, by: WorkerSession, policy: PolicyDefinition | None) -> str:
        """A remote Run whose lease expired while it ran (edge/standalone: lost at expiry)."""
        aid = self.launched(run_id, by, policy)
        self.tick(LEASE_MS)
        self.expire(run_id, aid, expect="applied:lost")
        return aid
