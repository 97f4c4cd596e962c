"""Admit a Run and drive it to completion through the kernel, printing every step.

    python examples/first_run.py

The kernel never reads a clock or draws randomness: this script supplies the observation times,
ids and the lease token, exactly as a runner would.
"""

from __future__ import annotations

import secrets

from kernel import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    AdmitRun,
    Applied,
    Command,
    CompleteWithLease,
    CompletionOutcome,
    Fence,
    GrantLease,
    Outcome,
    PolicyDefinition,
    RunAggregate,
    Safety,
    Secret,
    WorkerSession,
    WorkerSessionStatus,
    apply,
    check_invariants,
)


def main() -> None:
    worker = WorkerSession(
        worker_id="worker-1",
        session_id="session-1",
        generation=1,
        status=WorkerSessionStatus.ONLINE,
        session_expires_at_ms=2_000_000_000_000,
        executor_types=("shell",),
    )
    token = Secret.of(secrets.token_urlsafe(32), "lease_token")  # only its digest is stored
    policy = PolicyDefinition(
        max_attempts=3,
        retry_on_lost=True,
        safety=Safety.IDEMPOTENT,
        backoff_base_ms=1_000,
        backoff_max_ms=60_000,
    )

    def fence(expected_version: int) -> Fence:
        return Fence("worker-1", "session-1", 1, 1, token, expected_version)

    steps: list[tuple[int, Command]] = [
        (1_000, AdmitRun("run-1", "attempt-1", "project", "task", 1, "shell", policy)),
        (1_010, GrantLease("run-1", "attempt-1", worker, token, 30_000)),
        (1_020, AcknowledgeStarting("run-1", "attempt-1", fence(1), worker)),
        (1_030, AcknowledgeRunning("run-1", "attempt-1", fence(2), worker, "pid:4242", 1_025)),
        (
            1_900,
            CompleteWithLease(
                "run-1", "attempt-1", fence(3), worker, 1, CompletionOutcome.SUCCEEDED, 0
            ),
        ),
        # The Worker's response was lost and it sends the completion again: an exact replay.
        (
            1_950,
            CompleteWithLease(
                "run-1", "attempt-1", fence(3), worker, 1, CompletionOutcome.SUCCEEDED, 0
            ),
        ),
    ]
    aggregate: RunAggregate | None = None
    for observed_at_ms, command in steps:
        outcome: Outcome = apply(aggregate, command, observed_at_ms)
        line = f"{observed_at_ms:>6} {command.name:<22} -> {outcome.kind.value} ({outcome.code})"
        if isinstance(outcome, Applied):
            aggregate = outcome.aggregate
            events = ", ".join(e.type for e in outcome.events)
            line += f"  run={aggregate.run.status.value} v{aggregate.run.version} [{events}]"
        print(line)
    if aggregate is None or check_invariants(aggregate):
        raise SystemExit("the Run did not end in a valid state")
    print(f"done: run {aggregate.run.run_id} is {aggregate.run.status.value}; invariants hold")


if __name__ == "__main__":
    main()
