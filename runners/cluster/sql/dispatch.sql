-- The cluster dispatch grant and its sealed offers (runners/cluster/dispatch.py; SPEC §1.7 T1,
-- §3.2; kernel/cluster_dispatch.py decides). Candidates come from sources.sql's
-- `local_dispatch_candidates` (D-13), the same source as the local dispatcher's.

-- name: dispatch_sessions
-- Every session that could take a grant at the cycle's time, with its load: its `leased` leases
-- not yet released. Bounded by %(limit)s sessions, by worker id.
SELECT s.worker_id, s.session_id, s.generation, s.status, s.executor_types, s.capacity,
       s.public_key, s.session_expires_at_ms, s.registered_at_ms, s.updated_at_ms, s.version,
       (SELECT count(*)
        FROM run_dispatch_leases AS l
        WHERE l.worker_id = s.worker_id
          AND l.worker_session_id = s.session_id
          AND l.worker_generation = s.generation
          AND l.status = 'leased') AS load
FROM worker_sessions AS s
WHERE s.status = 'online'
  AND s.session_expires_at_ms > %(observed_at_ms)s
ORDER BY s.worker_id COLLATE "C"
LIMIT %(limit)s;

-- name: select_worker_session_for_grant
-- The grant transaction's re-read of its target, last in the lock order (D-7: after the lease
-- rows). FOR UPDATE, not FOR SHARE: two dispatchers granting to one session serialise here, so
-- the load each counts next includes the other's committed grant (capacity is never overfilled).
SELECT worker_id, session_id, generation, status, executor_types, capacity, public_key,
       session_expires_at_ms, registered_at_ms, updated_at_ms, version
FROM worker_sessions
WHERE worker_id = %(worker_id)s
FOR UPDATE;

-- name: session_load
-- In the grant's transaction, after its lease insert: the session's `leased` leases.
SELECT count(*)
FROM run_dispatch_leases
WHERE worker_id = %(worker_id)s
  AND worker_session_id = %(session_id)s
  AND worker_generation = %(generation)s
  AND status = 'leased';

-- name: insert_worker_offer
INSERT INTO worker_offers (attempt_id, lease_generation, worker_id, worker_session_id,
                           worker_generation, sealed_token, created_at_ms)
VALUES (%(attempt_id)s, %(lease_generation)s, %(worker_id)s, %(worker_session_id)s,
        %(worker_generation)s, %(sealed_token)s, %(created_at_ms)s);

-- name: pending_worker_offers
-- A session's offers whose lease is still `leased`, oldest first, bounded.
SELECT o.attempt_id, o.lease_generation, o.sealed_token
FROM worker_offers AS o
JOIN run_dispatch_leases AS l
  ON l.attempt_id = o.attempt_id
 AND l.lease_generation = o.lease_generation
WHERE o.worker_id = %(worker_id)s
  AND o.worker_session_id = %(session_id)s
  AND o.worker_generation = %(generation)s
  AND l.status = 'leased'
ORDER BY o.created_at_ms, o.attempt_id COLLATE "C", o.lease_generation
LIMIT %(limit)s;

-- name: delete_worker_offer
DELETE FROM worker_offers
WHERE attempt_id = %(attempt_id)s
  AND lease_generation = %(lease_generation)s
  AND worker_id = %(worker_id)s
  AND worker_session_id = %(session_id)s
  AND worker_generation = %(generation)s;

-- name: delete_settled_worker_offers
-- Offers whose lease is no longer `leased` (completed or released: nothing to deliver), bounded.
DELETE FROM worker_offers
WHERE (attempt_id, lease_generation) IN (
    SELECT o.attempt_id, o.lease_generation
    FROM worker_offers AS o
    JOIN run_dispatch_leases AS l
      ON l.attempt_id = o.attempt_id
     AND l.lease_generation = o.lease_generation
    WHERE l.status <> 'leased'
    ORDER BY o.created_at_ms, o.attempt_id COLLATE "C", o.lease_generation
    LIMIT %(limit)s
);
