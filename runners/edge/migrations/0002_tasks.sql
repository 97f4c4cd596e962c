-- 0002_tasks: tasks, their immutable revisions and the schedule bookkeeping of the local
-- application (issue 15 item 3; kernel/task, decisions TK-1..TK-13). The Run tables of 0001 are
-- untouched: a Run names its task by (task_id, task_revision) = (task_name, revision) without a
-- foreign key, exactly as before (Runs admitted by conformance traces have no task row).
--
-- argv and env are JSON text (an array of strings, an object of strings), the retry policy a
-- JSON object or NULL (kernel.task.policy_document). Times are INTEGER milliseconds.

-- One row per task name: the current revision and the soft-removal mark (TK-7).
CREATE TABLE tasks (
    task_name        TEXT PRIMARY KEY NOT NULL,
    origin           TEXT NOT NULL CHECK (origin IN ('user', 'adhoc')),
    current_revision INTEGER NOT NULL CHECK (current_revision >= 1),
    created_at_ms    INTEGER NOT NULL,
    updated_at_ms    INTEGER NOT NULL,
    removed_at_ms    INTEGER,
    version          INTEGER NOT NULL CHECK (version >= 1)
) STRICT;

-- Every revision ever written; rows are inserted, never updated or deleted (the store has no
-- statement that would), so a Run's (task, revision) always resolves to what it was admitted with.
CREATE TABLE task_revisions (
    task_name     TEXT NOT NULL REFERENCES tasks (task_name),
    revision      INTEGER NOT NULL CHECK (revision >= 1),
    argv          TEXT NOT NULL CHECK (json_valid(argv) AND json_type(argv) = 'array'),
    cwd           TEXT,
    env           TEXT NOT NULL CHECK (json_valid(env) AND json_type(env) = 'object'),
    cron          TEXT,
    deadline_ms   INTEGER CHECK (deadline_ms >= 1),
    retry_policy  TEXT CHECK (
                      retry_policy IS NULL
                      OR (json_valid(retry_policy) AND json_type(retry_policy) = 'object')),
    digest        TEXT NOT NULL CHECK (
                      length(digest) = 64 AND digest NOT GLOB '*[^0-9a-f]*'),
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (task_name, revision)
) STRICT;

-- The schedule bookkeeping, one row per task that ever had a cron (kernel.task.ScheduleState).
CREATE TABLE task_schedules (
    task_name     TEXT PRIMARY KEY NOT NULL REFERENCES tasks (task_name),
    cron          TEXT,
    since_ms      INTEGER NOT NULL,
    next_due_ms   INTEGER,
    fire_at_ms    INTEGER,
    fire_revision INTEGER CHECK (fire_revision >= 1),
    fire_state    TEXT CHECK (fire_state IN ('claimed', 'admitted', 'refused', 'abandoned')),
    fire_code     TEXT,
    version       INTEGER NOT NULL CHECK (version >= 1),
    -- the latest fire is all there or not at all
    CHECK ((fire_at_ms IS NULL) = (fire_state IS NULL)
           AND (fire_at_ms IS NULL) = (fire_revision IS NULL)),
    -- nothing is due without a schedule
    CHECK (cron IS NOT NULL OR next_due_ms IS NULL)
) STRICT;

-- The due scan of the schedule phase, in its keyset order (next_due_ms, task_name).
CREATE INDEX task_schedules_by_due
    ON task_schedules (next_due_ms, task_name) WHERE next_due_ms IS NOT NULL;
