"""Adapters for testing the suite's reporting (never a runner under test)."""

from __future__ import annotations

from conformance.run.adapter import ReferenceAdapter


class WithoutClusterRecovery(ReferenceAdapter):
    """The reference adapter declaring no cluster recovery source: traces that need it must be
    reported not applicable."""

    capabilities = ReferenceAdapter.capabilities - {"cluster_recovery"}


class WithoutApprovals(ReferenceAdapter):
    """The reference adapter declaring no approval domain (SPEC §5, issue 19), as a third-party
    store or the cluster runner (§5.4): approval traces must be reported not applicable."""

    capabilities = ReferenceAdapter.capabilities - {"approved_action"}
