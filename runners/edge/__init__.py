"""Edge/standalone runner on stdlib sqlite3 (issue 4).

`EdgeStore` (runners/edge/store.py) is the storage port, the seven candidate sources and the
backdoor projection on one SQLite file; `conformance/run/edge.py` puts it behind the
conformance adapter port. Schema: `migrations/`; statements: `sql/`.
"""
