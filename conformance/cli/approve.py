"""`qlk approve ID [--as NAME]`: approve a pending approval request (issue 19). The command
lives with its siblings in `conformance.cli.approvals`; this module is its entry in
`COMMANDS` (one module per command name, imported only when that command runs)."""

from conformance.cli.approvals import register_approve as register

__all__ = ["register"]
