-- Loads events.jsonl and sessions.jsonl (current directory) into the tables of
-- schema.sql. Safe to run again on newer exports of the same sessions.
INSERT OR IGNORE INTO events
SELECT session, seq, type, make_timestamp_ns(time_unix_ns), parent_session, trace_id,
       span_id, parent_span_id, step, agent, tool, call_id, target, status, duration_ms,
       model, tokens, output, output_bytes, output_truncated, event
FROM read_json('events.jsonl', format = 'newline_delimited', columns = {
    schema: 'VARCHAR', type: 'VARCHAR', trace_id: 'VARCHAR', span_id: 'VARCHAR',
    parent_span_id: 'VARCHAR', session: 'VARCHAR', parent_session: 'VARCHAR',
    seq: 'UBIGINT', time_unix_ns: 'BIGINT', step: 'UINTEGER', agent: 'VARCHAR',
    tool: 'VARCHAR', call_id: 'VARCHAR', target: 'VARCHAR', status: 'VARCHAR',
    duration_ms: 'UBIGINT', model: 'VARCHAR',
    tokens: 'STRUCT(input UBIGINT, output UBIGINT, cache_read UBIGINT, cache_write UBIGINT)',
    output: 'VARCHAR', output_bytes: 'UBIGINT', output_truncated: 'BOOLEAN', event: 'JSON',
    next_seq: 'UBIGINT', error: 'VARCHAR'})
WHERE schema = 'tacho.audit/1' AND type <> 'export.error';

INSERT INTO export_errors
SELECT session, next_seq, error
FROM read_json('events.jsonl', format = 'newline_delimited', columns = {
    schema: 'VARCHAR', type: 'VARCHAR', session: 'VARCHAR', next_seq: 'UBIGINT',
    error: 'VARCHAR'})
WHERE type = 'export.error'
  AND (session, next_seq) NOT IN (SELECT (session, next_seq) FROM export_errors);

INSERT OR REPLACE INTO sessions
SELECT session, make_timestamp_ns(started_unix_ns), make_timestamp_ns(last_event_unix_ns),
       status, agent, title, workspace,
       coalesce(project, regexp_extract(workspace, '[^/]+$')), parent, events, steps, tool_calls,
       tool_failures, files_edited, tokens_in, tokens_out, risk_score, risk_level
FROM read_json('sessions.jsonl', format = 'newline_delimited', columns = {
    type: 'VARCHAR', session: 'VARCHAR', started_unix_ns: 'BIGINT',
    last_event_unix_ns: 'BIGINT', status: 'VARCHAR', agent: 'VARCHAR', title: 'VARCHAR',
    workspace: 'VARCHAR', project: 'VARCHAR', parent: 'VARCHAR', events: 'UBIGINT',
    steps: 'UBIGINT', tool_calls: 'UBIGINT', tool_failures: 'UBIGINT',
    files_edited: 'UBIGINT', tokens_in: 'UBIGINT', tokens_out: 'UBIGINT',
    risk_score: 'UINTEGER', risk_level: 'VARCHAR'})
WHERE type = 'session';
