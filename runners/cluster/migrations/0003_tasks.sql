-- 0003_tasks: the edge runner's 0002_tasks (tasks, their immutable revisions, the schedule
-- bookkeeping; kernel/task, decisions TK-1..TK-13), with the same tables, columns, checks and
-- named index, so both runners keep one logical schema (tests/runners/cluster/test_cluster_schema).
-- The cluster application that writes them is issue 17; until then the tables are empty here.
-- JSON columns stay text checked as JSON, as on the edge runner, so a value reads back the same.
-- The Worker-ingress role (0002) gets no privilege on them: a delivery never reads a task.

CREATE TABLE tasks (
    task_name        TEXT PRIMARY KEY NOT NULL,
    origin           TEXT NOT NULL CHECK (origin IN ('user', 'adhoc')),
    current_revision BIGINT NOT NULL CHECK (current_revision >= 1),
    created_at_ms    BIGINT NOT NULL,
    updated_at_ms    BIGINT NOT NULL,
    removed_at_ms    BIGINT,
    version          BIGINT NOT NULL CHECK (version >= 1)
);

CREATE TABLE task_revisions (
    task_name     TEXT NOT NULL REFERENCES tasks (task_name),
    revision      BIGINT NOT NULL CHECK (revision >= 1),
    argv          TEXT NOT NULL CHECK (json_typeof(argv::json) = 'array'),
    cwd           TEXT,
    env           TEXT NOT NULL CHECK (json_typeof(env::json) = 'object'),
    cron          TEXT,
    deadline_ms   BIGINT CHECK (deadline_ms >= 1),
    retry_policy  TEXT CHECK (
                      retry_policy IS NULL OR json_typeof(retry_policy::json) = 'object'),
    digest        TEXT NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (task_name, revision)
);

CREATE TABLE task_schedules (
    task_name     TEXT PRIMARY KEY NOT NULL REFERENCES tasks (task_name),
    cron          TEXT,
    since_ms      BIGINT NOT NULL,
    next_due_ms   BIGINT,
    fire_at_ms    BIGINT,
    fire_revision BIGINT CHECK (fire_revision >= 1),
    fire_state    TEXT CHECK (fire_state IN ('claimed', 'admitted', 'refused', 'abandoned')),
    fire_code     TEXT,
    version       BIGINT NOT NULL CHECK (version >= 1),
    CHECK ((fire_at_ms IS NULL) = (fire_state IS NULL)
           AND (fire_at_ms IS NULL) = (fire_revision IS NULL)),
    CHECK (cron IS NOT NULL OR next_due_ms IS NULL)
);

CREATE INDEX task_schedules_by_due
    ON task_schedules (next_due_ms, task_name) WHERE next_due_ms IS NOT NULL;
