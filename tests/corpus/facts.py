#!/usr/bin/env python3
"""A transcript's own numbers, read straight from the file (one function per agent),
independently of tacho: what tests/tests/corpus.rs holds tacho's imports to.

tokens: as the format states them; tool calls; failed tool calls (as the agent marks
failure); files edited by edit/write/patch tools; first/last timestamps.

    python3 facts.py AGENT TRANSCRIPT      the file's facts
    python3 facts.py --entry AGENT VERSION REPO COMMIT PATH LICENCE DIR TRANSCRIPT [CCUSAGE_JSON]
                                           a line for sessions.json: DIR is what
                                           `tacho import AGENT` is given, relative to
                                           this directory; CCUSAGE_JSON ccusage's
                                           `AGENT session --json` output for DIR
"""
import json, re, sys, os, collections

EXIT_RE = re.compile(r'(?:Process exited with code|Exit code:?|exit code|exit_code["\']?:)\s*(-?\d+)', re.I)

def ts_range(stamps):
    stamps = sorted(s for s in stamps if s)
    return (stamps[0], stamps[-1]) if stamps else (None, None)

def jsonl(path):
    out = []
    for line in open(path, encoding='utf-8', errors='replace'):
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except Exception:
            out.append({'_bad': line[:100]})
    return out

def claude(path):
    rows = jsonl(path)
    first_usage, last_usage, order = {}, {}, []
    calls, results_err, results = {}, set(), set()
    edits_attempted, edits_ok = set(), set()
    stamps, msg_stamps = [], []
    EDIT = {'Edit', 'Write', 'MultiEdit', 'NotebookEdit'}
    for o in rows:
        if o.get('timestamp'):
            stamps.append(o['timestamp'])
            if o.get('type') in ('user', 'assistant'):
                msg_stamps.append(o['timestamp'])
        m = o.get('message') if isinstance(o.get('message'), dict) else None
        if o.get('type') == 'assistant' and m:
            mid = (m.get('id'), o.get('requestId'))
            u = m.get('usage')
            if u:
                if mid not in first_usage:
                    first_usage[mid] = u; order.append(mid)
                last_usage[mid] = u
            for b in m.get('content') or []:
                if isinstance(b, dict) and b.get('type') == 'tool_use':
                    calls[b['id']] = b
        if o.get('type') == 'user' and m and isinstance(m.get('content'), list):
            for b in m['content']:
                if isinstance(b, dict) and b.get('type') == 'tool_result':
                    results.add(b.get('tool_use_id'))
                    if b.get('is_error'):
                        results_err.add(b.get('tool_use_id'))
    for cid, b in calls.items():
        if b.get('name') in EDIT:
            fp = (b.get('input') or {}).get('file_path') or (b.get('input') or {}).get('notebook_path')
            if fp:
                edits_attempted.add(fp)
                if cid in results and cid not in results_err:
                    edits_ok.add(fp)
    def tot(d):
        t = collections.Counter()
        for u in d.values():
            t['input'] += u.get('input_tokens') or 0
            t['output'] += u.get('output_tokens') or 0
            t['cache_read'] += u.get('cache_read_input_tokens') or 0
            t['cache_write'] += u.get('cache_creation_input_tokens') or 0
        t['total'] = t['input'] + t['output'] + t['cache_read'] + t['cache_write']
        return dict(t)
    f, l = ts_range(stamps); mf, ml = ts_range(msg_stamps)
    return dict(tokens=tot(last_usage), tokens_first_occurrence=tot(first_usage), responses=len(order),
                tool_calls=len(calls), tool_results=len(results), failed_calls=len(results_err & set(calls)),
                failed_results_any=len(results_err),
                files_edited=len(edits_ok), files_edited_list=sorted(edits_ok), files_edit_attempted=len(edits_attempted),
                first=f, last=l, first_message=mf, last_message=ml,
                subagent_sidechain_lines=sum(1 for o in rows if o.get('isSidechain')))

def codex(path):
    rows = jsonl(path)
    last_total = None; stamps = []
    calls = {}; outputs = {}; patch_files = set(); patch_files_ok = set()
    for o in rows:
        stamps.append(o.get('timestamp'))
        p = o.get('payload') or {}
        t = p.get('type')
        if o.get('type') == 'event_msg' and t == 'token_count' and p.get('info'):
            last_total = p['info'].get('total_token_usage')
        if o.get('type') == 'response_item' and t in ('function_call', 'custom_tool_call', 'local_shell_call'):
            calls[p.get('call_id') or p.get('id')] = p
        if o.get('type') == 'response_item' and t in ('function_call_output', 'custom_tool_call_output'):
            outputs[p.get('call_id')] = p.get('output')
        if o.get('type') == 'event_msg' and t == 'patch_apply_end':
            for fp in (p.get('changes') or {}):
                patch_files.add(fp)
                if p.get('success', True):
                    patch_files_ok.add(fp)
    failed = []
    for cid, out in outputs.items():
        if cid not in calls:
            continue
        text = out
        if isinstance(out, dict):
            text = json.dumps(out)
        code = None
        if isinstance(text, str):
            try:
                j = json.loads(text)
                if isinstance(j, dict) and isinstance(j.get('metadata'), dict):
                    code = j['metadata'].get('exit_code')
            except Exception:
                pass
            if code is None:
                m = EXIT_RE.search(text[:400])
                if m:
                    code = int(m.group(1))
        if code is None and isinstance(text, str) and text.lstrip().startswith('apply_patch verification failed'):
            code = 'refused'  # Codex refused the patch: a failed call with no exit code of its own
        if code not in (None, 0):
            failed.append(cid)
    # apply_patch inputs name files too (for versions without patch_apply_end changes)
    for cid, c in calls.items():
        inp = c.get('input') if c.get('type') == 'custom_tool_call' else None
        if c.get('name') == 'apply_patch' and isinstance(inp, str):
            for m in re.finditer(r'^\*\*\* (?:Update|Add|Delete) File: (.+)$', inp, re.M):
                patch_files.add(m.group(1).strip())
    tok = None
    if last_total:
        inp = last_total.get('input_tokens', 0); cached = last_total.get('cached_input_tokens', 0)
        tok = dict(input=inp - cached, cache_read=cached, cache_write=0, output=last_total.get('output_tokens', 0),
                   reasoning=last_total.get('reasoning_output_tokens', 0), total=last_total.get('total_tokens'),
                   raw_input_incl_cached=inp)
    f, l = ts_range(stamps)
    return dict(tokens=tok, tool_calls=len(calls), tool_results=len(outputs), failed_calls=len(failed), failed_ids=failed,
                calls_without_output=len(set(calls) - set(outputs)),
                files_edited=len(patch_files_ok or patch_files), files_edited_list=sorted(patch_files_ok or patch_files),
                first=f, last=l)

def copilot(path):
    rows = jsonl(path)
    stamps = [o.get('timestamp') for o in rows]
    starts = {}; done = {}; usage = collections.Counter(); out_msgs = 0; shutdown = None; rec = collections.Counter()
    for o in rows:
        d = o.get('data') or {}
        t = o.get('type')
        if t == 'tool.execution_start':
            starts[d.get('toolCallId')] = d
        elif t == 'tool.execution_complete':
            done[d.get('toolCallId')] = d
        elif t == 'assistant.message':
            out_msgs += d.get('outputTokens') or 0
        elif t == 'session.shutdown':
            shutdown = d
            for mm in (d.get('modelMetrics') or {}).values():
                u = mm.get('usage') or {}
                for k in ('inputTokens', 'outputTokens', 'cacheReadTokens', 'cacheWriteTokens', 'reasoningTokens'):
                    usage[k] += u.get(k) or 0
        elif t in ('session.usage_record', 'assistant.usage'):
            for k in ('inputTokens', 'outputTokens', 'cacheReadTokens', 'cacheWriteTokens'):
                rec[k] += d.get(k) or 0
    failed = [k for k, d in done.items() if d.get('success') is False]
    shell_nonzero = []
    for k, d in done.items():
        r = d.get('result') or {}
        txt = (r.get('content') or '') if isinstance(r, dict) else ''
        m = re.search(r'<shellId: \S+ completed with exit code (\d+)>', txt) or re.search(r'exited with exit code (\d+)', txt)
        if d.get('success') is not False and m and int(m.group(1)) != 0:
            shell_nonzero.append(k)
    edits = set()
    for k, s in starts.items():
        if s.get('toolName') in ('edit', 'create', 'str_replace_editor', 'write', 'str_replace', 'apply_patch'):
            a = s.get('arguments') or {}
            fp = a.get('path') or a.get('file_path') if isinstance(a, dict) else None
            if fp and (done.get(k) or {}).get('success') is not False:
                edits.add(fp)
    tok = None
    if shutdown is not None:
        tok = dict(input=usage['inputTokens'] - usage['cacheReadTokens'], cache_read=usage['cacheReadTokens'],
                   cache_write=usage['cacheWriteTokens'], output=usage['outputTokens'], reasoning=usage['reasoningTokens'],
                   raw_input_incl_cached=usage['inputTokens'])
        tok['total'] = tok['input'] + tok['cache_read'] + tok['cache_write'] + tok['output']
    f, l = ts_range(stamps)
    return dict(tokens=tok, tokens_source='session.shutdown modelMetrics' if shutdown else None,
                usage_records=dict(rec) or None, assistant_message_output_tokens=out_msgs,
                tool_calls=len(starts), tool_results=len(done), failed_calls=len(failed), failed_ids=failed,
                shell_nonzero_exit_marked_success=len(shell_nonzero), shell_nonzero_ids=shell_nonzero,
                tool_names=dict(collections.Counter(s.get('toolName') for s in starts.values())),
                files_edited=len(edits), files_edited_list=sorted(edits), first=f, last=l,
                has_shutdown=shutdown is not None)

def gemini(path):
    d = json.load(open(path))
    msgs = d.get('messages') or []
    tok = collections.Counter(); seen = set(); calls = {}; failed = []; edits = set(); stamps = []
    for m in msgs:
        stamps.append(m.get('timestamp'))
        if m.get('type') == 'gemini':
            if m.get('tokens') and m.get('id') not in seen:
                seen.add(m.get('id'))
                for k, v in m['tokens'].items():
                    tok[k] += v or 0
            for c in m.get('toolCalls') or []:
                calls[c.get('id')] = c
                stamps.append(c.get('timestamp'))
    for cid, c in calls.items():
        st = c.get('status')
        out = json.dumps(c.get('result') or '')
        m = re.search(r'Exit Code: (\d+)', out)
        if st not in ('success',) or (m and int(m.group(1)) != 0):
            failed.append(cid)
        if c.get('name') in ('write_file', 'replace', 'edit') and st == 'success':
            fp = (c.get('args') or {}).get('file_path')
            if fp:
                edits.add(fp)
    t = None
    if tok:
        t = dict(input=tok['input'] - tok['cached'], cache_read=tok['cached'], cache_write=0,
                 output=tok['output'], thoughts=tok['thoughts'], tool=tok['tool'], total=tok['total'],
                 raw_input_incl_cached=tok['input'])
    served = dict(input=t['input'], output=t['output'] + t['thoughts'], cache_read=t['cache_read'], cache_write=0) if t else None
    f, l = ts_range(stamps)
    return dict(tokens=t, tokens_served=served, tool_calls=len(calls), failed_calls=len(failed), failed_ids=failed,
                statuses=dict(collections.Counter(c.get('status') for c in calls.values())),
                files_edited=len(edits), files_edited_list=sorted(edits), first=f, last=l,
                start_time=d.get('startTime'), last_updated=d.get('lastUpdated'))

def opencode(path):
    d = json.load(open(path))
    tok = collections.Counter(); tokd = collections.Counter(); seen_ids = set(); ids = collections.Counter()
    calls = {}; failed = []; edits = set(); stamps = []
    for m in d.get('messages') or []:
        i = m['info']
        ids[i.get('id')] += 1
        tm = i.get('time') or {}
        stamps += [tm.get('created'), tm.get('completed')]
        if i.get('role') == 'assistant' and i.get('tokens'):
            t = i['tokens']
            if i.get('id') not in seen_ids:
                seen_ids.add(i.get('id'))
                tokd['input'] += t.get('input') or 0
                tokd['output'] += (t.get('output') or 0) + (t.get('reasoning') or 0)
                tokd['cache_read'] += (t.get('cache') or {}).get('read') or 0
                tokd['cache_write'] += (t.get('cache') or {}).get('write') or 0
            tok['input'] += t.get('input') or 0
            tok['output'] += t.get('output') or 0
            tok['reasoning'] += t.get('reasoning') or 0
            tok['cache_read'] += (t.get('cache') or {}).get('read') or 0
            tok['cache_write'] += (t.get('cache') or {}).get('write') or 0
        for p in m.get('parts') or []:
            if p.get('type') == 'tool':
                calls[p.get('callID') or p.get('id')] = p
                st = p.get('state') or {}
                stt = st.get('time') or {}
                stamps += [stt.get('start'), stt.get('end')]
                meta = st.get('metadata') or {}
                if st.get('status') == 'error' or (p.get('tool') == 'bash' and meta.get('exit') not in (None, 0)):
                    failed.append(p.get('callID'))
                if p.get('tool') in ('edit', 'write', 'patch', 'multiedit', 'apply_patch') and st.get('status') == 'completed':
                    fp = (st.get('input') or {}).get('filePath')
                    if fp:
                        edits.add(fp)
                    for f in (meta.get('files') or []):
                        if isinstance(f, dict) and f.get('filePath'): edits.add(f['filePath'])
    stamps.append((d['info'].get('time') or {}).get('created'))
    stamps = [s for s in stamps if s]
    tool_parts = [p for m in d.get('messages') or [] for p in m.get('parts') or [] if p.get('type') == 'tool']
    redacted_ids = sum(1 for p in tool_parts if p.get('callID') == 'REDACTED') + sum(1 for m in d.get('messages') or [] if m['info'].get('id') == 'REDACTED')
    t = dict(tok); t['total'] = tok['input'] + tok['output'] + tok['reasoning'] + tok['cache_read'] + tok['cache_write']
    import datetime
    iso = lambda ms: datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat().replace('+00:00', 'Z') if ms else None
    t2 = dict(input=tok['input'], output=tok['output'] + tok['reasoning'], cache_read=tok['cache_read'], cache_write=tok['cache_write'])
    return dict(tokens=t, tokens_served=t2, tokens_served_unique_ids=dict(tokd),
                duplicate_message_ids={k: v for k, v in ids.items() if v > 1},
                tool_parts=len(tool_parts), redacted_ids=redacted_ids,
                corpus_damaged=bool(redacted_ids),
                tool_calls=len(calls), failed_calls=len(failed), failed_ids=failed,
                bash_nonzero=sum(1 for p in calls.values() if p.get('tool') == 'bash' and ((p.get('state') or {}).get('metadata') or {}).get('exit') not in (None, 0)),
                files_edited=len(edits), files_edited_list=sorted(edits),
                first=iso(min(stamps)) if stamps else None, last=iso(max(stamps)) if stamps else None,
                session=d['info']['id'], parent=d['info'].get('parentID'))

def droid(path):
    rows = jsonl(path)
    calls = {}; err = set(); res = set(); edits = set(); stamps = []
    for o in rows:
        stamps.append(o.get('timestamp'))
        m = o.get('message') or {}
        for b in m.get('content') or [] if isinstance(m.get('content'), list) else []:
            if b.get('type') == 'tool_use':
                calls[b['id']] = b
            if b.get('type') == 'tool_result':
                res.add(b.get('tool_use_id'))
                if b.get('is_error'):
                    err.add(b.get('tool_use_id'))
    for k, b in calls.items():
        if b.get('name') in ('Create', 'Edit', 'MultiEdit', 'ApplyPatch') and k in res and k not in err:
            fp = (b.get('input') or {}).get('file_path')
            if fp: edits.add(fp)
    f, l = ts_range(stamps)
    return dict(tokens=None, tokens_note='Droid transcripts carry no token usage (it lives in <id>.settings.json, not stored by Entire)',
                tool_calls=len(calls), failed_calls=len(err & set(calls)), files_edited=len(edits),
                files_edited_list=sorted(edits), first=f, last=l)

def cline_vscode(taskdir):
    ui = json.load(open(os.path.join(taskdir, 'ui_messages.json')))
    tok = collections.Counter(); calls = 0; failed = 0; edits = set(); stamps = []
    for m in ui:
        stamps.append(m.get('ts'))
        if m.get('say') == 'api_req_started':
            try:
                j = json.loads(m.get('text') or '{}')
            except Exception:
                j = {}
            tok['input'] += j.get('tokensIn') or 0; tok['output'] += j.get('tokensOut') or 0
            tok['cache_read'] += j.get('cacheReads') or 0; tok['cache_write'] += j.get('cacheWrites') or 0
        if m.get('type') == 'ask' and m.get('ask') in ('tool', 'command', 'use_mcp_server'):
            calls += 1
        if m.get('type') == 'say' and m.get('say') in ('tool', 'command'):
            calls += 1
        if m.get('say') == 'error' or m.get('say') == 'diff_error':
            failed += 1
        if m.get('ask') == 'tool' or m.get('say') == 'tool':
            try:
                j = json.loads(m.get('text') or '{}')
                if j.get('tool') in ('editedExistingFile', 'newFileCreated'):
                    edits.add(j.get('path'))
            except Exception:
                pass
    import datetime
    stamps = [s for s in stamps if s]
    iso = lambda ms: datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat().replace('+00:00', 'Z')
    t = dict(tok); t['total'] = sum(tok.values())
    return dict(tokens=t, tool_calls=calls, failed_calls=failed, files_edited=len(edits), files_edited_list=sorted(edits),
                first=iso(min(stamps)), last=iso(max(stamps)))

READERS = {'claude-code': claude, 'codex': codex, 'copilot': copilot, 'gemini': gemini,
           'opencode': opencode, 'droid': droid, 'cline': cline_vscode}

def claude_times(path):
    """The first and last times of a Claude Code session as a session's: the earliest
    of its conversation lines (those naming the cwd, not meta lines: a queued prompt's
    bookkeeping line may come a moment before, and the lines' times are not in order),
    and the latest of its messages (system lines may follow)."""
    stamps, msgs = [], []
    for o in jsonl(path):
        if o.get('cwd') and o.get('timestamp') and not o.get('isMeta'):
            stamps.append(o['timestamp'])
            if o.get('type') in ('user', 'assistant'):
                msgs.append(o['timestamp'])
    key = lambda t: t.replace('Z', '').ljust(23, '0')
    return (min(stamps, key=key) if stamps else None, max(msgs, key=key) if msgs else None)


def expect(agent, version, f, transcript):
    """What an import must record, from the file's facts `f`: (expect, notes). Where
    tacho counts by a rule of its own (documented in the README), the note says so."""
    notes = []
    t = f.get('tokens')
    if agent == 'copilot' and not t:
        t = {'input': 0, 'output': f.get('assistant_message_output_tokens', 0), 'cache_read': 0, 'cache_write': 0}
        notes.append("no session.shutdown (killed or cut): output is the sum of its messages' outputTokens; input is unknown and recorded 0; ccusage reads no session")
    if agent == 'gemini':
        t = f['tokens_served']
        notes.append('output holds the thoughts (what the model served); ccusage counts output without them')
    if agent == 'opencode':
        t = f['tokens_served_unique_ids']
        notes.append('output holds the reasoning (what the model served); ccusage 20.0.24 counts output without it')
        if f.get('corpus_damaged'):
            notes.append('Entire replaced ids with "REDACTED": messages sharing an id are one to tacho and to ccusage')
    if agent == 'droid':
        t = {'input': 0, 'output': 0, 'cache_read': 0, 'cache_write': 0}
        notes.append(f.get('tokens_note', ''))
    if agent == 'codex' and version == '0.141.0':
        notes.append("a request of an interrupted turn is only in the running total (token_count total_token_usage): tacho counts it, ccusage 20.0.24 sums each request's last_token_usage and misses it")
    if agent == 'cline':
        notes.append("a VS Code extension task folder, read through its ui_messages.json; ccusage has no Cline reader")
    exp = {}
    if t is not None:
        for k in ('input', 'output', 'cache_read', 'cache_write'):
            exp[k] = t.get(k, 0)
    failures = f.get('failed_calls', 0)
    if agent == 'copilot':
        failures += f.get('shell_nonzero_exit_marked_success', 0)
    first = f.get('first')
    if agent == 'claude-code':
        first, last = claude_times(transcript)
    exp.update(tool_calls=f.get('tool_calls', 0), tool_failures=failures,
               files_edited=f.get('files_edited', 0), first=first)
    if agent == 'claude-code':
        exp['last'] = last
    else:
        # Its last line may be bookkeeping after the last event (Codex's task_complete,
        # Copilot's session.shutdown): the session ends no later.
        exp['last_at_most'] = f.get('last')
    if agent == 'copilot' and f.get('has_shutdown'):
        # It shut down: the session ended.
        exp['ended'] = True
    if agent == 'opencode' and 'REDACTED' in (f.get('failed_ids') or []):
        exp['tool_failures'] = None
        notes.append("a failed call's id was redacted: calls sharing the id REDACTED are one, and which of their results is kept cannot be told")
    return exp, [n for n in notes if n]


def ccusage_totals(out):
    """ccusage's `session --json` totals: input, output, cache read, cache write."""
    rows = out.get('sessions') or out.get('session') or []
    if not rows:
        return None
    keys = [('input', 'inputTokens'), ('output', 'outputTokens'),
            ('cache_read', 'cacheReadTokens'), ('cache_write', 'cacheCreationTokens')]
    return {k: sum(r.get(c) or 0 for r in rows) for k, c in keys}


def entry(agent, version, repo, commit, path, licence, target, transcript, ccusage=None):
    f = READERS[agent](transcript)
    exp, notes = expect(agent, version, f, transcript)
    return dict(agent=agent, version=version,
                source=dict(repo=repo, commit=commit, path=path, licence=licence),
                committed=licence in ('MIT', 'Apache-2.0'), path=target, expect=exp,
                ccusage=ccusage_totals(ccusage) if ccusage else None, notes=notes)


if __name__ == '__main__':
    if sys.argv[1] == '--entry':
        a = sys.argv[2:]
        cc = json.load(open(a[8])) if len(a) > 8 else None
        print(json.dumps(entry(*a[:8], ccusage=cc), sort_keys=True))
    else:
        print(json.dumps(READERS[sys.argv[1]](sys.argv[2]), indent=1))
