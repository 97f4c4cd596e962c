"""The run component of the conformance suite (SPEC §7): the trace format and codec, the reference
store (the oracle), the adapter port and the adapters of the edge and cluster runners, the
replayer, guard and kill modes, and the throwaway PostgreSQL server."""
