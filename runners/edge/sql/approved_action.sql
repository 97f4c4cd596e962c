-- The approval domain's statements (SPEC §5, issue 19, decision AA-D1): the load of an action,
-- one write per effect (kernel/approved_action/effects.py) whose WHERE clause re-checks its guard,
-- the two due indexes the Approved Action ports page over, the listing of `qlk approvals`, and
-- the backdoor reader's two tables. Columns are kernel/approved_action/codec.py's.

-- ---------------------------------------------------------------- aggregate load ------------
-- name: select_action
SELECT action_id, status, version, event_seq, requested_by, requested_at_ms, updated_at_ms,
       decided_by, decided_at_ms, claimed_at_ms, finished_at_ms, code, run_id, attempt_id,
       project_id, task_id, task_revision, executor_type, run_kind, run_owner, run_actor,
       policy_max_attempts, policy_retry_on_lost, policy_safety, policy_backoff_base_ms,
       policy_backoff_max_ms
FROM approved_actions
WHERE action_id = :action_id;

-- ---------------------------------------------------------------- effects -------------------
-- name: insert_action
-- InsertAction. A collision (action id or Run id) means another request got there first.
INSERT INTO approved_actions (
    action_id, status, version, event_seq, requested_by, requested_at_ms, updated_at_ms,
    decided_by, decided_at_ms, claimed_at_ms, finished_at_ms, code, run_id, attempt_id,
    project_id, task_id, task_revision, executor_type, run_kind, run_owner, run_actor,
    policy_max_attempts, policy_retry_on_lost, policy_safety, policy_backoff_base_ms,
    policy_backoff_max_ms
) VALUES (
    :action_id, :status, :version, :event_seq, :requested_by, :requested_at_ms, :updated_at_ms,
    :decided_by, :decided_at_ms, :claimed_at_ms, :finished_at_ms, :code, :run_id, :attempt_id,
    :project_id, :task_id, :task_revision, :executor_type, :run_kind, :run_owner, :run_actor,
    :policy_max_attempts, :policy_retry_on_lost, :policy_safety, :policy_backoff_base_ms,
    :policy_backoff_max_ms
);

-- name: update_action
-- UpdateAction: CAS on version. The admission columns never change.
UPDATE approved_actions
SET status = :status, version = :version, event_seq = :event_seq,
    updated_at_ms = :updated_at_ms, decided_by = :decided_by, decided_at_ms = :decided_at_ms,
    claimed_at_ms = :claimed_at_ms, finished_at_ms = :finished_at_ms, code = :code
WHERE action_id = :action_id AND version = :expected_version;

-- name: insert_action_event
INSERT INTO action_events (action_id, seq, type, actor, at_ms, by, code)
VALUES (:action_id, :seq, :type, :actor, :at_ms, :by, :code);

-- ---------------------------------------------------------------- due indexes ---------------
-- name: approval_dispatch
-- `approved` actions strictly after the cursor, in (decided_at_ms, action_id); limit + 1 rows
-- tell whether more are due. Served by approved_actions_dispatch_due.
SELECT decided_at_ms, action_id
FROM approved_actions
WHERE status = 'approved'
  AND (:after_at IS NULL OR (decided_at_ms, action_id) > (:after_at, :after_id))
ORDER BY decided_at_ms, action_id
LIMIT :limit_plus_one;

-- name: approval_recovery
-- `starting` actions strictly after the cursor, in (claimed_at_ms, action_id). Served by
-- approved_actions_recovery_due.
SELECT claimed_at_ms, action_id
FROM approved_actions
WHERE status = 'starting'
  AND (:after_at IS NULL OR (claimed_at_ms, action_id) > (:after_at, :after_id))
ORDER BY claimed_at_ms, action_id
LIMIT :limit_plus_one;

-- ---------------------------------------------------------------- listing -------------------
-- name: list_actions
-- `qlk approvals`: newest first, strictly before the cursor; :status NULL lists every status.
SELECT action_id, status, version, event_seq, requested_by, requested_at_ms, updated_at_ms,
       decided_by, decided_at_ms, claimed_at_ms, finished_at_ms, code, run_id, attempt_id,
       project_id, task_id, task_revision, executor_type, run_kind, run_owner, run_actor,
       policy_max_attempts, policy_retry_on_lost, policy_safety, policy_backoff_base_ms,
       policy_backoff_max_ms
FROM approved_actions
WHERE (:status IS NULL OR status = :status)
  AND (:before_at IS NULL OR (requested_at_ms, action_id) < (:before_at, :before_id))
ORDER BY requested_at_ms DESC, action_id DESC
LIMIT :limit;

-- name: select_action_events
SELECT action_id, seq, type, actor, at_ms, by, code
FROM action_events
WHERE action_id = :action_id
ORDER BY seq;

-- ---------------------------------------------------------------- backdoor reader -----------
-- name: project_approved_actions
SELECT action_id, status, version, event_seq, requested_by, requested_at_ms, updated_at_ms,
       decided_by, decided_at_ms, claimed_at_ms, finished_at_ms, code, run_id, attempt_id,
       project_id, task_id, task_revision, executor_type, run_kind, run_owner, run_actor,
       policy_max_attempts, policy_retry_on_lost, policy_safety, policy_backoff_base_ms,
       policy_backoff_max_ms
FROM approved_actions
ORDER BY action_id;

-- name: project_action_events
SELECT action_id, seq, type, actor, at_ms, by, code
FROM action_events
ORDER BY action_id, seq;
