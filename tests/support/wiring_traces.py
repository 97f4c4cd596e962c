"""A small, fixed, named subset of the bundled run corpus for the tests whose point is a command's
wiring end to end (the README's main job, the adapter guide's walk-through, the pytest plugin),
not the corpus: handed to the command through its documented trace option (`qlk conform
--traces DIR`, `pytest --ql3-traces DIR`), never by a test-only switch.

The full corpus is replayed once per store, each in one test of its own:

- reference store: `tests/conformance/test_corpus.py` (every trace);
- edge runner (SQLite): `tests/runners/edge/test_edge_corpus.py` (every trace, replay and guard
  mode), `tests/runners/edge/test_edge_kill.py` (kill mode), `tests/runners/edge/test_edge_locks.py`
  (lock probe);
- cluster runner (PostgreSQL): `tests/runners/cluster/test_cluster_conformance.py` (every named
  trace, guard mode), `test_cluster_kill.py`, `test_cluster_locks.py`;
- the adapter guide's JSON store: the walk-through's `qlk conform` step
  (`tests/test_adapter_guide.py`: replay, guard mode and kill mode through the adapter port).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Final

from conformance.run.corpus import RUN_CORPUS

#: Named traces with writes of one to several effects (admission, lease grants and fences, a due
#: retry requeued, a lost Attempt retried), one that needs the cluster recovery source (not
#: applicable on the edge runner and the JSON store: the report must say so and still pass), and
#: one generated, gzipped trace in a subfolder, as the bundled corpus holds them.
WIRING: Final = (
    "LEASE-02-each-mismatched-fence-field-rejected.jsonl",
    "RETRY-07-retry-wait-not-before-due.jsonl",
    "RETRY-08-due-retry-wait-requeued-exactly-once.jsonl",
    "REC-01-cluster-source-selects-exactly-the-candidates.jsonl",
    "generated/retry-standalone-3174.jsonl.gz",
)
#: Of WIRING, the traces that need a capability only the cluster runner declares.
CLUSTER_ONLY: Final = frozenset({"REC-01-cluster-source-selects-exactly-the-candidates.jsonl"})


def wiring_traces(directory: Path) -> Path:
    """`directory/traces` holding the WIRING traces, laid out as in the bundled corpus."""
    root = directory / "traces"
    for name in WIRING:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(RUN_CORPUS / name, target)
    return root
