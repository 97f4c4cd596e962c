-- The read-only candidate sources of the Run domain (runners/sources.py), one statement each,
-- plus a `_after` variant for the sources that page with a keyset cursor (P-3). They mirror
-- kernel/selection.py exactly: same eligibility, same total order, `LIMIT :limit + 1` to decide
-- `has_more` (P-2), one observation time per call (P-5), nothing ineligible returned (P-6).
-- "Latest Attempt" is the Attempt with the highest number of its Run (unique (run_id, number)).
-- Each query names the index it is driven by (`INDEXED BY`): the plan cannot silently turn into a
-- table scan when statistics of a skewed status distribution suggest one (terminal Runs dominate
-- a long-lived database); without the index the statement fails to prepare instead.

-- name: lost_retry_candidates
-- §1.8.2: runtime-owned ordinary Runs without intent whose latest Attempt is `lost`; `lost` Runs
-- by (latest.finished_at_ms, run_id) first, then due `retry_wait` Runs by
-- (next_attempt_at_ms, run_id). Key (k0, k1, 0, run_id).
SELECT run_id, attempt_id, k0, k1
FROM (
    SELECT r.run_id AS run_id, a.attempt_id AS attempt_id, 0 AS k0,
           coalesce(a.finished_at_ms, 0) AS k1
    FROM runs AS r INDEXED BY runs_by_status
    JOIN attempts AS a
      ON a.run_id = r.run_id
     AND a.number = (SELECT max(x.number) FROM attempts AS x WHERE x.run_id = r.run_id)
    WHERE r.status = 'lost'
      AND r.owner = 'runtime'
      AND r.kind = 'ordinary'
      AND r.cancel_requested_at_ms IS NULL
      AND a.status = 'lost'
    UNION ALL
    SELECT r.run_id AS run_id, a.attempt_id AS attempt_id, 1 AS k0,
           p.next_attempt_at_ms AS k1
    FROM runs AS r INDEXED BY runs_by_status
    JOIN run_retry_policies AS p ON p.run_id = r.run_id
    JOIN attempts AS a
      ON a.run_id = r.run_id
     AND a.number = (SELECT max(x.number) FROM attempts AS x WHERE x.run_id = r.run_id)
    WHERE r.status = 'retry_wait'
      AND r.owner = 'runtime'
      AND r.kind = 'ordinary'
      AND r.cancel_requested_at_ms IS NULL
      AND a.status = 'lost'
      AND p.next_attempt_at_ms <= :observed_at_ms
)
ORDER BY k0, k1, run_id
LIMIT :limit + 1;

-- name: runtime_recovery_candidates
-- §2.3: runtime ordinary Runs in dispatching|running|lost whose latest Attempt is
-- claimed|starting|running, not pristine (B-33: no binding, offer, start facts, callback
-- digest, nor any lease row), with no `leased` lease or an expired one. Key
-- (0, 0, attempt_id) without a leased lease, else (1, expires_at_ms, attempt_id).
SELECT r.run_id AS run_id, a.attempt_id AS attempt_id,
       CASE WHEN l.attempt_id IS NULL THEN 0 ELSE 1 END AS k0,
       coalesce(l.expires_at_ms, 0) AS k1
FROM runs AS r INDEXED BY runs_by_status
JOIN attempts AS a
  ON a.run_id = r.run_id
 AND a.number = (SELECT max(x.number) FROM attempts AS x WHERE x.run_id = r.run_id)
LEFT JOIN run_dispatch_leases AS l
  ON l.attempt_id = a.attempt_id
 AND l.run_id = r.run_id
 AND l.status = 'leased'
WHERE r.status IN ('dispatching', 'running', 'lost')
  AND r.owner = 'runtime'
  AND r.kind = 'ordinary'
  AND a.status IN ('claimed', 'starting', 'running')
  AND NOT (
      a.status = 'claimed'
      AND a.worker_id IS NULL
      AND a.offer_id IS NULL
      AND a.lease_generation IS NULL
      AND a.executor_handle IS NULL
      AND a.started_at_ms IS NULL
      AND a.callback_token_sha256 IS NULL
      AND NOT EXISTS (
          SELECT 1 FROM run_dispatch_leases AS y
          WHERE y.attempt_id = a.attempt_id AND y.run_id = r.run_id
      )
  )
  AND (l.attempt_id IS NULL OR l.expires_at_ms <= :observed_at_ms)
ORDER BY k0, k1, a.attempt_id
LIMIT :limit + 1;

-- name: lease_expiry_candidates
-- §3.16: `leased` leases of runtime Runs with expires_at_ms <= observation time, in the order
-- of index (status, expires_at_ms, attempt_id). Key (expires_at_ms, attempt_id).
SELECT r.run_id AS run_id, l.attempt_id AS attempt_id, l.expires_at_ms AS k0
FROM run_dispatch_leases AS l INDEXED BY run_dispatch_leases_by_expiry
JOIN runs AS r ON r.run_id = l.run_id
WHERE l.status = 'leased'
  AND l.expires_at_ms <= :observed_at_ms
  AND r.owner = 'runtime'
ORDER BY l.expires_at_ms, l.attempt_id
LIMIT :limit + 1;

-- name: lease_expiry_candidates_after
SELECT r.run_id AS run_id, l.attempt_id AS attempt_id, l.expires_at_ms AS k0
FROM run_dispatch_leases AS l INDEXED BY run_dispatch_leases_by_expiry
JOIN runs AS r ON r.run_id = l.run_id
WHERE l.status = 'leased'
  AND l.expires_at_ms <= :observed_at_ms
  AND (l.expires_at_ms, l.attempt_id) > (:after_expires_at_ms, :after_attempt_id)
  AND r.owner = 'runtime'
ORDER BY l.expires_at_ms, l.attempt_id
LIMIT :limit + 1;

-- name: local_startup_candidates
-- §2.2: ordinary runtime Runs whose latest Attempt is a local-executor Attempt (it holds a
-- callback digest) in starting|running. Key (attempt_id). Driven by the Run status index, not
-- an Attempt index of its own (CAD-16, decision E-2): by I-2 a starting Attempt's Run is
-- `dispatching` and a running one's is `running`, so only live Runs are read and sorted.
SELECT a.run_id AS run_id, a.attempt_id AS attempt_id
FROM runs AS r INDEXED BY runs_by_status
JOIN attempts AS a ON a.run_id = r.run_id
WHERE r.status IN ('dispatching', 'running')
  AND a.status IN ('starting', 'running')
  AND a.callback_token_sha256 IS NOT NULL
  AND a.number = (SELECT max(x.number) FROM attempts AS x WHERE x.run_id = a.run_id)
  AND r.owner = 'runtime'
  AND r.kind = 'ordinary'
ORDER BY a.attempt_id
LIMIT :limit + 1;

-- name: local_startup_candidates_after
SELECT a.run_id AS run_id, a.attempt_id AS attempt_id
FROM runs AS r INDEXED BY runs_by_status
JOIN attempts AS a ON a.run_id = r.run_id
WHERE r.status IN ('dispatching', 'running')
  AND a.status IN ('starting', 'running')
  AND a.attempt_id > :after_attempt_id
  AND a.callback_token_sha256 IS NOT NULL
  AND a.number = (SELECT max(x.number) FROM attempts AS x WHERE x.run_id = a.run_id)
  AND r.owner = 'runtime'
  AND r.kind = 'ordinary'
ORDER BY a.attempt_id
LIMIT :limit + 1;

-- name: orphaned_created_candidates
-- §2.2 (B-30): ordinary runtime `created` Runs created before this process started.
-- Key (created_at_ms, run_id).
SELECT r.run_id AS run_id, r.created_at_ms AS k0
FROM runs AS r INDEXED BY runs_by_status
WHERE r.status = 'created'
  AND r.created_at_ms < :process_started_at_ms
  AND r.owner = 'runtime'
  AND r.kind = 'ordinary'
ORDER BY r.created_at_ms, r.run_id
LIMIT :limit + 1;

-- name: orphaned_created_candidates_after
SELECT r.run_id AS run_id, r.created_at_ms AS k0
FROM runs AS r INDEXED BY runs_by_status
WHERE r.status = 'created'
  AND r.created_at_ms < :process_started_at_ms
  AND (r.created_at_ms, r.run_id) > (:after_created_at_ms, :after_run_id)
  AND r.owner = 'runtime'
  AND r.kind = 'ordinary'
ORDER BY r.created_at_ms, r.run_id
LIMIT :limit + 1;

-- name: cancel_convergence_candidates
-- §1.9 (D-6) and Appendix E-1: runtime ordinary Runs with an intent and no live execution:
-- created, queued, lost or retry_wait; dispatching with a `claimed` latest Attempt; or
-- dispatching / running with a `starting` / `running` latest Attempt whose current lease
-- (attempt_id, Attempt.lease_generation: the primary key) was released `lease_expired` (T9: no
-- Worker holds authority any more). Key (cancel_requested_at_ms, run_id).
SELECT r.run_id AS run_id, r.cancel_requested_at_ms AS k0
FROM runs AS r INDEXED BY runs_by_status
WHERE r.status IN ('created', 'queued', 'lost', 'retry_wait', 'dispatching', 'running')
  AND r.cancel_requested_at_ms IS NOT NULL
  AND r.owner = 'runtime'
  AND r.kind = 'ordinary'
  AND (
      r.status IN ('created', 'queued', 'lost', 'retry_wait')
      OR EXISTS (
          SELECT 1 FROM attempts AS a
          WHERE a.run_id = r.run_id
            AND a.number = (SELECT max(x.number) FROM attempts AS x WHERE x.run_id = r.run_id)
            AND (
                (r.status = 'dispatching' AND a.status = 'claimed')
                OR (
                    a.status IN ('starting', 'running')
                    AND EXISTS (
                        SELECT 1 FROM run_dispatch_leases AS l
                        WHERE l.attempt_id = a.attempt_id
                          AND l.lease_generation = a.lease_generation
                          AND l.run_id = r.run_id
                          AND l.status = 'released'
                          AND l.release_reason = 'lease_expired'
                    )
                )
            )
      )
  )
ORDER BY r.cancel_requested_at_ms, r.run_id
LIMIT :limit + 1;

-- name: local_dispatch_candidates
-- §1.8.3 (D-13): the latest `claimed` Attempt, of the local executor type, of an uncancelled
-- runtime `queued` Run. Key (coalesce(queued_at_ms, created_at_ms), attempt created_at_ms,
-- attempt_id).
SELECT r.run_id AS run_id, a.attempt_id AS attempt_id,
       coalesce(r.queued_at_ms, r.created_at_ms) AS k0, a.created_at_ms AS k1
FROM runs AS r INDEXED BY runs_by_status
JOIN attempts AS a
  ON a.run_id = r.run_id
 AND a.number = (SELECT max(x.number) FROM attempts AS x WHERE x.run_id = r.run_id)
WHERE r.status = 'queued'
  AND r.owner = 'runtime'
  AND r.cancel_requested_at_ms IS NULL
  AND a.status = 'claimed'
  AND a.executor_type = :local_executor_type
ORDER BY k0, k1, a.attempt_id
LIMIT :limit + 1;

-- name: local_dispatch_candidates_after
SELECT r.run_id AS run_id, a.attempt_id AS attempt_id,
       coalesce(r.queued_at_ms, r.created_at_ms) AS k0, a.created_at_ms AS k1
FROM runs AS r INDEXED BY runs_by_status
JOIN attempts AS a
  ON a.run_id = r.run_id
 AND a.number = (SELECT max(x.number) FROM attempts AS x WHERE x.run_id = r.run_id)
WHERE r.status = 'queued'
  AND r.owner = 'runtime'
  AND r.cancel_requested_at_ms IS NULL
  AND a.status = 'claimed'
  AND a.executor_type = :local_executor_type
  AND (coalesce(r.queued_at_ms, r.created_at_ms), a.created_at_ms, a.attempt_id)
      > (:after_queued_at_ms, :after_created_at_ms, :after_attempt_id)
ORDER BY k0, k1, a.attempt_id
LIMIT :limit + 1;

-- ---------------------------------------------------------------- Workflow sources (§4) -----
-- They mirror kernel/workflow/selection.py (and its `rules` predicates). A Workflow is a Run of
-- kind `workflow` with an admission row; its steps' dependencies are the JSON array
-- `depends_on`, read with json_each.

-- name: workflow_cancel_candidates
-- Phase 1 (§4.4): Workflows still `running` with a cancellation intent. Key
-- (cancel_requested_at_ms, run_id).
SELECT r.run_id AS run_id, r.cancel_requested_at_ms AS k0
FROM runs AS r INDEXED BY runs_by_status
JOIN workflow_admissions AS w ON w.run_id = r.run_id
WHERE r.status = 'running'
  AND r.kind = 'workflow'
  AND r.cancel_requested_at_ms IS NOT NULL
  AND (r.cancel_requested_at_ms, r.run_id) > (:after_k0, :after_run_id)
ORDER BY k0, r.run_id
LIMIT :limit + 1;

-- name: workflow_frontier_candidates
-- Phase 3 (§4.4, B-62): open Workflows (running, no intent) with a `pending` StepRun whose
-- dependencies all succeeded or one of which ended otherwise, or with every StepRun final. Key
-- (created_at_ms, run_id).
SELECT r.run_id AS run_id, r.created_at_ms AS k0
FROM runs AS r INDEXED BY runs_by_status
JOIN workflow_admissions AS w ON w.run_id = r.run_id
WHERE r.status = 'running'
  AND r.kind = 'workflow'
  AND r.cancel_requested_at_ms IS NULL
  AND (r.created_at_ms, r.run_id) > (:after_k0, :after_run_id)
  AND (
      NOT EXISTS (
          SELECT 1 FROM step_runs AS s
          WHERE s.run_id = r.run_id
            AND s.status NOT IN ('succeeded', 'failed', 'cancelled', 'timed_out')
      )
      OR EXISTS (
          SELECT 1 FROM step_runs AS s
          WHERE s.run_id = r.run_id
            AND s.status = 'pending'
            AND (
                NOT EXISTS (
                    SELECT 1 FROM json_each(s.depends_on) AS d
                    JOIN step_runs AS p ON p.run_id = r.run_id AND p.step_key = d.value
                    WHERE p.status <> 'succeeded'
                )
                OR EXISTS (
                    SELECT 1 FROM json_each(s.depends_on) AS d
                    JOIN step_runs AS p ON p.run_id = r.run_id AND p.step_key = d.value
                    WHERE p.status IN ('failed', 'cancelled', 'timed_out')
                )
            )
      )
  )
ORDER BY k0, r.run_id
LIMIT :limit + 1;

-- name: task_admission_candidates
-- Phase 4 (§4.3): `ready` StepRuns due at :observed_at_ms, of an open Workflow, with no
-- admission at their epoch and attempts left. Key (ready_at_ms, step_run_id, version).
SELECT s.run_id AS run_id, coalesce(s.ready_at_ms, 0) AS k0, s.step_run_id AS step_run_id,
       s.version AS version
FROM step_runs AS s INDEXED BY step_runs_by_status
JOIN runs AS r ON r.run_id = s.run_id
WHERE s.status = 'ready'
  AND coalesce(s.ready_at_ms, 0) <= :observed_at_ms
  AND r.status = 'running'
  AND r.cancel_requested_at_ms IS NULL
  AND NOT EXISTS (
      SELECT 1 FROM task_admissions AS t
      WHERE t.step_run_id = s.step_run_id AND t.step_run_version = s.version
  )
  -- Attempts left: an Attempt proven never launched does not count (decision WF-6).
  AND (
      SELECT count(*) FROM task_admissions AS t
      JOIN attempts AS x ON x.attempt_id = t.attempt_id
      WHERE t.step_run_id = s.step_run_id
        AND coalesce(x.error_code, '') <> 'WORKFLOW_TASK_NEVER_LAUNCHED'
  ) < s.max_attempts
  AND (coalesce(s.ready_at_ms, 0), s.step_run_id, s.version)
      > (:after_k0, :after_step_run_id, :after_version)
ORDER BY k0, s.step_run_id, s.version
LIMIT :limit + 1;

-- name: task_dispatch_candidates
-- Phase 5, the Task half of D-15 (§4.3, WF-04): a `claimed` Task Attempt of the local executor
-- type with its ledger entry, its StepRun exactly `ready` at the ledger's epoch, its parent
-- running without intent. Key (admitted_at_ms, attempt_id).
SELECT t.run_id AS run_id, a.attempt_id AS attempt_id, t.admitted_at_ms AS k0
FROM step_runs AS s INDEXED BY step_runs_by_status
JOIN task_admissions AS t
  ON t.step_run_id = s.step_run_id AND t.step_run_version = s.version
JOIN attempts AS a ON a.attempt_id = t.attempt_id
JOIN runs AS r ON r.run_id = t.run_id
WHERE s.status = 'ready'
  AND a.status = 'claimed'
  AND a.step_run_id = s.step_run_id
  AND a.executor_type = :local_executor_type
  AND r.status = 'running'
  AND r.cancel_requested_at_ms IS NULL
  AND (t.admitted_at_ms, a.attempt_id) > (:after_k0, :after_attempt_id)
ORDER BY k0, a.attempt_id
LIMIT :limit + 1;

-- name: task_recovery_candidates
-- §4.5: the started Task Attempts (starting/running) of every Workflow. Key (attempt_id).
SELECT a.run_id AS run_id, a.attempt_id AS attempt_id
FROM runs AS r INDEXED BY runs_by_status
JOIN workflow_admissions AS w ON w.run_id = r.run_id
JOIN attempts AS a ON a.run_id = r.run_id
WHERE r.status = 'running'
  AND r.kind = 'workflow'
  AND a.status IN ('starting', 'running')
  AND a.step_run_id IS NOT NULL
  AND a.attempt_id > :after_attempt_id
ORDER BY a.attempt_id
LIMIT :limit + 1;
