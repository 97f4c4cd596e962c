"""The Worker's POSIX host parts: the executor and its launch wrapper, completion receipts, and
their adapters behind the Worker's ports (SPEC §3.5, §3.11, §3.15)."""
