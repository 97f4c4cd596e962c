"""The edge runner behind the conformance adapter port (SPEC §7, `conformance.run.adapter`).

`EdgeAdapter` drives an `EdgeStore` on a real database file with the suite's shared step
semantics (`run_step` for commands and faults, `run_page` for source queries and lost-retry
pages), projects through the backdoor reader, and `reopen()` really closes and reopens the file.
`crash_after_commit` needs nothing here: the commit happened and the trace drops the response.

Capabilities: the run domain, faults, the sources, local startup recovery and the local
lost-retry page semantics (RETRY-17 local), `workflow` (the Workflow rows of SPEC §4.1 through
`execute_workflow`, and the Workflow sources), `approved_action` (the approval domain of SPEC
§5 through `execute_action`, and its two due indexes; edge and standalone only, §5.4), and
`guards`: `store` is the engine's storage port,
so guard mode (`conformance.run.guards`) can probe every guard of every write. Not the cluster
recovery source nor the cluster page semantics: a trace that needs them is reported as not
applicable.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from conformance.run.adapter import APPROVED_ACTION, WORKFLOW, StoreAdapter
from runners.edge.connection import DEFAULT_BUSY_TIMEOUT_MS
from runners.edge.store import EdgeStore

CAPABILITIES = frozenset(
    {
        "run",
        "faults",
        "sources",
        "local_recovery",
        "lost_retry_local",
        "guards",
        WORKFLOW,
        APPROVED_ACTION,
    }
)


class EdgeAdapter(StoreAdapter):
    """`ConformanceAdapter` over an `EdgeStore` on the file at `path`."""

    name = "edge"
    capabilities = CAPABILITIES

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "FULL",
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        remove_on_close: Path | None = None,
    ) -> None:
        self.store: EdgeStore = EdgeStore(
            path, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms
        )
        self._remove_on_close = remove_on_close

    def reopen(self) -> None:
        self.store.reopen()

    def close(self) -> None:
        try:
            self.store.close()
        finally:
            if self._remove_on_close is not None:
                shutil.rmtree(self._remove_on_close, ignore_errors=True)
                self._remove_on_close = None


def make_edge_adapter(*, synchronous: str = "FULL") -> EdgeAdapter:
    """A fresh adapter on a new temporary database file (the replayer calls this once per
    trace); `close()` deletes the file, its WAL and its directory."""
    directory = Path(tempfile.mkdtemp(prefix="ql3-edge-"))
    try:
        return EdgeAdapter(
            directory / "edge.sqlite3", synchronous=synchronous, remove_on_close=directory
        )
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
