"""Loads tacho's exports into DuckDB with docs/warehouse/schema.sql and load.sql (twice:
loading again must add nothing) and runs the three team queries of docs/warehouse/.

usage: warehouse.py EXPORT_DIR DOCS_DIR  (EXPORT_DIR holds events.jsonl, sessions.jsonl)
Prints one JSON object: row counts after each load, and each query's rows."""
import datetime
import json
import os
import sys

import duckdb

QUERIES = ["tokens_per_agent_per_week", "risk_by_repository", "failed_checks"]


def plain(v):
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    if hasattr(v, "__float__") and not isinstance(v, (int, float)):
        return float(v)
    return v


def main():
    export_dir, docs = sys.argv[1], sys.argv[2]
    os.chdir(export_dir)
    db = duckdb.connect("warehouse.duckdb")
    db.execute(open(os.path.join(docs, "schema.sql")).read())
    counts = []
    for _ in range(2):
        db.execute(open(os.path.join(docs, "load.sql")).read())
        counts.append({t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                       for t in ["events", "sessions", "export_errors"]})
    out = {"counts": counts}
    for q in QUERIES:
        cur = db.execute(open(os.path.join(docs, q + ".sql")).read())
        cols = [d[0] for d in cur.description]
        out[q] = [{c: plain(v) for c, v in zip(cols, row)} for row in cur.fetchall()]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
