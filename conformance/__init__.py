"""The conformance suite: trace codec, replayer, runner port (issues 3-4)."""
