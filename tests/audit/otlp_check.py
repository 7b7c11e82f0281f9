"""Checks `tacho audit otlp` against the log, with the official OTLP protobuf classes.

    otlp_check.py TACHO SCENARIO [BATCH_SPANS]

TACHO is the tacho binary; TACHO_HOME names a store with recorded sessions. SCENARIO:

- protobuf, json: a loopback collector (127.0.0.1, a free port) decodes every request
  (gzip, then `ExportTraceServiceRequest` in the protocol's encoding) and answers 200;
  every span is then checked against the events `tacho log dump --json` prints.
- retry: the collector answers the first request 503 (`Retry-After: 0`), then 200:
  tacho must retry once and deliver everything.
- reject: the collector answers 400: tacho must fail (exit 5) after one attempt.
- file: `--file`, one OTLP JSON request per line, parsed with the official classes.

The ids are recomputed here from SPEC §14.2 (BLAKE3 key derivation), not read from
tacho. Prints one JSON summary; exits 1 on the first mismatch (with what differed).
"""

import base64
import calendar
import gzip
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading

import blake3
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

TACHO = sys.argv[1]
SCENARIO = sys.argv[2]
BATCH = sys.argv[3] if len(sys.argv) > 3 else "512"


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def trace_id(session):
    return blake3.blake3(session.encode(), derive_key_context="tacho audit trace v1").digest()[:16]


def span_id(session, seq):
    h = blake3.blake3(derive_key_context="tacho audit span v1")
    h.update(session.encode() + b"\0" + seq.to_bytes(8, "little"))
    return h.digest()[:8]


def root_id(session):
    return span_id(session, 2**64 - 1)


def unix_ns(ts):
    """RFC 3339 with up to nine fraction digits, UTC (`Z`), as tacho prints it."""
    check(ts.endswith("Z"), f"time {ts} is not UTC")
    main, _, frac = ts[:-1].partition(".")
    date, _, clock = main.partition("T")
    y, mo, d = (int(x) for x in date.split("-"))
    h, mi, s = (int(x) for x in clock.split(":"))
    secs = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    return secs * 1_000_000_000 + int((frac + "000000000")[:9])


def hex_to_b64(obj):
    """OTLP JSON writes ids as hex; protobuf's JSON mapping wants base64."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str):
                out[k] = base64.b64encode(bytes.fromhex(v)).decode()
            else:
                out[k] = hex_to_b64(v)
        return out
    if isinstance(obj, list):
        return [hex_to_b64(v) for v in obj]
    return obj


def parse_json_request(text):
    req = ExportTraceServiceRequest()
    json_format.Parse(json.dumps(hex_to_b64(json.loads(text))), req, ignore_unknown_fields=False)
    return req


def run(*args, check_rc=True):
    p = subprocess.run([TACHO, *args], capture_output=True, text=True)
    if check_rc and p.returncode != 0:
        fail(f"tacho {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p


def sessions():
    out = run("session", "list", "--json").stdout
    return [json.loads(line)["session"] for line in out.splitlines() if line.strip()]


def events(session):
    out = run("log", "dump", session, "--json").stdout
    evs = []
    for line in out.splitlines():
        r = json.loads(line)
        if r.get("type") == "event":
            e = r["event"]
            e["seq"] = r["seq"]
            e["t"] = unix_ns(e["ts"])
            evs.append(e)
    return evs


def attrs(span):
    out = {}
    for kv in span.attributes:
        v = kv.value
        which = v.WhichOneof("value")
        if which == "array_value":
            out[kv.key] = [x.string_value for x in v.array_value.values]
        else:
            out[kv.key] = getattr(v, which)
    return out


def check_spans(requests):
    spans = {}
    for req in requests:
        for rs in req.resource_spans:
            check(rs.schema_url.startswith("https://opentelemetry.io/schemas/"), "schema_url")
            for ss in rs.scope_spans:
                check(ss.schema_url == rs.schema_url, "scope schema_url")
                for s in ss.spans:
                    key = (s.trace_id, s.span_id)
                    check(key not in spans, f"span {s.span_id.hex()} sent twice")
                    spans[key] = s
    checked = {"sessions": 0, "spans": len(spans), "tools": 0, "chats": 0, "steps": 0}
    for sid in sessions():
        evs = events(sid)
        if not evs:
            continue
        checked["sessions"] += 1
        tid = trace_id(sid)
        mine = {k[1]: s for k, s in spans.items() if k[0] == tid}
        root = mine.get(root_id(sid))
        check(root is not None, f"{sid}: no root span")
        ra = attrs(root)
        check(ra["gen_ai.operation.name"] == "invoke_agent", "root operation")
        check(ra["gen_ai.conversation.id"] == sid, "conversation id")
        check(root.parent_span_id == b"", "root has a parent")
        check(root.start_time_unix_nano == evs[0]["t"], f"{sid}: root start {root.start_time_unix_nano} != {evs[0]['t']}")
        end = [e for e in evs if e["type"] == "session.end"]
        if end:
            check(root.end_time_unix_nano == end[0]["t"], f"{sid}: root end")
            check(ra["tacho.end_reason"] == end[0]["reason"], "end reason")
        start = evs[0]
        if start["type"] == "session.start" and start.get("agent"):
            check(ra["gen_ai.agent.name"] == start["agent"], "agent name")
        # Every event of the log is in exactly one span (its own, or its pair's).
        calls = {}
        requests_by_id = {}
        responses_seen = set()
        step_stack = [root_id(sid)]
        step_of = {}
        covered = 0
        for e in evs:
            seq, kind = e["seq"], e["type"]
            if kind in ("session.start", "session.end"):
                covered += 1
                continue
            if kind == "step.start":
                s = mine.get(span_id(sid, seq))
                check(s is not None, f"{sid}: no span for step.start {seq}")
                check(s.parent_span_id == step_stack[-1], f"{sid}: step {e['step']} parent")
                check(s.name == f"step {e['step']}", f"step name {s.name}")
                check(s.start_time_unix_nano == e["t"], "step start time")
                step_of[e["step"]] = (seq, s)
                step_stack.append(s.span_id)
                checked["steps"] += 1
                covered += 1
            elif kind == "step.finish" and e["step"] in step_of:
                _, s = step_of.pop(e["step"])
                check(s.end_time_unix_nano == e["t"], f"{sid}: step {e['step']} end time")
                if s.span_id in step_stack:
                    del step_stack[step_stack.index(s.span_id):]
                covered += 1
            elif kind == "tool.call":
                s = mine.get(span_id(sid, seq))
                check(s is not None, f"{sid}: no span for tool.call {seq}")
                a = attrs(s)
                check(s.name == f"execute_tool {e['tool']}", f"tool span name {s.name}")
                check(a["gen_ai.operation.name"] == "execute_tool", "tool operation")
                check(a["gen_ai.tool.name"] == e["tool"], "tool name")
                check(a["gen_ai.tool.call.id"] == e["call_id"], "call id")
                check(s.parent_span_id == step_stack[-1], f"{sid}: tool.call {seq} parent")
                check(s.start_time_unix_nano == e["t"], f"{sid}: tool.call {seq} start time")
                calls[e["call_id"]] = s
                checked["tools"] += 1
                covered += 1
            elif kind == "tool.result" and e["call_id"] in calls:
                s = calls.pop(e["call_id"])
                check(s.end_time_unix_nano == e["t"], f"{sid}: tool.result {seq} end time")
                a = attrs(s)
                check(a["tacho.tool.status"] == e["status"], "tool status")
                if e["status"] == "ok":
                    check(s.status.code == Status.STATUS_CODE_UNSET, "ok tool has a status")
                else:
                    check(s.status.code == Status.STATUS_CODE_ERROR, f"{sid}: failed tool {seq} is not an error")
                    check(a["error.type"] == e["status"], "error.type")
                covered += 1
            elif kind == "llm.request":
                s = mine.get(span_id(sid, seq))
                check(s is not None, f"{sid}: no span for llm.request {seq}")
                check(s.kind == Span.SPAN_KIND_CLIENT, "chat span kind")
                check(s.parent_span_id == step_stack[-1], f"{sid}: llm.request {seq} parent")
                check(s.start_time_unix_nano == e["t"], "chat start")
                requests_by_id[e["request_id"]] = s
                covered += 1
            elif kind == "llm.response" and e.get("response_id") in responses_seen:
                # A repeated response: counted once, so a plain event here.
                s = mine.get(span_id(sid, seq))
                check(s is not None and s.name == "llm.response", f"{sid}: repeated response {seq}")
                check("gen_ai.usage.input_tokens" not in attrs(s), "a repeated response's usage counted twice")
                covered += 1
            elif kind == "llm.response" and e["request_id"] in requests_by_id:
                if e.get("response_id"):
                    responses_seen.add(e["response_id"])
                s = requests_by_id.pop(e["request_id"])
                a = attrs(s)
                check(s.end_time_unix_nano == e["t"], "chat end")
                check(a["gen_ai.operation.name"] == "chat", "chat operation")
                cr, cw = e.get("cache_read", 0), e.get("cache_write", 0)
                check(a["gen_ai.usage.input_tokens"] == e.get("tokens_in", 0) + cr + cw,
                      f"{sid}: input tokens must count cached tokens")
                check(a["gen_ai.usage.output_tokens"] == e.get("tokens_out", 0), "output tokens")
                check(a["gen_ai.usage.cache_read.input_tokens"] == cr, "cache read")
                check(a["gen_ai.usage.cache_creation.input_tokens"] == cw, "cache creation")
                if e.get("response_id"):
                    check(a["gen_ai.response.id"] == e["response_id"], "response id")
                if e.get("stop_reason"):
                    check(a["gen_ai.response.finish_reasons"] == [e["stop_reason"]], "finish reasons")
                if e.get("model"):
                    check(a["gen_ai.response.model"] == e["model"], "response model")
                checked["chats"] += 1
                covered += 1
            else:
                s = mine.get(span_id(sid, seq))
                check(s is not None, f"{sid}: no span for {kind} {seq}")
                check(s.name == kind, f"{sid}: span name {s.name} for {kind}")
                check(attrs(s)["tacho.event.seq"] == seq, "event seq")
                check(s.parent_span_id == step_stack[-1], f"{sid}: {kind} {seq} parent")
                check(s.end_time_unix_nano == e["t"], f"{sid}: {kind} {seq} time")
                covered += 1
        check(covered == len(evs), f"{sid}: {covered} of {len(evs)} events placed")
        for s in mine.values():
            check(s.start_time_unix_nano <= s.end_time_unix_nano, "span ends before it starts")
            check(s.parent_span_id == b"" or s.parent_span_id in mine, f"{sid}: dangling parent")
    check(checked["spans"] > 0, "no spans")
    return checked


class Collector(http.server.BaseHTTPRequestHandler):
    answers = []  # status codes to give, in order; then 200
    requests = []
    attempts = 0

    def log_message(self, *a):
        pass

    def do_POST(self):
        cls = type(self)
        cls.attempts += 1
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path != "/v1/traces":
            self.send_response(404)
            self.end_headers()
            return
        if cls.answers:
            code = cls.answers.pop(0)
            self.send_response(code)
            if code == 503:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(b"try again" if code == 503 else b"bad request")
            return
        check(self.headers["Content-Encoding"] == "gzip", "request not gzipped")
        raw = gzip.decompress(body)
        if self.headers["Content-Type"] == "application/x-protobuf":
            req = ExportTraceServiceRequest.FromString(raw)
        else:
            check(self.headers["Content-Type"] == "application/json", "content type")
            req = parse_json_request(raw.decode())
        check(self.headers.get("X-Team") == "audit", "the --header was not sent")
        cls.requests.append(req)
        self.send_response(200)
        self.send_header("Content-Type", self.headers["Content-Type"])
        self.end_headers()


def serve(answers):
    Collector.answers = list(answers)
    Collector.requests = []
    Collector.attempts = 0
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def main():
    result = {"scenario": SCENARIO}
    if SCENARIO == "file":
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "traces.jsonl")
            run("audit", "otlp", "--all", "--file", path)
            with open(path) as f:
                reqs = [parse_json_request(line) for line in f if line.strip()]
        result.update(check_spans(reqs))
    elif SCENARIO in ("protobuf", "json", "retry"):
        srv, url = serve([503] if SCENARIO == "retry" else [])
        proto = "http/json" if SCENARIO == "json" else "http/protobuf"
        p = run("audit", "otlp", "--all", "--endpoint", url, "--protocol", proto,
                "--header", "X-Team=audit", "--batch-spans", BATCH, "--json")
        srv.shutdown()
        sent = json.loads(p.stdout)
        check(sent["requests"] == len(Collector.requests), "requests counted")
        if SCENARIO == "retry":
            check(sent["retries"] == 1, f"retries: {sent['retries']}")
            check(Collector.attempts == len(Collector.requests) + 1, "one retried attempt")
        result.update(check_spans(Collector.requests))
        result["requests"] = len(Collector.requests)
        # Exporting again sends the same spans (ids are derived, not random).
        if SCENARIO == "protobuf":
            first = sorted(s.SerializeToString() for r in Collector.requests
                           for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans)
            srv, url = serve([])
            run("audit", "otlp", "--all", "--endpoint", url, "--header", "X-Team=audit")
            srv.shutdown()
            again = sorted(s.SerializeToString() for r in Collector.requests
                           for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans)
            check(first == again, "a second export differs from the first")
            result["idempotent"] = True
    elif SCENARIO == "reject":
        srv, url = serve([400, 400])
        p = run("audit", "otlp", "--all", "--endpoint", url, check_rc=False)
        srv.shutdown()
        check(p.returncode == 5, f"a 400 must fail the export (exit {p.returncode})")
        check(Collector.attempts == 1, f"a 400 is never retried ({Collector.attempts} attempts)")
        check("HTTP 400" in p.stderr, f"the error names the answer: {p.stderr}")
        result["attempts"] = Collector.attempts
    else:
        fail(f"unknown scenario {SCENARIO}")
    print(json.dumps(result))


main()
