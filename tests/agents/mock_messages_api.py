#!/usr/bin/env python3
"""A loopback mock of the Anthropic Messages API (for the real Claude Code CLI), of
the OpenAI Responses API (for the real Codex CLI), of the OpenAI Chat Completions API
(for OpenAI-compatible clients: Qwen Code, Factory Droid, GitHub Copilot CLI, ...) and of
the Gemini API (for the real Gemini CLI).

Usage: mock_messages_api.py SCRIPT.json PORT_FILE [LOG_FILE]

SCRIPT.json is a list of assistant turns for the main conversation (requests that
carry tools). Each turn is a list of content blocks:
  {"text": "..."}                              a text block
  {"tool": "Bash", "input": {...}}             a tool_use block (ids are generated)
A turn with several tool blocks is one assistant message with several tool_use blocks
(parallel tool calls); the Responses API gets one function_call item per tool block.
The turn answered is chosen by how many assistant messages the request already holds,
so retries and resumed requests get the same answer. A turn may instead be
{"until_text": "needle", "then": [...], "else": [...]}: `then` when the last user
message contains the needle (say, a hook's block reason), otherwise `else`.
Requests without tools (titles, summaries) get a short text. Every response is
streamed as server-sent events, with usage, the way the real API streams it.
The port the server bound is written to PORT_FILE; each request is logged as one JSON
line to LOG_FILE.

The Gemini API (`POST /v1beta/models/<model>:streamGenerateContent?alt=sse`, and
`:generateContent`): a tool block becomes a `functionCall` part (no id, as the real API
sends none), a text block a `text` part; the turn is chosen by how many `model` contents
the request already holds. Each response carries `usageMetadata` (in the last SSE chunk
only), and its log line carries the usage served (`"gemini_usage"`), so a test can check
recorded totals against it. Requests without tools that ask for JSON (the CLI's
next-speaker and loop checks) get a JSON text saying the user speaks next.
"""
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCRIPT = json.load(open(sys.argv[1]))
PORT_FILE = sys.argv[2]
LOG = open(sys.argv[3], "a") if len(sys.argv) > 3 else None
LOCK = threading.Lock()
# Ids are numbered from MOCK_ID_START (default 0): a test that runs the mock again for
# the same conversation (a resumed session) starts it past the first run's ids, as the
# real API's ids never repeat.
COUNTER = [int(os.environ.get("MOCK_ID_START", "0"))]


def next_id(prefix):
    with LOCK:
        COUNTER[0] += 1
        return f"{prefix}_{COUNTER[0]:04d}"


def text_of(content):
    if isinstance(content, str):
        return content
    out = []
    for block in content or []:
        if block.get("type") == "text":
            out.append(block.get("text", ""))
        elif block.get("type") == "tool_result":
            out.append(text_of(block.get("content")))
    return "\n".join(out)


def choose_turn(body):
    messages = body.get("messages", [])
    done = sum(1 for m in messages if m.get("role") == "assistant")
    if done >= len(SCRIPT):
        return [{"text": "All done."}]
    turn = SCRIPT[done]
    if isinstance(turn, dict) and "until_text" in turn:
        last_user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        hit = turn["until_text"] in text_of(last_user.get("content"))
        return turn["then"] if hit else turn["else"]
    return turn


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        self.reply_json({})

    def reply_json(self, obj, status=200):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        path = self.path.split("?")[0]
        if path.endswith("/chat/completions"):
            return self.openai_chat(body, path)
        if path.startswith("/v1beta/models/") and ":" in path:
            return self.gemini(path, body)
        if LOG:
            with LOCK:
                LOG.write(json.dumps({"path": path, "tools": bool(body.get("tools")),
                                      "messages": len(body.get("messages", [])),
                                      "roles": [m.get("role") for m in body.get("messages", [])],
                                      "texts": [text_of(m.get("content"))[:80]
                                                for m in body.get("messages", [])]}) + "\n")
                LOG.flush()
        if path.endswith("/responses"):
            return self.openai_responses(body)
        if path.endswith("/count_tokens"):
            return self.reply_json({"input_tokens": 100})
        if not path.endswith("/v1/messages"):
            return self.reply_json({})
        model = body.get("model", "claude-sonnet-4-5")
        if body.get("tools"):
            blocks = choose_turn(body)
        else:
            blocks = [{"text": "Scripted session"}]
        self.stream(model, blocks, bool(body.get("stream")))

    def openai_responses(self, body):
        """The OpenAI Responses API, as Codex streams it: the turn is chosen by how many
        model outputs (function calls, assistant messages) the input already holds."""
        items = body.get("input", [])
        done = sum(1 for i in items if i.get("type") == "function_call"
                   or (i.get("type") == "message" and i.get("role") == "assistant"))
        # A turn's function calls count one each; map back to turns.
        turn, seen = 0, 0
        while turn < len(SCRIPT) and seen + max(1, len(SCRIPT[turn])) <= done:
            seen += max(1, len(SCRIPT[turn]))
            turn += 1
        blocks = SCRIPT[turn] if turn < len(SCRIPT) else [{"text": "All done."}]
        resp_id = next_id("resp_mock")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()

        def event(data):
            self.wfile.write(f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        event({"type": "response.created", "response": {"id": resp_id}})
        for i, b in enumerate(blocks):
            if "tool" in b:
                item = {"type": "function_call", "id": next_id("fc_mock"),
                        "call_id": next_id("call_mock"), "name": b["tool"],
                        "arguments": json.dumps(b.get("input", {})), "status": "completed"}
            else:
                item = {"type": "message", "id": next_id("msg_mock"), "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": b.get("text", ""),
                                     "annotations": []}]}
            event({"type": "response.output_item.done", "output_index": i, "item": item})
        event({"type": "response.completed", "response": {
            "id": resp_id,
            "usage": {"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 400},
                      "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 10},
                      "total_tokens": 1050}}})
        self.close_connection = True

    def openai_chat(self, body, path):
        """The OpenAI Chat Completions API (`POST .../chat/completions`, whatever the prefix),
        as Qwen Code, Factory Droid, GitHub Copilot CLI and other OpenAI-compatible clients
        call it. The turn is chosen as for the Messages API (a turn's tool calls are one
        assistant message with several `tool_calls`); requests without tools get a short
        text. Streamed (`"stream": true`) as `chat.completion.chunk` events: a role chunk,
        text deltas, each tool call as a header delta (id, name) then an arguments delta,
        a finish chunk, then a usage chunk with empty `choices` and `data: [DONE]`; else one
        `chat.completion` object. Usage grows with the request (prompt tokens 1000 + 10 per
        message) so a reader that keeps only the last figure is caught; the log line of a
        chat request carries the usage it was served (`served`)."""
        messages = body.get("messages", [])
        model = body.get("model", "mock-model")
        blocks = choose_turn(body) if body.get("tools") else [{"text": "Scripted session"}]
        text = "".join(b.get("text", "") for b in blocks if "tool" not in b)
        calls = [{"id": next_id("call_mock"), "type": "function",
                  "function": {"name": b["tool"], "arguments": json.dumps(b.get("input", {}))}}
                 for b in blocks if "tool" in b]
        finish = "tool_calls" if calls else "stop"
        prompt = 1000 + 10 * len(messages)
        completion = 40 + 10 * len(blocks)
        usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                 "total_tokens": prompt + completion,
                 "prompt_tokens_details": {"cached_tokens": 400},
                 "completion_tokens_details": {"reasoning_tokens": 0}}
        stream = bool(body.get("stream"))
        if LOG:
            with LOCK:
                LOG.write(json.dumps({"path": path, "tools": bool(body.get("tools")),
                                      "messages": len(messages), "stream": stream,
                                      "tool_calls": len(calls), "served": usage}) + "\n")
                LOG.flush()
        chat_id = next_id("chatcmpl_mock")
        created = 1767225600
        if not stream:
            message = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = calls
            return self.reply_json({
                "id": chat_id, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish,
                             "logprobs": None}],
                "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()

        def chunk(choices, **extra):
            data = dict({"id": chat_id, "object": "chat.completion.chunk", "created": created,
                         "model": model, "choices": choices}, **extra)
            self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        def delta(d, finish_reason=None):
            chunk([{"index": 0, "delta": d, "finish_reason": finish_reason, "logprobs": None}])

        delta({"role": "assistant", "content": ""})
        if text:
            delta({"content": text})
        for i, c in enumerate(calls):
            delta({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                   "function": {"name": c["function"]["name"],
                                                "arguments": ""}}]})
            delta({"tool_calls": [{"index": i,
                                   "function": {"arguments": c["function"]["arguments"]}}]})
        delta({}, finish)
        chunk([], usage=usage)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    # ---- The Gemini API (Gemini CLI) -------------------------------------------------

    def gemini_turn(self, body):
        contents = body.get("contents", [])
        done = sum(1 for c in contents if c.get("role") == "model")
        if done >= len(SCRIPT):
            return [{"text": "All done."}]
        turn = SCRIPT[done]
        if isinstance(turn, dict) and "until_text" in turn:
            last_user = next((c for c in reversed(contents) if c.get("role") == "user"), {})
            text = []
            for p in last_user.get("parts", []):
                if "text" in p:
                    text.append(p["text"])
                elif "functionResponse" in p:
                    text.append(json.dumps(p["functionResponse"].get("response")))
            return turn["then"] if turn["until_text"] in "\n".join(text) else turn["else"]
        return turn

    def gemini(self, path, body):
        model, _, method = path[len("/v1beta/models/"):].partition(":")
        has_tools = any(t.get("functionDeclarations") for t in body.get("tools") or [])
        config = body.get("generationConfig") or {}
        if method == "countTokens":
            return self.reply_json({"totalTokens": 100})
        if has_tools:
            blocks = self.gemini_turn(body)
        elif config.get("responseMimeType") == "application/json":
            blocks = [{"text": json.dumps({"reasoning": "Scripted session: the user speaks next.",
                                           "next_speaker": "user"})}]
        else:
            blocks = [{"text": "Scripted session"}]
        parts = []
        for b in blocks:
            if "tool" in b:
                parts.append({"functionCall": {"name": b["tool"], "args": b.get("input", {})}})
            else:
                parts.append({"text": b.get("text", "")})
        usage = {"promptTokenCount": 1000, "cachedContentTokenCount": 400,
                 "candidatesTokenCount": 40 + 10 * len(parts), "thoughtsTokenCount": 10}
        usage["totalTokenCount"] = (usage["promptTokenCount"] + usage["candidatesTokenCount"]
                                    + usage["thoughtsTokenCount"])
        if LOG:
            with LOCK:
                LOG.write(json.dumps({"path": path, "tools": has_tools,
                                      "messages": len(body.get("contents", [])),
                                      "gemini_usage": usage}) + "\n")
                LOG.flush()
        response_id = next_id("gemini_resp")
        final = {"candidates": [{"content": {"role": "model", "parts": parts},
                                 "finishReason": "STOP", "index": 0}],
                 "usageMetadata": usage, "modelVersion": model, "responseId": response_id}
        if method != "streamGenerateContent":
            return self.reply_json(final)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()

        def chunk(data):
            self.wfile.write(f"data: {json.dumps(data)}\r\n\r\n".encode())
            self.wfile.flush()

        # Text first, as the real API streams it, then the function calls with the
        # finish reason and the usage in the last chunk.
        texts = [p for p in parts if "text" in p]
        calls = [p for p in parts if "functionCall" in p]
        if texts and calls:
            chunk({"candidates": [{"content": {"role": "model", "parts": texts}, "index": 0}],
                   "modelVersion": model, "responseId": response_id})
            final["candidates"][0]["content"]["parts"] = calls
        chunk(final)
        self.close_connection = True

    def stream(self, model, blocks, stream):
        msg_id = next_id("msg_mock")
        # Usage as the API reports it: the cache-creation total and its breakdown agree.
        usage_in = {"input_tokens": 1200, "cache_creation_input_tokens": 300,
                    "cache_read_input_tokens": 900, "output_tokens": 1,
                    "cache_creation": {"ephemeral_5m_input_tokens": 300,
                                       "ephemeral_1h_input_tokens": 0}}
        content = []
        for b in blocks:
            if "tool" in b:
                content.append({"type": "tool_use", "id": next_id("toolu_mock"),
                                "name": b["tool"], "input": b.get("input", {})})
            else:
                content.append({"type": "text", "text": b.get("text", "")})
        stop = "tool_use" if any(c["type"] == "tool_use" for c in content) else "end_turn"
        out_tokens = 40 + 10 * len(content)
        if not stream:
            return self.reply_json({
                "id": msg_id, "type": "message", "role": "assistant", "model": model,
                "content": content, "stop_reason": stop, "stop_sequence": None,
                "usage": dict(usage_in, output_tokens=out_tokens)})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()

        def event(name, data):
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        event("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage_in}})
        for i, c in enumerate(content):
            if c["type"] == "text":
                event("content_block_start", {"type": "content_block_start", "index": i,
                                              "content_block": {"type": "text", "text": ""}})
                event("content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "text_delta", "text": c["text"]}})
            else:
                event("content_block_start", {"type": "content_block_start", "index": i,
                                              "content_block": {"type": "tool_use", "id": c["id"],
                                                                "name": c["name"], "input": {}}})
                event("content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "input_json_delta",
                                                        "partial_json": json.dumps(c["input"])}})
            event("content_block_stop", {"type": "content_block_stop", "index": i})
        event("message_delta", {"type": "message_delta",
                                "delta": {"stop_reason": stop, "stop_sequence": None},
                                "usage": {"output_tokens": out_tokens}})
        event("message_stop", {"type": "message_stop"})
        self.close_connection = True


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(PORT_FILE + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os
    os.replace(PORT_FILE + ".tmp", PORT_FILE)
    server.serve_forever()


if __name__ == "__main__":
    main()
