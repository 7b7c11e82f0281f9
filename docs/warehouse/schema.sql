-- tacho's warehouse schema for DuckDB (docs/warehouse.md). Creates the tables once;
-- load.sql fills them from two JSON Lines files in the current directory:
--   tacho audit export --all --output events.jsonl    (one record per event, SPEC.md §14.1)
--   tacho session list --json > sessions.jsonl        (one record per session, SPEC.md §8.5)

-- One row per recorded event; (session, seq) identifies it, so loading a newer export
-- of the same sessions adds only the events not loaded yet.
CREATE TABLE IF NOT EXISTS events (
    session          VARCHAR NOT NULL,
    seq              UBIGINT NOT NULL,
    type             VARCHAR NOT NULL,  -- the event kind: tool.call, llm.response, ...
    time             TIMESTAMP_NS,      -- the time recorded with the event, UTC
    parent_session   VARCHAR,           -- the session that delegated this one
    trace_id         VARCHAR,           -- OpenTelemetry ids, as `tacho audit otlp` sends them
    span_id          VARCHAR,
    parent_span_id   VARCHAR,
    step             UINTEGER,          -- the innermost step open
    agent            VARCHAR,           -- the agent acting
    tool             VARCHAR,
    call_id          VARCHAR,
    target           VARCHAR,           -- file, pattern or command; a check's command
    status           VARCHAR,           -- ok/error/..., passed/failed, the end reason
    duration_ms      UBIGINT,
    model            VARCHAR,
    tokens           STRUCT(input UBIGINT, output UBIGINT, cache_read UBIGINT, cache_write UBIGINT),
    output           VARCHAR,           -- full tool output unless --max-output cut it
    output_bytes     UBIGINT,
    output_truncated BOOLEAN,
    event            JSON,              -- the whole event (SPEC.md §5.1)
    PRIMARY KEY (session, seq)
);

-- One row per session, as the session index sees it when exported: a later load
-- replaces the row (a running session ends, its risk changes).
CREATE TABLE IF NOT EXISTS sessions (
    session       VARCHAR PRIMARY KEY,
    started       TIMESTAMP_NS,
    last_event    TIMESTAMP_NS,
    status        VARCHAR,              -- running, or the end reason
    agent         VARCHAR,
    title         VARCHAR,
    workspace     VARCHAR,
    project       VARCHAR,              -- the repository: as recorded, else the workspace's last component
    parent        VARCHAR,
    events        UBIGINT,
    steps         UBIGINT,
    tool_calls    UBIGINT,
    tool_failures UBIGINT,
    files_edited  UBIGINT,
    tokens_in     UBIGINT,
    tokens_out    UBIGINT,
    risk_score    UINTEGER,
    risk_level    VARCHAR               -- LOW, MEDIUM, HIGH, CRITICAL
);

-- Sessions an export could not read to their end (a damaged batch): what was exported
-- of them stops before `next_seq`.
CREATE TABLE IF NOT EXISTS export_errors (
    session  VARCHAR,
    next_seq UBIGINT,
    error    VARCHAR
);
