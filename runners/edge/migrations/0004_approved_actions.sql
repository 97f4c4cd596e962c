-- 0004_approved_actions: the approval domain behind the Approved Action ports (SPEC §5, ADR-0036;
-- issue 19, decision AA-D1), and the task flag that asks for it. Edge and standalone only: the
-- cluster profile refuses Approved Actions (§5.4), so the cluster migrations have no such table.
--
-- An action holds the exact Run admission it will make (the run_* and policy_* columns, one
-- AdmitRun flattened; kernel/approved_action/codec.py), who asked and decided and when, and when
-- the dispatcher passed the start barrier. Each change appends one row to action_events, so
-- version = event_seq. The Run tables of 0001 are untouched: an action names its Run by run_id
-- without a foreign key (the Run exists only once the action started).

CREATE TABLE approved_actions (
    action_id              TEXT PRIMARY KEY NOT NULL,
    status                 TEXT NOT NULL CHECK (status IN (
                               'pending', 'approved', 'denied', 'starting', 'started', 'failed',
                               'manual_required')),
    version                INTEGER NOT NULL CHECK (version >= 1),
    event_seq              INTEGER NOT NULL CHECK (event_seq = version),
    requested_by           TEXT NOT NULL,
    requested_at_ms        INTEGER NOT NULL CHECK (requested_at_ms >= 0),
    updated_at_ms          INTEGER NOT NULL,
    decided_by             TEXT,
    decided_at_ms          INTEGER,
    claimed_at_ms          INTEGER,
    finished_at_ms         INTEGER,
    code                   TEXT,
    run_id                 TEXT NOT NULL UNIQUE,
    attempt_id             TEXT NOT NULL,
    project_id             TEXT NOT NULL,
    task_id                TEXT NOT NULL,
    task_revision          INTEGER NOT NULL CHECK (task_revision >= 1),
    executor_type          TEXT NOT NULL,
    run_kind               TEXT NOT NULL,
    run_owner              TEXT NOT NULL,
    run_actor              TEXT NOT NULL,
    policy_max_attempts    INTEGER,
    policy_retry_on_lost   INTEGER CHECK (policy_retry_on_lost IN (0, 1)),
    policy_safety          TEXT,
    policy_backoff_base_ms INTEGER,
    policy_backoff_max_ms  INTEGER,
    -- the decision is all there or not at all; the barrier time is there past the barrier
    CHECK ((decided_by IS NULL) = (decided_at_ms IS NULL)),
    CHECK ((status = 'pending') = (decided_at_ms IS NULL)),
    CHECK ((claimed_at_ms IS NOT NULL)
           = (status IN ('starting', 'started', 'failed', 'manual_required'))),
    CHECK ((finished_at_ms IS NOT NULL)
           = (status IN ('denied', 'started', 'failed', 'manual_required')))
) STRICT;

CREATE TABLE action_events (
    action_id TEXT NOT NULL REFERENCES approved_actions (action_id),
    seq       INTEGER NOT NULL CHECK (seq >= 1),
    type      TEXT NOT NULL,
    actor     TEXT NOT NULL,
    at_ms     INTEGER NOT NULL,
    by        TEXT,
    code      TEXT,
    PRIMARY KEY (action_id, seq)
) STRICT;

-- The two due indexes the ports page over (SPEC §5.1, §5.3; an empty page is one bounded index
-- query): the dispatcher's in (decided_at_ms, action_id) over `approved`, the reconciler's in
-- (claimed_at_ms, action_id) over `starting`. Partial, so each holds only its due rows.
CREATE INDEX approved_actions_dispatch_due
    ON approved_actions (decided_at_ms, action_id) WHERE status = 'approved';
CREATE INDEX approved_actions_recovery_due
    ON approved_actions (claimed_at_ms, action_id) WHERE status = 'starting';
-- `qlk approvals`: the newest first, keyset (requested_at_ms, action_id).
CREATE INDEX approved_actions_by_request
    ON approved_actions (requested_at_ms, action_id);

-- A task revision that requires approval: a submission of it becomes an approval request.
ALTER TABLE task_revisions ADD COLUMN requires_approval INTEGER NOT NULL DEFAULT 0
    CHECK (requires_approval IN (0, 1));
