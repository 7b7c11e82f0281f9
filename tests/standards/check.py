#!/usr/bin/env python3
"""The standards' own readers on what tacho wrote (tests/tests/ci_verify.rs).

  check.py attest ENVELOPES.jsonl PUBLIC_KEY_FILE
      Each line a DSSE envelope: verified by securesystemslib against the OpenSSH
      Ed25519 public key, its statement parsed and validated by in-toto's own model
      (in_toto_attestation), a Test Result predicate parsed as one. Prints a JSON
      summary; exits 1 on the first envelope that fails.
  check.py attest-unsigned ENVELOPES.jsonl
      The same without a signature check (statements a pipeline signs itself).
  check.py tamper ENVELOPES.jsonl PUBLIC_KEY_FILE
      Changes one byte of each statement's predicate and says whether securesystemslib
      still accepts it (it must not): prints the number rejected.
  check.py agent-trace RECORDS.jsonl
      Each line an Agent Trace record, validated against the specification's JSON
      Schema (agent-trace-0.1.0.schema.json, draft 2020-12, formats checked). Prints a
      JSON summary: per record, per file, each range's contributor type; exits 1 on
      the first invalid record.
  check.py sarif SARIF_FILE
      Validates against the OASIS SARIF 2.1.0 schema (sarif-schema-2.1.0.json, next
      to this file) with jsonschema, and against what GitHub code scanning requires on
      top (a location with a start line per result, rule texts, ruleIndex). Prints a
      JSON summary; exits 1 when invalid.
"""

import base64
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PAYLOAD_TYPE = "application/vnd.in-toto+json"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"


def fail(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)


def key_of(path):
    from cryptography.hazmat.primitives.serialization import load_ssh_public_key
    from securesystemslib.signer import SSlibKey

    return SSlibKey.from_crypto(load_ssh_public_key(open(path, "rb").read().strip()))


def verified_payload(line, key):
    from securesystemslib.dsse import Envelope

    env = Envelope.from_dict(json.loads(line))
    if env.payload_type != PAYLOAD_TYPE:
        fail(f"payloadType {env.payload_type!r}")
    if key is not None:
        env.verify([key], 1)  # raises VerificationError
    return env.payload


def statement_of(payload):
    from google.protobuf import json_format
    from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement

    pb = json_format.Parse(payload, statement_pb2.Statement(), ignore_unknown_fields=True)
    Statement.copy_from_pb(pb).validate()  # raises ValueError
    out = {
        "type": pb.predicate_type,
        "subjects": [dict(s.digest) for s in pb.subject],
    }
    if pb.predicate_type == TEST_RESULT:
        tr = json_format.ParseDict(
            json_format.MessageToDict(pb.predicate), test_result_pb2.TestResult()
        )
        if tr.result not in ("PASSED", "WARNED", "FAILED"):
            fail(f"Test Result result {tr.result!r}")
        out["result"] = tr.result
        out["passed"] = list(tr.passed_tests)
        out["failed"] = list(tr.failed_tests)
        out["configuration"] = [
            {"name": c.name, "digest": dict(c.digest)} for c in tr.configuration
        ]
    return out


def attest(path, key):
    statements = []
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if not line.strip():
            continue
        try:
            statements.append(statement_of(verified_payload(line, key)))
        except Exception as e:  # noqa: BLE001 - the reason is the output
            fail(f"{path}:{n}: {type(e).__name__}: {e}")
    print(json.dumps({"envelopes": len(statements), "statements": statements}))


def tamper(path, key):
    from securesystemslib.exceptions import VerificationError

    rejected = total = 0
    for line in open(path, encoding="utf-8"):
        if not line.strip():
            continue
        total += 1
        env = json.loads(line)
        body = bytearray(base64.b64decode(env["payload"]))
        at = body.find(b'"predicate":') + len(b'"predicate":') + 2
        body[at] ^= 0x01
        env["payload"] = base64.b64encode(bytes(body)).decode()
        try:
            verified_payload(json.dumps(env), key)
        except VerificationError:
            rejected += 1
    print(json.dumps({"envelopes": total, "rejected": rejected}))


def github_problems(log):
    for run in log.get("runs", []):
        rules = run.get("tool", {}).get("driver", {}).get("rules", [])
        for r in rules:
            for field in ("shortDescription", "fullDescription", "help"):
                if not (r.get(field) or {}).get("text"):
                    yield f"rule {r.get('id')}: no {field}.text"
        for res in run.get("results", []):
            idx, rid = res.get("ruleIndex"), res.get("ruleId")
            if idx is None or idx >= len(rules) or rules[idx].get("id") != rid:
                yield f"result of {rid}: ruleIndex {idx} names another rule"
            locs = res.get("locations") or []
            if not locs:
                yield f"result of {rid}: no location (GitHub refuses the whole file)"
                continue
            pl = locs[0].get("physicalLocation") or {}
            uri = (pl.get("artifactLocation") or {}).get("uri") or ""
            if not uri or uri.startswith("/") or "://" in uri or " " in uri:
                yield f"result of {rid}: uri {uri!r} is not repository-relative"
            if (pl.get("region") or {}).get("startLine") is None:
                yield f"result of {rid}: no region.startLine"


def sarif(path):
    from jsonschema.validators import validator_for

    schema = json.load(open(os.path.join(HERE, "sarif-schema-2.1.0.json"), encoding="utf-8"))
    cls = validator_for(schema)
    cls.check_schema(schema)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    log = json.load(open(path, encoding="utf-8"))
    problems = [
        "/" + "/".join(map(str, e.absolute_path)) + ": " + e.message
        for e in validator.iter_errors(log)
    ]
    problems += list(github_problems(log))
    if problems:
        fail("\n".join(problems))
    results = [
        {
            "rule": r["ruleId"],
            "level": r.get("level", "warning"),
            "uri": r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            "startLine": r["locations"][0]["physicalLocation"]["region"]["startLine"],
        }
        for run in log["runs"]
        for r in run.get("results", [])
    ]
    print(json.dumps({"validator": cls.__name__, "results": results}))


def agent_trace(path):
    from jsonschema.validators import validator_for

    schema = json.load(open(os.path.join(HERE, "agent-trace-0.1.0.schema.json"), encoding="utf-8"))
    cls = validator_for(schema)
    cls.check_schema(schema)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    records = []
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        problems = [
            "/" + "/".join(map(str, e.absolute_path)) + ": " + e.message
            for e in validator.iter_errors(record)
        ]
        if problems:
            fail(f"{path}:{n}: " + "; ".join(problems))
        records.append(
            {
                "revision": record.get("vcs", {}).get("revision"),
                "files": {
                    f["path"]: sorted(
                        (r["start_line"], r["end_line"], c.get("contributor", {}).get("type"))
                        for c in f["conversations"]
                        for r in c["ranges"]
                    )
                    for f in record["files"]
                },
            }
        )
    print(json.dumps({"validator": cls.__name__, "records": records}))


def main(argv):
    if len(argv) >= 2 and argv[0] == "agent-trace":
        agent_trace(argv[1])
    elif len(argv) >= 2 and argv[0] == "sarif":
        sarif(argv[1])
    elif len(argv) >= 3 and argv[0] == "attest":
        attest(argv[1], key_of(argv[2]))
    elif len(argv) >= 2 and argv[0] == "attest-unsigned":
        attest(argv[1], None)
    elif len(argv) >= 3 and argv[0] == "tamper":
        tamper(argv[1], key_of(argv[2]))
    else:
        fail(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
