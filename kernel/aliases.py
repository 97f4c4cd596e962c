"""The one compatibility shim for profile-named entry points (SPEC §1, ADR-0380 §1; RUN-07).

Each alias *is* the canonical, profile-neutral function object, never a copy. No other module
may reference a `cluster_*` name (a test checks that over the tree); new code uses the neutral
names from `kernel.transitions`.
"""

from __future__ import annotations

from kernel.transitions import lost_retry_step, recover_runtime
from kernel.transitions.run_lost_retry import decide, is_lost_retry_eligible

cluster_lost_retry_step = lost_retry_step
cluster_lost_retry_decide = decide
cluster_is_lost_retry_eligible = is_lost_retry_eligible
cluster_recover_runtime = recover_runtime

ALIASES = {
    "cluster_lost_retry_step": lost_retry_step,
    "cluster_lost_retry_decide": decide,
    "cluster_is_lost_retry_eligible": is_lost_retry_eligible,
    "cluster_recover_runtime": recover_runtime,
}
