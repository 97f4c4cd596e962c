"""The child process of `test_schedule_kill.py`: runs schedule phases on a file in a loop, at
fake minute-spaced times, until a given time, printing one line per cycle (the parent SIGKILLs it
at random points between and inside cycles, then starts it again).

Usage: python schedule_kill_child.py DB END_MS

On (re)start it continues from the earliest minute any schedule last fired (or claimed), so no
due minute is skipped; it moves to the next minute once a cycle finds nothing due."""

from __future__ import annotations

import sys

from kernel.specs import Paging
from kernel.task import FireKind
from runners.edge.store import EdgeStore
from runners.edge.tasks import EdgeTaskStore
from runners.local.schedule import schedule_phase

MIN = 60_000
T0 = 1_704_067_200_000
NAMES = ("every", "second", "other")
BUDGET = Paging(1, 2)  # two fires a cycle for three tasks: several cycles per minute


def main(db: str, end_ms: int) -> None:
    store = EdgeStore(db)
    tasks = EdgeTaskStore(store)
    fires = []
    for name in NAMES:
        schedule = tasks.schedule(name)
        assert schedule is not None
        last = schedule.last_fire
        fires.append(T0 if last is None else last.fire_at_ms)
    now = min(fires) + 30_000
    while now <= end_ms:
        report = schedule_phase(store, tasks, now, BUDGET)
        resumed = sum(f.plan.kind is FireKind.RESUME for f in report.fires)
        print(f"cycle {now} due={report.due} resumed={resumed}", flush=True)
        if report.due == 0:
            now += MIN
    print("done", flush=True)
    store.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
