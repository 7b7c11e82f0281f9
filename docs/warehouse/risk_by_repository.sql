-- Risk by repository: how many sessions, their mean and worst risk score, and how many
-- were assessed HIGH or CRITICAL.
SELECT project                     AS repository,
       count(*)                    AS sessions,
       round(avg(risk_score), 1)   AS mean_risk,
       max(risk_score)             AS max_risk,
       count(*) FILTER (WHERE risk_level IN ('HIGH', 'CRITICAL')) AS high_or_critical
FROM sessions
GROUP BY ALL
ORDER BY mean_risk DESC, repository;
