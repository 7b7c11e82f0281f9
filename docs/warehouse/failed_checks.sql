-- Failed checks: verification runs that failed or errored and goal checks whose receipt
-- failed, per repository and command, with the sessions they failed in and the last time.
SELECT s.project          AS repository,
       e.type             AS kind,
       e.target           AS command,
       count(*)           AS failures,
       count(DISTINCT e.session) AS sessions,
       max(e.time)        AS last_failed
FROM events e JOIN sessions s USING (session)
WHERE (e.type = 'verification.run' AND e.status IN ('failed', 'error'))
   OR (e.type = 'goal.check' AND e.status = 'failed')
GROUP BY ALL
ORDER BY failures DESC, repository, kind, command;
