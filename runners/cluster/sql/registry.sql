-- The durable Worker registry on PostgreSQL (runners/cluster/registry.py; kernel/worker_registry.py
-- decides, these statements load and persist). Each registry transaction locks only the Worker's
-- own row (`FOR UPDATE`); a fenced Worker command reads it `FOR SHARE` after the aggregate's locks
-- (D-7: advisory(attempt) -> Run -> Attempt -> policy -> lease -> session), so no cycle.

-- name: select_worker_session_for_update
SELECT worker_id, session_id, generation, status, executor_types, capacity, public_key,
       session_expires_at_ms, registered_at_ms, updated_at_ms, version
FROM worker_sessions
WHERE worker_id = %(worker_id)s
FOR UPDATE;

-- name: select_worker_session_for_share
-- The in-transaction read of a fenced Worker command (`ClusterTransaction.worker_session`).
SELECT worker_id, session_id, generation, status, executor_types, capacity, public_key,
       session_expires_at_ms, registered_at_ms, updated_at_ms, version
FROM worker_sessions
WHERE worker_id = %(worker_id)s
FOR SHARE;

-- name: select_worker_session
SELECT worker_id, session_id, generation, status, executor_types, capacity, public_key,
       session_expires_at_ms, registered_at_ms, updated_at_ms, version
FROM worker_sessions
WHERE worker_id = %(worker_id)s;

-- name: insert_worker_session
-- A worker id's first session; a concurrent first registration collides on the key (raced).
INSERT INTO worker_sessions (worker_id, session_id, generation, status, executor_types, capacity,
                             public_key, session_expires_at_ms, registered_at_ms, updated_at_ms,
                             version)
VALUES (%(worker_id)s, %(session_id)s, %(generation)s, %(status)s, %(executor_types)s,
        %(capacity)s, %(public_key)s, %(session_expires_at_ms)s, %(registered_at_ms)s,
        %(updated_at_ms)s, %(version)s)
ON CONFLICT (worker_id) DO NOTHING;

-- name: update_worker_session
-- CAS on the version the kernel decided from.
UPDATE worker_sessions
SET session_id = %(session_id)s,
    generation = %(generation)s,
    status = %(status)s,
    executor_types = %(executor_types)s,
    capacity = %(capacity)s,
    public_key = %(public_key)s,
    session_expires_at_ms = %(session_expires_at_ms)s,
    registered_at_ms = %(registered_at_ms)s,
    updated_at_ms = %(updated_at_ms)s,
    version = %(version)s
WHERE worker_id = %(worker_id)s
  AND version = %(expected_version)s;

-- name: expired_worker_sessions
-- The optional expiry sweep's source: rows stored online/draining whose session lease ran out,
-- oldest expiry first, bounded.
SELECT worker_id
FROM worker_sessions
WHERE status IN ('online', 'draining')
  AND session_expires_at_ms <= %(observed_at_ms)s
ORDER BY session_expires_at_ms, worker_id COLLATE "C"
LIMIT %(limit)s;
