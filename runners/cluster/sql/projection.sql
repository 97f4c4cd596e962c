-- The backdoor reader (SPEC §7, ARCHITECTURE rule 6): reads the tables directly, on its own
-- connection in a read-only transaction, bypassing the runner's loads, to build the canonical projection
-- (conformance/run/projection.py). Columns are the kernel entities' field names. Rows come in
-- the canonical order, the primary key's, with text compared by code point (COLLATE "C", the
-- canonical projection's `str` order) whatever the database's default collation is.

-- name: project_runs
SELECT run_id, project_id, task_id, task_revision, executor_type, kind, owner, status,
       version, event_seq, created_at_ms, updated_at_ms, queued_at_ms, started_at_ms,
       finished_at_ms, cancel_requested_at_ms, cancel_reason, error_code, retry_of_run_id
FROM runs
ORDER BY run_id COLLATE "C";

-- name: project_attempts
SELECT attempt_id, run_id, number, status, executor_type, created_at_ms, step_run_id,
       worker_id, worker_session_id, worker_generation, offer_id, lease_generation,
       lease_version, executor_handle, started_at_ms, log_artifact_id, callback_sequence,
       finished_at_ms, exit_code, error_code, callback_token_sha256
FROM attempts
ORDER BY attempt_id COLLATE "C";

-- name: project_policies
SELECT run_id, max_attempts, retry_on_lost, safety, backoff_base_ms, backoff_max_ms, version,
       created_at_ms, updated_at_ms, next_attempt_at_ms
FROM run_retry_policies
ORDER BY run_id COLLATE "C";

-- name: project_leases
SELECT attempt_id, run_id, lease_generation, status, version, worker_id, worker_session_id,
       worker_generation, token_digest, acquired_at_ms, renewed_at_ms, expires_at_ms,
       updated_at_ms, released_at_ms, release_reason, completed_at_ms
FROM run_dispatch_leases
ORDER BY attempt_id COLLATE "C", lease_generation;

-- name: project_events
SELECT event_id, run_id, seq, type, actor, dedupe_key, at_ms, attempt_id, step_run_id, code,
       payload
FROM events
ORDER BY run_id COLLATE "C", seq;
