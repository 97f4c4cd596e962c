"""The Worker's pure decisions (SPEC §3): the offer journal record, its codec and state machine,
delivery validation and the receiver steps, the startup audit, the recovery Reconciler,
Coordinator and supervisor, lease loss and retention. Each module is named for its runner
counterpart in `runners/worker/`."""
