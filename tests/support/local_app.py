"""Driving the local application from a test (runners/local/app.py): one stepped scheduler per
lifecycle, tasks and submissions on the application's own store, and a bounded wait that steps
the lifecycles while it waits for real children."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

from kernel import PolicyDefinition
from kernel.task import TaskDefinition, define_task
from runners.lifecycle import SteppedScheduler
from runners.local.app import LocalApplication, wall_clock_ms
from runners.local.schedule import submit

#: Generous bound for children that finish in milliseconds (a loaded machine).
DEADLINE_S = 30.0


class Stepped:
    """One stepped scheduler per lifecycle, by name (pass it as `schedulers=`)."""

    def __init__(self) -> None:
        self.by_name: dict[str, SteppedScheduler] = {}

    def __call__(self, name: str) -> SteppedScheduler:
        self.by_name[name] = SteppedScheduler()
        return self.by_name[name]

    def one(self, name: str) -> None:
        """Exactly one cycle of lifecycle `name` (its pending timer falls due)."""
        clock = self.by_name[name]
        pending = clock.pending_ms
        assert pending is not None, f"{name}: no timer armed"
        assert clock.advance(pending - clock.now_ms) == 1

    def control(self) -> None:
        self.one("execution_control")

    def scheduler(self) -> None:
        self.one("scheduler")

    def both(self) -> None:
        self.scheduler()
        self.control()


def until(condition: Callable[[], bool], step: Callable[[], None], what: str) -> None:
    """Call `step` until `condition` holds, failing after `DEADLINE_S` with `what`."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE_S} s: {what}")
        step()
        time.sleep(0.02)


def add_task(
    app: LocalApplication,
    name: str,
    argv: list[str],
    *,
    deadline_ms: int | None = None,
    policy: PolicyDefinition | None = None,
) -> None:
    definition = define_task(name, argv, deadline_ms=deadline_ms, retry_policy=policy)
    assert isinstance(definition, TaskDefinition)
    app.tasks.add(definition, wall_clock_ms())


def submit_run(app: LocalApplication, name: str) -> str:
    """A manual Run of task `name` with fresh ids; its Run id."""
    run_id = f"run-{secrets.token_hex(8)}"
    outcome = submit(
        app.store,
        app.tasks,
        name,
        now_ms=wall_clock_ms(),
        run_id=run_id,
        attempt_id=f"att-{secrets.token_hex(8)}",
    )
    assert outcome.code.value == "admitted", outcome
    return run_id
