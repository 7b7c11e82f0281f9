#!/usr/bin/env python3
"""An independent reader of tacho's log, written from SPEC.md alone.

    python3 tests/spec-reader/read.py PATH [--spec SPEC.md]

PATH is a data directory ($TACHO_HOME, holding log/), a log directory (holding
streams/ or packs/), or an exported replay package (SPEC §9). The reader checks what SPEC §1-§3
define — segment headers and their CRCs, stream ids, segment order, frame CRCs and
lengths, sequence numbers, every chain step, commit and seal fields, free space, packs
(§1.1: header, table of contents, sealed segments that tile the pack), the package
digest — decodes every committed event's payload by the layout of SPEC §5.3
(read from SPEC.md itself: the reader has no table of its own), and prints one JSON
object per event in the form of SPEC §5.3 ("JSON form", with `seq`), sessions in id
order. Findings go to stderr; it exits 1 on any error (a torn, uncommitted tail at the
end of a stream's last segment is only a warning, as in SPEC §4.4).

Standard library only, plus `blake3` from PyPI.
"""

import json
import os
import re
import struct
import sys
import zlib
from datetime import datetime, timezone

try:
    import blake3
except ImportError:
    sys.exit("this reader needs the blake3 package: pip install blake3")

ERRORS = []
WARNINGS = []


def error(where, msg):
    ERRORS.append(f"{where}: {msg}")


def warn(where, msg):
    WARNINGS.append(f"{where}: {msg}")


class Bad(Exception):
    """A payload that does not decode (an error at its frame)."""


# ---------------------------------------------------------------------------------
# SPEC §5.3, read from SPEC.md.

def load_layouts(spec_path):
    text = open(spec_path, encoding="utf-8").read()
    start = text.index("### 5.3 ")
    end = text.index("\n## ", start)
    sec = text[start:end]
    kinds = {}
    structs = {}
    for m in re.finditer(r"^\*\*(?:(\d+) `([^`]+)`|`(\w+)`)\*\* \((v(\d+)|in vectors)\), (\d+) bytes, align (\d+): (.*)$", sec, re.M):
        fields = re.findall(r"`(\w+)` ([\w<>]+) @(\d+)", m.group(8))
        layout = {"size": int(m.group(6)), "align": int(m.group(7)),
                  "fields": [(f, t, int(o)) for f, t, o in fields]}
        if m.group(1):
            # Every version a kind ever had is listed (§6): keyed by id, then version.
            kinds.setdefault(int(m.group(1)), {})[int(m.group(5))] = dict(layout, name=m.group(2))
        else:
            structs[m.group(3)] = layout
    enums = {}
    for m in re.finditer(r"^- `(\w+)`: (.*)$", sec, re.M):
        enums[m.group(1)] = [v for _, v in re.findall(r"(\d+) `(\w+)`", m.group(2))]
    if not kinds or not enums:
        sys.exit(f"{spec_path}: no layout table found in §5.3")
    return kinds, structs, enums


# ---------------------------------------------------------------------------------
# Payload decoding.

class Payload:
    def __init__(self, data, structs, enums):
        self.b = data
        self.structs = structs
        self.enums = enums

    def need(self, pos, n):
        if pos < 0 or pos + n > len(self.b):
            raise Bad(f"range {pos}..{pos + n} outside the payload of {len(self.b)} bytes")

    def u8(self, pos):
        self.need(pos, 1)
        return self.b[pos]

    def u32(self, pos):
        self.need(pos, 4)
        return struct.unpack_from("<I", self.b, pos)[0]

    def i32(self, pos):
        self.need(pos, 4)
        return struct.unpack_from("<i", self.b, pos)[0]

    def string(self, pos):
        self.need(pos, 8)
        first = self.b[pos]
        if first & 0xC0 != 0x80:
            raw = bytes(self.b[pos:pos + 8])
            cut = raw.find(b"\xff")
            raw = raw if cut < 0 else raw[:cut]
        else:
            l = self.u32(pos)
            n = (l & 0x3F) | ((l & 0xFFFFFF00) >> 2)
            at = pos + self.i32(pos + 4)
            self.need(at, n)
            raw = bytes(self.b[at:at + n])
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise Bad(f"string at {pos} is not UTF-8: {e}")

    def value(self, t, pos):
        if t == "String":
            return self.string(pos)
        if t == "u64":
            self.need(pos, 8)
            return struct.unpack_from("<Q", self.b, pos)[0]
        if t == "i64":
            self.need(pos, 8)
            return struct.unpack_from("<q", self.b, pos)[0]
        if t == "u32":
            return self.u32(pos)
        if t == "bool":
            v = self.u8(pos)
            if v > 1:
                raise Bad(f"bool at {pos} is {v}")
            return v == 1
        if t in self.enums:
            v = self.u8(pos)
            names = self.enums[t]
            if v >= len(names):
                raise Bad(f"{t} at {pos} has no variant {v}")
            return names[v]
        if t.startswith("Option<"):
            inner = t[7:-1]
            tag = self.u8(pos)
            if tag == 0:
                return None
            if tag != 1:
                raise Bad(f"option tag at {pos} is {tag}")
            return self.value(inner, pos + align_up(1, self.align(inner)))
        if t.startswith("Vec<"):
            inner = t[4:-1]
            at = pos + self.i32(pos)
            n = self.u32(pos + 4)
            size = self.size(inner)
            self.need(at, n * size)
            return [self.value(inner, at + i * size) for i in range(n)]
        if t in self.structs:
            return self.struct(self.structs[t], pos)
        raise Bad(f"type {t} is not in SPEC §5.3")

    def size(self, t):
        return {"String": 8, "u64": 8, "i64": 8, "u32": 4}.get(t) or self.structs[t]["size"]

    def align(self, t):
        return {"String": 4, "u64": 8, "i64": 8, "u32": 4, "bool": 1}.get(t) or (
            1 if t in self.enums else self.structs[t]["align"])

    def struct(self, layout, pos):
        out = {}
        for name, t, off in layout["fields"]:
            v = self.value(t, pos + off)
            # The JSON form: absent options and empty vectors are left out.
            if v is None or (t.startswith("Vec<") and not v):
                continue
            if t == "Option<String>" and name == "input":
                v = json.loads(v)
            out[name] = v
        return out


def align_up(n, a):
    return (n + a - 1) // a * a


def decode(kinds, structs, enums, kind, version, payload):
    versions = kinds.get(kind)
    if versions is None:
        return None, None
    k = versions.get(version)
    if k is None:
        name = next(iter(versions.values()))["name"]
        raise Bad(f"kind {kind} ({name}) has no version {version} in SPEC §5.3")
    if len(payload) < k["size"]:
        raise Bad(f"payload of {len(payload)} bytes is shorter than {k['name']} ({k['size']})")
    p = Payload(payload, structs, enums)
    return k["name"], p.struct(k, len(payload) - k["size"])


# ---------------------------------------------------------------------------------
# Segments (SPEC §1-§3).

def rfc3339(ns):
    secs, frac = divmod(ns, 1_000_000_000)
    t = datetime.fromtimestamp(secs, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        t += "." + f"{frac:09d}".rstrip("0")
    return t + "Z"


def stream_id(session):
    return blake3.blake3(session.encode(), derive_key_context="tacho stream id v1").digest()[:16]


def session_of_dir(name):
    out = []
    i = 0
    while i < len(name):
        if name[i] == "^" and i + 1 < len(name):
            out.append(name[i + 1].upper())
            i += 2
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def frame_crc(buf, off, flen):
    return zlib.crc32(buf[off + 8:off + flen], zlib.crc32(buf[off:off + 4])) & 0xFFFFFFFF


def commit_after(buf, start):
    """Whether a valid commit or seal frame starts at any 8-aligned offset from start."""
    for off in range(align_up(start, 8), len(buf) - 87, 8):
        flen, fcrc, ftype = struct.unpack_from("<IIB", buf, off)
        if flen == 88 and ftype in (2, 3) and frame_crc(buf, off, 88) == fcrc:
            return True
    return False


def read_stream(session, segments, tables, packaged=False):
    """segments: [(first_seq, name, bytes)] in order. Yields event dicts."""
    kinds, structs, enums = tables
    sid = stream_id(session)
    chain = bytes(32)
    next_seq = 0
    events = []
    for index, (name_seq, where, buf) in enumerate(segments):
        last = index == len(segments) - 1
        if len(buf) < 128:
            error(where, "shorter than a segment header")
            return events
        (magic, ver, hlen, flags, sid_b, seg_index, first_seq, prev_chain, _first_time,
         reserved, crc) = struct.unpack_from("<8sHHI16sQQ32sq36sI", buf, 0)
        if magic != b"TACHOSEG" or ver != 1 or hlen != 128 or flags != 0:
            error(where, "not a version-1 segment header")
            return events
        if crc != zlib.crc32(buf[0:124]) & 0xFFFFFFFF:
            error(f"{where}@0", "header CRC mismatch")
        if sid_b != sid:
            error(where, f"stream id is not the one of session {session}")
        if seg_index != index:
            error(where, f"segment index {seg_index}, expected {index}")
        if first_seq != next_seq or (name_seq is not None and name_seq != first_seq):
            error(where, f"first_seq {first_seq}, expected {next_seq}")
        if prev_chain != chain:
            error(where, "prev_chain is not the previous segment's final chain")
        if any(reserved):
            error(where, "reserved header bytes are not zero")
        off = 128
        span_start = 0
        batch = []
        batch_first = None
        sealed = False
        while off < len(buf):
            if len(buf) - off < 32 or struct.unpack_from("<I", buf, off)[0] == 0:
                # Free space: zeros to the end of an open segment.
                if any(buf[off:]):
                    if last and not packaged:
                        warn(f"{where}@{off}", f"{len(buf) - off} bytes after the last commit are not a complete batch (a torn tail)")
                    else:
                        error(f"{where}@{off}", "bytes after the data are not zeros")
                elif packaged:
                    error(f"{where}@{off}", "zeros after the committed data in a package")
                break
            flen, fcrc, ftype, fflags, kind, kver, fres, seq, t = struct.unpack_from("<IIBBHHHQq", buf, off)
            if flen < 32 or off + flen > len(buf) or frame_crc(buf, off, flen) != fcrc:
                # SPEC §4.4: damage with a valid commit or seal frame anywhere after it
                # is corruption; without one, in the last segment, a torn write.
                if last and not packaged and not commit_after(buf, off + 8):
                    warn(f"{where}@{off}", "a torn tail: frames without a commit after them")
                else:
                    error(f"{where}@{off}", "frame CRC or length mismatch")
                break
            if fflags or fres:
                error(f"{where}@{off}", "frame flags or reserved bytes are not zero")
            payload = bytes(buf[off + 32:off + flen])
            nxt = align_up(off + flen, 8)
            if any(buf[off + flen:nxt]):
                error(f"{where}@{off}", "frame padding is not zero")
            if ftype == 1:
                if seq != next_seq + len(batch):
                    error(f"{where}@{off}", f"event seq {seq}, expected {next_seq + len(batch)}")
                if batch_first is None:
                    batch_first = seq
                try:
                    name, fields = decode(kinds, structs, enums, kind, kver, payload)
                    if name is None:
                        # A kind from a newer writer: checked by CRC and chain, kept
                        # unknown (SPEC §4.6).
                        warn(f"{where}@{off}", f"event {seq} has kind {kind}, unknown here")
                        batch.append(None)
                    else:
                        e = {"type": name, "session": session, "ts": rfc3339(t)}
                        e.update(fields)
                        e["seq"] = seq
                        batch.append(e)
                except Bad as b:
                    error(f"{where}@{off}", f"payload: {b}")
                    batch.append(None)
            elif ftype == 2:
                if flen != 88 or kind or kver or t:
                    error(f"{where}@{off}", "malformed commit frame")
                c_chain, c_first, c_count, c_span = struct.unpack_from("<32sQQQ", payload, 0)
                step = blake3.blake3(bytes(buf[span_start:off]), key=chain).digest()
                if not batch:
                    error(f"{where}@{off}", "a commit without events")
                if c_chain != step:
                    error(f"{where}@{off}", "chain step does not match (the batch was changed)")
                if c_first != batch_first or c_count != len(batch) or c_span != off - span_start:
                    error(f"{where}@{off}", "commit fields do not match the batch")
                if seq != next_seq + len(batch) - 1:
                    error(f"{where}@{off}", "commit seq is not the batch's last event")
                chain = c_chain
                events.extend(e for e in batch if e is not None)
                next_seq += len(batch)
                batch = []
                batch_first = None
                span_start = nxt
            elif ftype == 3:
                s_chain, s_first, s_count, s_len = struct.unpack_from("<32sQQQ", payload, 0)
                if batch:
                    error(f"{where}@{off}", "a seal after events without a commit")
                if (s_chain != chain or s_first != first_seq or s_count != next_seq - first_seq
                        or s_len != off or seq != (next_seq - 1) % 2**64):
                    error(f"{where}@{off}", "seal fields do not match the segment")
                if nxt != len(buf):
                    error(f"{where}@{off}", "data after the seal frame")
                sealed = True
                break
            else:
                error(f"{where}@{off}", f"unknown frame type {ftype}")
                break
            off = nxt
        if batch:
            if last and not packaged:
                warn(where, f"{len(batch)} event(s) without their commit at the end (uncommitted)")
            else:
                error(where, f"{len(batch)} event(s) without their commit")
        if not sealed and not last:
            error(where, "not sealed, but a later segment exists")
    return events


def read_packs(log_dir):
    """SPEC §1.1: {session: {segment_index: (first_seq, where, bytes)}} of every pack."""
    packs_dir = os.path.join(log_dir, "packs")
    found = {}
    if not os.path.isdir(packs_dir):
        return found
    for n in sorted(os.listdir(packs_dir)):
        if not n.endswith(".tpack") or n.startswith("."):
            continue
        path = os.path.join(packs_dir, n)
        data = open(path, "rb").read()
        if len(data) < 64:
            error(path, "shorter than a pack header")
            continue
        (magic, ver, hlen, flags, count, toc, names_len, toc_crc, reserved,
         crc) = struct.unpack_from("<8sHHIQQQI16sI", data, 0)
        if magic != b"TACHOPAK" or ver != 1 or hlen != 64 or flags != 0 or any(reserved):
            error(path, "not a version-1 pack header")
            continue
        if crc != zlib.crc32(data[0:60]) & 0xFFFFFFFF:
            error(f"{path}@0", "pack header CRC mismatch")
            continue
        if toc % 8 or toc < 64 or toc + 56 * count + names_len != len(data):
            error(path, "the table of contents does not end the pack")
            continue
        if toc_crc != zlib.crc32(data[toc:]) & 0xFFFFFFFF:
            error(f"{path}@{toc}", "table of contents CRC mismatch")
            continue
        names = data[toc + 56 * count:]
        at = 64
        keys = []
        for i in range(count):
            sid, index, first, off, length, name_at, name_len, res = struct.unpack_from(
                "<16sQQQQIHH", data, toc + 56 * i)
            session = names[name_at:name_at + name_len].decode("ascii", "replace")
            where = f"{path}@{off}"
            keys.append((sid, index))
            if res != 0 or sid != stream_id(session):
                error(where, f"entry {i} does not name its stream")
            segment = data[off:off + length]
            if len(segment) < 128 + 88 or segment[-88 + 8] != 3:
                error(where, "a packed segment that is not sealed")
            found.setdefault(session, {}).setdefault(index, (first, where, segment))
        if keys != sorted(keys) or len(set(keys)) != len(keys):
            error(path, "the table of contents is not sorted by stream and segment")
        spans = sorted(struct.unpack_from("<QQ", data, toc + 56 * i + 32) for i in range(count))
        for off, length in spans:
            if off != at:
                error(f"{path}@{off}", f"a segment does not start where the previous ends ({at})")
            at = off + length
        if at != toc:
            error(path, "the segments do not end where the table of contents begins")
    return found


def read_store(log_dir, tables):
    streams = os.path.join(log_dir, "streams")
    packed = read_packs(log_dir)
    dirs = {}
    if os.path.isdir(streams):
        dirs = {session_of_dir(d): d for d in os.listdir(streams)}
    out = []
    for session in sorted(set(dirs) | set(packed)):
        segs = [packed[session][i] for i in sorted(packed.get(session, {}))]
        if session in dirs:
            base = os.path.join(streams, dirs[session])
            names = sorted(n for n in os.listdir(base) if n.endswith(".tseg"))
            if names and int(names[0][:-5]) == 0:
                segs = []
            for n in names:
                with open(os.path.join(base, n), "rb") as f:
                    segs.append((int(n[:-5]), os.path.join(base, n), f.read()))
        if not segs:
            warn(session, "a stream without segments")
            continue
        out.extend(read_stream(session, segs, tables))
    return out


def read_package(path, tables):
    data = open(path, "rb").read()
    if len(data) < 18 + 32 or data[:8] != b"TACHOPKG":
        error(path, "not a replay package")
        return []
    version, reserved, count, idlen = struct.unpack_from("<HHIH", data, 8)
    if version != 1 or reserved != 0:
        error(path, "not a version-1 package")
        return []
    body, digest = data[:-32], data[-32:]
    if blake3.blake3(body, derive_key_context="tacho replay package v1").digest() != digest:
        error(path, "the package digest does not match (cut short or changed)")
    session = data[18:18 + idlen].decode("ascii")
    pos = 18 + idlen
    segs = []
    for i in range(count):
        first, n = struct.unpack_from("<QQ", data, pos)
        pos += 16
        segs.append((first, f"{path}[segment {i}]", data[pos:pos + n]))
        pos += n
    if pos != len(body):
        error(path, "bytes after the last segment")
    if count == 0:
        error(path, "a package without segments")
    return read_stream(session, segs, tables, packaged=True)


def main():
    args = sys.argv[1:]
    spec = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "SPEC.md")
    if "--spec" in args:
        i = args.index("--spec")
        spec = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    tables = load_layouts(spec)
    path = args[0]
    if os.path.isfile(path):
        events = read_package(path, tables)
    elif any(os.path.isdir(os.path.join(path, "log", d)) for d in ("streams", "packs")):
        events = read_store(os.path.join(path, "log"), tables)
    elif any(os.path.isdir(os.path.join(path, d)) for d in ("streams", "packs")):
        events = read_store(path, tables)
    else:
        sys.exit(f"{path}: not a data directory, log directory or package")
    out = sys.stdout
    for e in events:
        out.write(json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n")
    for w in WARNINGS:
        print(f"warning: {w}", file=sys.stderr)
    for e in ERRORS:
        print(f"error: {e}", file=sys.stderr)
    sys.exit(1 if ERRORS else 0)


main()
