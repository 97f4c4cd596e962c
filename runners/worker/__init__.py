"""The Worker runtime around the offer journal (SPEC §3.5, §3.10-§3.16; issue 6 item 5).

Transport-, database- and deployment-neutral: every effect goes through a port (the journal
store of `runners.worker.journal.port`, the control-plane client, the executor, the receipt store,
the persisted-execution inspector and controller), and every decision is the kernel's
(`kernel.worker.journal`, `offer_delivery`, `journal_audit`, `journal_reconciler`,
`journal_coordinator`, `journal_supervisor`, `journal_lease_loss`).
"""
