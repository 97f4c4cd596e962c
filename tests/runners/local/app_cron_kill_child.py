"""The child process of `test_app_cron_kill.py`: the local application exactly as `qlk serve`
runs it (standalone profile: startup recovery, the first execution-control cycle, both
lifecycles; real launch wrappers and real children), on a real SQLite file, with a fast clock.

    python -m tests.runners.local.app_cron_kill_child DB LIFE MODE [PLANT]

The clock (`LocalApplication(clock=...)`, every part of the application reads it) is fake time
`T0 + (wall now - wall epoch) x SPEED`: a fake minute passes in 60 / SPEED real seconds. The wall
epoch is written beside the database (`<db>.epoch`) by the first child that finds none, and read
by every later one, so restarts continue the same fake timeline and downtime passes fake time
too. Fake time stays far behind the wall clock (T0 is in 2024), so the wrappers' wall-clock
receipt times never precede the fake start times.

Each child appends one line per event to `<db>.cron-kill.log`, each line in one `write` on an
`O_APPEND` descriptor (a SIGKILL loses no line already written; a line is never torn):

    boot LIFE FAKE_MS                      before the application is built
    up LIFE FAKE_MS resolved=N adopted=N orphaned=N     after O-1 (startup recovery etc.)
    cycle LIFE NOW_MS [TASK:KIND:FIRE_AT_MS:OUTCOME ...]   each scheduler cycle that returned,
        NOW_MS the time its trigger-schedule phase ran at, one item per fire it planned
        (KIND new/resume; OUTCOME the admission's kind: applied, replayed, rejected, raced,
        or unclaimed)
    failed LIFE LIFECYCLE ERROR            a cycle that raised
    incident LIFE LIFECYCLE KIND ERROR     anything the lifecycles absorbed
    stopped LIFE FAKE_MS drained=BOOL      the O-4 stop (MODE final only)

MODE `serve` runs until it is SIGKILLed (or exits 3 after `STUCK_S`). MODE `final` runs at least
`FINAL_FAKE_MS` of fake time, then until the application is idle (the kernel's `local_idle`, as
`qlk serve --until-idle`), then stops the O-4 way and exits 0.

PLANT (tests only, to show that the test can fail; the test passes it from an environment
variable it alone defines) monkeypatches this process only:
- `admission_minute_ids`: a fire's Run and Attempt ids are derived from the minute its admission
  runs in instead of its fire time (the same id as long as a fire is admitted in its own minute;
  a claim resumed after a restart in a later minute is admitted under another id);
- `catch_up`: every missed fire is admitted, oldest first, one per cycle (a catch-up storm
  instead of TK-10's latest-only).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from rich.console import Console

import kernel.task.schedule as kernel_schedule
from conformance.cli.common import Context
from conformance.cli.serve import IDLE_POLL_S, _Printer
from kernel.specs import Profile
from kernel.task import (
    ScheduleCandidate,
    SchedulePlan,
    decide_fires,
    fire_attempt_id,
    fire_run_id,
)
from runners import task_schedule as local_schedule
from runners.edge.cron import MINUTE_MS, first_fire_after
from runners.lifecycle import CycleFailed, CycleReport, CycleSucceeded, LifecycleIncident
from runners.local.app import LocalApplication, wall_clock_ms
from runners.local.control import ControlReport
from runners.local.scheduler import SchedulerReport

#: Fake time at the wall epoch: 2024-01-01T00:00:00Z, a multiple of two minutes.
T0: Final = 1_704_067_200_000
#: Fake milliseconds per real millisecond: a fake minute is 4 real seconds. The scheduler's
#: cycles are about 1.5 s apart (the standalone cadence of 1 s after each cycle, whose dispatch
#: waits for each launch wrapper's handshake), under 3 s on a loaded machine: a cycle in every
#: fake minute.
SPEED: Final = 15
#: MODE final runs at least this long (fake), then until idle.
FINAL_FAKE_MS: Final = 90_000
#: A child that is neither killed nor done within this long (real) is stuck: exit 3.
STUCK_S: Final = 300.0
PLANTS: Final = ("admission_minute_ids", "catch_up")


def epoch_path(db: Path) -> Path:
    return db.with_name(db.name + ".epoch")


def log_path(db: Path) -> Path:
    return db.with_name(db.name + ".cron-kill.log")


def fake_ms(epoch_ms: int, wall_ms: int) -> int:
    """Fake time at wall time `wall_ms` (the one formula of the timeline)."""
    return T0 + (wall_ms - epoch_ms) * SPEED


def read_epoch(db: Path) -> int | None:
    try:
        return int(epoch_path(db).read_text())
    except FileNotFoundError:
        return None


def wall_epoch(db: Path) -> int:
    """The timeline's wall epoch: read, or written now by the first child (atomically: a
    complete file is linked into place; a SIGKILL before that leaves only a stray temp file)."""
    found = read_epoch(db)
    if found is not None:
        return found
    temp = epoch_path(db).with_name(f"{epoch_path(db).name}.{os.getpid()}")
    temp.write_text(str(wall_clock_ms()))
    try:
        with contextlib.suppress(FileExistsError):
            os.link(temp, epoch_path(db))
    finally:
        temp.unlink()
    found = read_epoch(db)
    assert found is not None
    return found


class Journal:
    """The child's line log (module docstring)."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def line(self, text: str) -> None:
        os.write(self._fd, (text + "\n").encode("ascii"))


def _cycle_line(life: int, report: SchedulerReport) -> str | None:
    schedule = report.schedule
    if schedule is None:
        return None
    items = []
    for fire in schedule.fires:
        outcome = "unclaimed" if fire.outcome is None else fire.outcome.kind.value
        plan = fire.plan
        items.append(f"{plan.task}:{plan.kind.value}:{plan.fire_at_ms}:{outcome}")
    return " ".join([f"cycle {life} {schedule.now_ms}", *items])


def plant(name: str, clock: Callable[[], int]) -> None:
    """Plant bug `name` in this process only (module docstring), by the name each caller looks
    up: `kernel.task.schedule` derives a plan's ids, `runners.task_schedule` (the phase
    `runners.local.schedule` re-exports) plans a cycle."""
    patches: dict[str, object]
    if name == "admission_minute_ids":

        def minute_run_id(task: str, revision: int, fire_at_ms: int) -> str:
            del fire_at_ms  # the bug: the minute the admission runs in instead
            return fire_run_id(task, revision, clock() // MINUTE_MS * MINUTE_MS)

        def minute_attempt_id(task: str, revision: int, fire_at_ms: int) -> str:
            del fire_at_ms
            return fire_attempt_id(task, revision, clock() // MINUTE_MS * MINUTE_MS)

        target: object = kernel_schedule
        patches = {"fire_run_id": minute_run_id, "fire_attempt_id": minute_attempt_id}
    elif name == "catch_up":

        def catching_up(candidates: Sequence[ScheduleCandidate], budget: int) -> SchedulePlan:
            oldest = []
            for c in candidates:
                latest = c.latest_fire_ms
                if latest is not None and c.state.cron is not None:
                    missed = first_fire_after(c.state.cron, c.state.anchor_ms)
                    if missed is not None:
                        latest = min(latest, missed)  # the bug: the oldest missed fire
                oldest.append(dataclasses.replace(c, latest_fire_ms=latest))
            return decide_fires(oldest, budget)

        target = local_schedule
        patches = {"decide_fires": catching_up}
    else:
        raise SystemExit(f"unknown plant {name!r}: one of {', '.join(PLANTS)}")
    for attribute, replacement in patches.items():
        assert hasattr(target, attribute), (target, attribute)
        setattr(target, attribute, replacement)


def main(db: Path, life: int, mode: str, planted: str | None) -> int:
    assert mode in ("serve", "final"), mode
    epoch = wall_epoch(db)

    def clock() -> int:
        return fake_ms(epoch, wall_clock_ms())

    if planted:
        plant(planted, clock)
    journal = Journal(log_path(db))
    journal.line(f"boot {life} {clock()}")
    # The lines `qlk serve` prints, on stderr (the test keeps them per child for diagnosis).
    console = Console(file=sys.stderr)
    printer = _Printer(Context(sys.stderr, sys.stderr, console, console))

    def on_cycle(report: CycleReport[ControlReport | SchedulerReport]) -> None:
        printer.cycle(report)
        result = report.result
        if isinstance(result, CycleFailed):
            journal.line(f"failed {life} {report.lifecycle} {result.error}")
        elif isinstance(result, CycleSucceeded) and isinstance(result.value, SchedulerReport):
            line = _cycle_line(life, result.value)
            if line is not None:
                journal.line(line)

    def incident(found: LifecycleIncident) -> None:
        printer.incident(found)
        journal.line(f"incident {life} {found.lifecycle} {found.kind} {found.error}")

    app = LocalApplication(db, Profile.STANDALONE, clock=clock, on_cycle=on_cycle, report=incident)
    startup = app.start()
    journal.line(
        f"up {life} {clock()} resolved={len(startup.resolved)} adopted={len(startup.adopted)} "
        f"orphaned={startup.orphaned}"
    )
    stuck_at = time.monotonic() + STUCK_S
    done_at = clock() + FINAL_FAKE_MS
    while True:
        time.sleep(IDLE_POLL_S)
        if time.monotonic() > stuck_at:
            app.stop()
            print(f"stuck: life {life} still running after {STUCK_S} s", file=sys.stderr)
            return 3
        if mode == "final" and clock() >= done_at and app.idle():
            break
    stopped = app.stop()
    journal.line(f"stopped {life} {clock()} drained={stopped.drained}")
    return 0


if __name__ == "__main__":
    sys.exit(
        main(
            Path(sys.argv[1]),
            int(sys.argv[2]),
            sys.argv[3],
            sys.argv[4] if len(sys.argv) > 4 else None,
        )
    )
