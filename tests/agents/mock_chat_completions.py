#!/usr/bin/env python3
"""A loopback mock of the OpenAI Chat Completions API (for OpenAI-compatible agents:
the real Cline, OpenCode and Kilo Code CLIs), driven by the SCRIPT format of
mock_messages_api.py.

Usage: mock_chat_completions.py SCRIPT.json PORT_FILE [LOG_FILE]

SCRIPT.json is a list of assistant turns for the main conversation (requests that
carry tools). Each turn is a list of blocks:
  {"text": "..."}                              assistant text
  {"tool": "bash", "input": {...}}             a tool call (ids are generated)
A turn with several tool blocks is one assistant message with several tool_calls.
The turn answered is chosen by how many assistant messages the request already holds.
A turn may instead be {"until_text": "needle", "then": [...], "else": [...]}: `then`
when the last user or tool message contains the needle, otherwise `else`.
Requests without tools (titles, summaries) get a short text.

`POST .../chat/completions` streams `chat.completion.chunk` events (SSE) when the
request says `"stream": true`, with the usage in a last chunk whose `choices` is empty
(as the API sends it under `stream_options.include_usage`; sent always); otherwise
one `chat.completion`. `GET .../models` lists the requested model names seen so far
plus `mock-model`. Every request is logged as one JSON line to LOG_FILE with the usage
served (`"usage"`), so a test can check recorded totals against it.
"""
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCRIPT = json.load(open(sys.argv[1]))
PORT_FILE = sys.argv[2]
LOG = open(sys.argv[3], "a") if len(sys.argv) > 3 else None
LOCK = threading.Lock()
COUNTER = [0]
MODELS = {"mock-model"}


def next_id(prefix):
    with LOCK:
        COUNTER[0] += 1
        return f"{prefix}_{COUNTER[0]:04d}"


def text_of(content):
    if isinstance(content, str):
        return content
    out = []
    for part in content or []:
        if isinstance(part, dict) and part.get("type") == "text":
            out.append(part.get("text", ""))
    return "\n".join(out)


def choose_turn(messages):
    done = sum(1 for m in messages if m.get("role") == "assistant")
    if done >= len(SCRIPT):
        return [{"text": "All done."}]
    turn = SCRIPT[done]
    if isinstance(turn, dict) and "until_text" in turn:
        # The messages after the last assistant message: its tool results and any user
        # message (a hook's reason arrives as one or the other).
        tail = []
        for m in reversed(messages):
            if m.get("role") == "assistant":
                break
            tail.append(text_of(m.get("content")))
        hit = turn["until_text"] in "\n".join(tail)
        return turn["then"] if hit else turn["else"]
    return turn


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply_json(self, obj, status=200):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        path = self.path.split("?")[0]
        if LOG:
            with LOCK:
                LOG.write(json.dumps({"method": "GET", "path": path}) + "\n")
                LOG.flush()
        if path.endswith("/models"):
            return self.reply_json({"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "mock"}
                for m in sorted(MODELS)]})
        self.reply_json({})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        path = self.path.split("?")[0]
        if not path.endswith("/chat/completions"):
            if LOG:
                with LOCK:
                    LOG.write(json.dumps({"method": "POST", "path": path}) + "\n")
                    LOG.flush()
            return self.reply_json({})
        model = body.get("model", "mock-model")
        with LOCK:
            MODELS.add(model)
        messages = body.get("messages", [])
        has_tools = bool(body.get("tools"))
        blocks = choose_turn(messages) if has_tools else [{"text": "Scripted session"}]
        calls = [b for b in blocks if "tool" in b]
        text = "".join(b.get("text", "") for b in blocks if "tool" not in b)
        usage = {"prompt_tokens": 1000, "completion_tokens": 40 + 10 * len(blocks),
                 "prompt_tokens_details": {"cached_tokens": 400},
                 "completion_tokens_details": {"reasoning_tokens": 10}}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if LOG:
            with LOCK:
                LOG.write(json.dumps({"method": "POST", "path": path, "model": model,
                                      "tools": has_tools, "messages": len(messages),
                                      "tool_names": [t.get("function", {}).get("name")
                                                     for t in body.get("tools") or []],
                                      "stream": bool(body.get("stream")),
                                      "usage": usage}) + "\n")
                LOG.flush()
        tool_calls = [{"id": next_id("call_mock"), "type": "function",
                       "function": {"name": b["tool"],
                                    "arguments": json.dumps(b.get("input", {}))}}
                      for b in calls]
        finish = "tool_calls" if tool_calls else "stop"
        cid = next_id("chatcmpl_mock")
        created = int(time.time())
        if not body.get("stream"):
            message = {"role": "assistant", "content": text or None}
            if tool_calls:
                message["tool_calls"] = tool_calls
            return self.reply_json({"id": cid, "object": "chat.completion", "created": created,
                                    "model": model, "choices": [{"index": 0, "message": message,
                                                                 "finish_reason": finish}],
                                    "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()

        def chunk(choices, **extra):
            data = {"id": cid, "object": "chat.completion.chunk", "created": created,
                    "model": model, "choices": choices, **extra}
            self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        chunk([{"index": 0, "delta": {"role": "assistant", "content": ""},
                "finish_reason": None}])
        if text:
            chunk([{"index": 0, "delta": {"content": text}, "finish_reason": None}])
        for i, call in enumerate(tool_calls):
            chunk([{"index": 0, "delta": {"tool_calls": [dict(call, index=i)]},
                    "finish_reason": None}])
        chunk([{"index": 0, "delta": {}, "finish_reason": finish}])
        chunk([], usage=usage)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(PORT_FILE + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(PORT_FILE + ".tmp", PORT_FILE)
    server.serve_forever()


if __name__ == "__main__":
    main()
