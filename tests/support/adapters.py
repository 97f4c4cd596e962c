"""Adapters for testing the suite's reporting (never a runner under test)."""

from __future__ import annotations

from conformance.run.adapter import ReferenceAdapter


class WithoutClusterRecovery(ReferenceAdapter):
    """The reference adapter declaring no cluster recovery source: traces that need it must be
    reported not applicable."""

    capabilities = ReferenceAdapter.capabilities - {"cluster_recovery"}
