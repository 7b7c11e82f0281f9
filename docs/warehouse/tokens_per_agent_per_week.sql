-- Tokens per agent per week (weeks start on Monday, UTC). A response repeated in the
-- record (same response_id) has null tokens and counts once.
SELECT date_trunc('week', time)::DATE AS week,
       agent,
       count(*)               AS responses,
       sum(tokens.input)      AS input,
       sum(tokens.output)     AS output,
       sum(tokens.cache_read) AS cache_read,
       sum(tokens.cache_write) AS cache_write
FROM events
WHERE type = 'llm.response' AND tokens IS NOT NULL
GROUP BY ALL
ORDER BY week, agent;
