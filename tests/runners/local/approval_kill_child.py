"""The child process of `test_approval_kill.py`: one dispatch page of the approval domain on a
real edge SQLite file, exactly as the application's dispatcher runs it
(`EdgeApprovalPorts(store, clock).dispatch_batch(None, 8)`), then a SIGKILL of itself.

    python -m tests.runners.local.approval_kill_child DB MODE

MODE `barrier`: the ports' `between` hook (called after each committed claim, before its start)
SIGKILLs this process at the first claim: the start barrier (`starting`) is on disk, the start
never ran. MODE `after_start`: the page runs to its end (every claim and start committed), then
the process SIGKILLs itself before closing the store.

Each line printed (flushed) says how far it got: `claimed ACTION_ID` just before the kill in the
hook, `page SCANNED STARTED` after a whole page.
"""

from __future__ import annotations

import os
import signal
import sys

from runners.edge.store import EdgeStore
from runners.local.app import wall_clock_ms
from runners.local.approvals import EdgeApprovalPorts


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    db, mode = argv
    store = EdgeStore(db)

    def between(action_id: str) -> None:
        print(f"claimed {action_id}", flush=True)
        if mode == "barrier":
            _die()

    page = EdgeApprovalPorts(store, wall_clock_ms, between=between).dispatch_batch(None, 8)
    print(f"page {page.counters.scanned} {page.counters.started}", flush=True)
    if mode == "after_start":
        _die()
    return 3  # not reached in either mode: the parent fails on any exit but SIGKILL


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
