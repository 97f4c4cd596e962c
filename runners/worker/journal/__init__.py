"""The Worker's offer journal (SPEC §3.1, §3.9): the port every adapter provides, the file adapter
(edge default) with its ownership lock, and the SQLite adapter for cluster Workers."""
