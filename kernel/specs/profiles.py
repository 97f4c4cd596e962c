"""Per-profile behaviour flags of the Run domain (not budgets: those are in `budgets.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from kernel.specs.states import Profile

# E-1 (B-21): edge and standalone mark an expired started Attempt `lost` on lease expiry alone
# (ADR-0021 §5.4); cluster requires trusted not-running evidence through runtime recovery
# (ADR-0232 §1), so `expire_with_lease` answers `evidence_required` there.
LOST_REQUIRES_EVIDENCE: Final[Mapping[Profile, bool]] = MappingProxyType(
    {
        Profile.EDGE: False,
        Profile.STANDALONE: False,
        Profile.CLUSTER: True,
        # A Worker host never expires control-plane leases; fail closed if one tries.
        Profile.WORKER: True,
    }
)
