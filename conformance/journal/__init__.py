"""The journal component of the conformance suite (SPEC §7, component `journal`): the journal
trace codec, the reference journal (the oracle), the replayer of the file and SQLite adapters,
the corpus generator, and the Worker kill matrix."""
