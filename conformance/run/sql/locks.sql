-- The lock probe of conformance (conformance/run/locks.py; SPEC B-35, D-2): a second connection
-- contending for the rows a cluster write path loaded `FOR UPDATE`, while that write holds its
-- transaction open after the load. Each must block until the write commits. PostgreSQL only:
-- the SQLite probe is the runner's own `BEGIN IMMEDIATE` on a second connection.

-- name: contend_run
SELECT run_id FROM runs WHERE run_id = %(run_id)s FOR UPDATE;

-- name: contend_attempts
SELECT attempt_id FROM attempts WHERE run_id = %(run_id)s FOR UPDATE;

-- name: contend_policy
SELECT run_id FROM run_retry_policies WHERE run_id = %(run_id)s FOR UPDATE;

-- name: contend_leases
SELECT attempt_id FROM run_dispatch_leases WHERE run_id = %(run_id)s FOR UPDATE;

-- name: blocked_by
-- Whether backend `pid` waits for a lock that backend `blocker` holds (or waits for first).
SELECT %(blocker)s = ANY(pg_blocking_pids(%(pid)s));
