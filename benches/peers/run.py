#!/usr/bin/env python3
"""Head-to-head of tacho against three peer tools, through each tool's own entry points.

Peers, pinned, installed from PyPI into a virtual environment of this script's own
(`benches/peers/.venv`, or `--venv DIR`):

- stepback 0.2.0    (`stepback run -- AGENT` watches the work tree, `stepback rewind ID`)
- rewind-ai 1.1.0   (`rewind snap` before each step, `rewind jump INDEX`)
- agent-strace 0.103.0 (`agent-strace hook pre-tool|post-tool` as Claude Code hooks;
  it records calls and has no command that restores files)

tacho is driven as Claude Code drives it once `tacho hooks install claude-code` ran:
one `tacho hook claude-code` process per hook event, the payload on stdin, and
`tacho session rollback SESSION --step K --yes` to go back.

Sections (`--only a,b`): exactness, granularity, cost, storage, tampering.
Every tool gets a temporary HOME and store directory; nothing is written to the real
home. Writes a Markdown report and a JSON file (`--out PATH.json`, Markdown beside it).

Python 3.11, standard library only (the peers run from their virtual environment).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

PEERS = {"stepback": "0.2.0", "rewind-ai": "1.1.0", "agent-strace": "0.103.0"}
TOOLS = ["tacho", "stepback", "rewind-ai", "agent-strace"]
SECTIONS = ["exactness", "granularity", "cost", "storage", "tampering"]
HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
# Each tool's own files inside the workspace, and Git's: not part of the compared tree.
TOOL_DIRS = {".git", ".stepback", ".agent-traces"}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------- setup

def ensure_venv(venv: Path) -> Path:
    """Creates the virtual environment and installs the pinned peers (once)."""
    py = venv / "bin" / "python"
    if not py.exists():
        log(f"creating {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    want = [f"{n}=={v}" for n, v in PEERS.items()]
    have = subprocess.run([str(py), "-m", "pip", "list", "--format=json"],
                          capture_output=True, text=True, check=True).stdout
    installed = {p["name"].lower(): p["version"] for p in json.loads(have)}
    if any(installed.get(n) != v for n, v in PEERS.items()):
        log("installing " + " ".join(want))
        subprocess.run([str(py), "-m", "pip", "install", "-q", *want], check=True)
    return venv / "bin"


def find_tacho(arg: str | None) -> Path:
    if arg:
        return Path(arg).resolve()
    local = REPO_ROOT / "target" / "release" / "tacho"
    if local.exists():
        return local
    found = shutil.which("tacho")
    if found:
        return Path(found)
    sys.exit("no tacho binary: pass --tacho PATH (or build target/release/tacho)")


@dataclass
class Ctx:
    tacho: Path
    vbin: Path
    quick: bool
    scratch: Path
    keep: bool
    results: dict = field(default_factory=dict)
    counter: int = 0

    def tmp(self, name: str) -> Path:
        self.counter += 1
        d = self.scratch / f"{self.counter:03d}-{name}"
        d.mkdir(parents=True)
        return d


def tool_env(home: Path) -> dict:
    """An environment of its own for one tool run: HOME, stores and Git config inside
    `home`, no telemetry."""
    # TACHO_WATCH_FILES, the hooks' watcher threshold, is the one setting let through
    # (to measure another threshold).
    env = {k: v for k, v in os.environ.items()
           if k == "TACHO_WATCH_FILES"
           or not k.startswith(("TACHO_", "GIT_", "AGENT_TRACE", "AGENT_STRACE", "CLAUDE"))}
    home.mkdir(parents=True, exist_ok=True)
    gitconfig = home / ".gitconfig"
    if not gitconfig.exists():
        gitconfig.write_text("[user]\n\tname = bench\n\temail = bench@localhost\n"
                             "[init]\n\tdefaultBranch = main\n[gc]\n\tauto = 0\n")
    env.update({
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local/state"),
        "GIT_CONFIG_GLOBAL": str(gitconfig),
        "GIT_CONFIG_NOSYSTEM": "1",
        "TACHO_HOME": str(home / "tacho"),
        "AGENT_TRACE_DIR": str(home / "agent-traces"),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "DO_NOT_TRACK": "1",
        "LC_ALL": "C.UTF-8",
    })
    return env


def run(cmd, cwd=None, env=None, input=None, timeout=600):
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, input=input,
                       capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def git(ws: Path, env: dict, *args: str) -> str:
    code, out, err = run(["git", *args], cwd=ws, env=env)
    if code != 0:
        raise RuntimeError(f"git {' '.join(args)}: {err}")
    return out


def init_repo(ws: Path, env: dict, commit: bool = True) -> None:
    git(ws, env, "init", "-q")
    if commit:
        git(ws, env, "add", "-A")
        git(ws, env, "commit", "-q", "-m", "initial", "--no-verify")


# ------------------------------------------------------------------ the compared tree

def tree_state(ws: Path) -> dict:
    """Every entry under `ws` (but Git's and the tools' own directories): its kind,
    and the content hash and permission bits of a file, the target of a symbolic link."""
    out = {}

    def walk(d: Path, rel: str):
        with os.scandir(d) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            r = f"{rel}{e.name}"
            if rel == "" and e.name in TOOL_DIRS:
                continue
            if e.is_symlink():
                out[r] = ("link", os.readlink(e.path))
            elif e.is_dir():
                out[r] = ("dir",)
                walk(Path(e.path), r + "/")
            elif e.is_file():
                h = hashlib.sha256()
                with open(e.path, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                mode = os.stat(e.path).st_mode
                out[r] = ("file", h.hexdigest()[:16], f"{mode & 0o777:o}")
            else:
                out[r] = ("other",)
    walk(ws, "")
    return out


def tree_diff(want: dict, got: dict, limit: int = 4) -> list[str]:
    diffs = []
    for p in sorted(set(want) | set(got)):
        a, b = want.get(p), got.get(p)
        if a == b:
            continue
        name = repr(p) if "\n" in p else p
        if b is None:
            diffs.append(f"{name}: missing ({a[0]})")
        elif a is None:
            diffs.append(f"{name}: extra {b[0]}")
        elif a[0] != b[0]:
            diffs.append(f"{name}: {a[0]} became {b[0]}")
        elif a[0] == "file" and a[1] != b[1]:
            diffs.append(f"{name}: content differs")
        elif a[0] == "file":
            diffs.append(f"{name}: mode {a[2]} -> {b[2]}")
        elif a[0] == "link":
            diffs.append(f"{name}: link target {a[1]} -> {b[1]}")
        else:
            diffs.append(f"{name}: differs")
    if len(diffs) > limit:
        diffs = diffs[:limit] + [f"... {len(diffs) - limit} more"]
    return diffs


# -------------------------------------------------------------------------- drivers
#
# A driver records one session of agent steps in a workspace through its tool's own
# entry points: start(), step(k, change) (checkpoint around one agent step), finish(),
# restore_before(k) (the tool's restore command back to the state before step k).

class Unsupported(Exception):
    pass


class Tacho:
    name = "tacho"

    def __init__(self, ctx: Ctx, ws: Path, home: Path, hook_args=(), session="bench-1"):
        self.ctx, self.ws, self.home = ctx, ws, home
        self.env = tool_env(home)
        self.hook_args = list(hook_args)
        self.session = session
        self.problems: list[str] = []

    def hook(self, event: str, extra: dict | None = None) -> None:
        payload = {"session_id": self.session, "transcript_path": "/nonexistent",
                   "cwd": str(self.ws), "hook_event_name": event}
        payload.update(extra or {})
        code, _, err = run([self.ctx.tacho, "hook", "claude-code", *self.hook_args],
                           cwd=self.ws, env=self.env, input=json.dumps(payload).encode())
        if code != 0 or err.strip():
            self.problems.append(f"{event}: exit {code} {err.strip()[:200]}")

    def start(self):
        self.hook("SessionStart", {"source": "startup"})

    def pre(self, k: int, tool="Bash", tool_input=None):
        self.hook("PreToolUse", {"tool_name": tool, "tool_use_id": f"call-{k}",
                                 "tool_input": tool_input or {"command": f"step {k}"}})

    def post(self, k: int, tool="Bash", tool_input=None, response=None):
        self.hook("PostToolUse", {"tool_name": tool, "tool_use_id": f"call-{k}",
                                  "tool_input": tool_input or {"command": f"step {k}"},
                                  "tool_response": response or {"stdout": "", "stderr": "",
                                                                "interrupted": False}})

    def step(self, k: int, change):
        self.pre(k)
        change()
        self.post(k)

    def finish(self):
        self.hook("Stop", {"stop_hook_active": False})
        self.hook("SessionEnd", {"reason": "other"})

    def restore_before(self, k: int):
        return run([self.ctx.tacho, "session", "rollback", self.session, "--step", str(k),
                    "--yes"], cwd=self.ws, env=self.env)

    def hooks_log(self) -> str:
        p = self.home / "tacho" / "logs" / "hooks.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def cleanup(self):
        run([self.ctx.tacho, "watch", "stop", self.ws], env=self.env)


class Stepback:
    """`stepback run -- AGENT`: its watcher checkpoints the tree once edits settle
    (0.5 s quiet). The agent here is a process that waits on stdin while this script
    makes the step's changes; after each change the script waits until stepback's
    checkpoint landed (its best case: every step settles)."""
    name = "stepback"

    def __init__(self, ctx: Ctx, ws: Path, home: Path, settle=3.0):
        self.ctx, self.ws, self.home = ctx, ws, home
        self.env = tool_env(home)
        self.settle = settle
        self.proc = None
        self.before: dict[int, int] = {}
        self.problems: list[str] = []
        self.bin = ctx.vbin / "stepback"

    def state(self) -> dict:
        for p in (self.ws / ".git" / "stepback" / "state.json",
                  self.ws / ".stepback" / "shadow.git" / "stepback" / "state.json"):
            if p.exists():
                try:
                    return json.loads(p.read_text())
                except ValueError:
                    return {}
        return {}

    def count(self) -> int:
        return len(self.state().get("checkpoints", []))

    def latest_id(self) -> int | None:
        cps = self.state().get("checkpoints", [])
        return cps[-1]["id"] if cps else None

    def wait_checkpoint(self, before: int, timeout: float):
        until = time.time() + timeout
        while time.time() < until:
            if self.count() > before:
                time.sleep(0.05)
                return True
            time.sleep(0.05)
        return False

    def start(self):
        self.out = open(self.home / "stepback-run.log", "wb")
        self.proc = subprocess.Popen(
            [str(self.bin), "run", "--", sys.executable, "-c", "import sys; sys.stdin.read()"],
            cwd=self.ws, env=self.env, stdin=subprocess.PIPE, stdout=self.out,
            stderr=subprocess.STDOUT)
        self.wait_checkpoint(0, 30)
        time.sleep(0.3)  # the watcher is scheduled right after the first checkpoint

    def step(self, k: int, change, settle: float | None = None):
        self.before[k] = self.latest_id()
        n = self.count()
        change()
        self.wait_checkpoint(n, self.settle if settle is None else settle)

    def user_change(self, change):
        n = self.count()
        change()
        self.wait_checkpoint(n, self.settle)

    def finish(self):
        if self.proc:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGINT)
                self.proc.wait(timeout=30)
            self.out.close()
            self.proc = None

    def restore_before(self, k: int):
        cid = self.before.get(k)
        if cid is None:
            return 1, "", "no checkpoint before this step"
        return run([self.bin, "rewind", str(cid), "--yes"], cwd=self.ws, env=self.env)

    def cleanup(self):
        self.finish()


class RewindAI:
    """`rewind snap` before each step (its manual checkpoint command), `rewind jump N`."""
    name = "rewind-ai"

    def __init__(self, ctx: Ctx, ws: Path, home: Path):
        self.ctx, self.ws, self.home = ctx, ws, home
        self.env = tool_env(home)
        self.bin = ctx.vbin / "rewind"
        self.before: dict[int, int] = {}
        self.problems: list[str] = []

    def meta(self) -> dict:
        p = self.ws / ".git" / "rewind_meta.json"
        return json.loads(p.read_text()) if p.exists() else {}

    def snap(self, label: str):
        code, out, err = run([self.bin, "snap", "-m", label], cwd=self.ws, env=self.env)
        if code != 0 or "Not inside a git repository" in out + err:
            raise Unsupported((out + err).strip().splitlines()[-1][:120])
        cps = self.meta().get("checkpoints", [])
        if not cps:
            raise Unsupported("rewind snap made no checkpoint: " + (out + err).strip()[:120])
        return cps[-1]["index"]

    def start(self):
        pass

    def step(self, k: int, change):
        self.before[k] = self.snap(f"before step {k}")
        change()

    def finish(self):
        self.snap("session end")

    def restore_before(self, k: int):
        return run([self.bin, "jump", str(self.before[k]), "--yes"], cwd=self.ws, env=self.env)

    def cleanup(self):
        pass


class AgentStrace:
    """Claude Code hooks as `agent-strace setup` writes them (`agent-strace hook
    pre-tool` / `post-tool`). It records the calls; it keeps no file contents and
    has no restore command."""
    name = "agent-strace"

    def __init__(self, ctx: Ctx, ws: Path, home: Path, session="bench-1"):
        self.ctx, self.ws, self.home = ctx, ws, home
        self.env = tool_env(home)
        self.bin = ctx.vbin / "agent-strace"
        self.session = session
        self.problems: list[str] = []

    def hook(self, event: str, extra: dict | None = None):
        payload = {"session_id": self.session, "transcript_path": "/nonexistent",
                   "cwd": str(self.ws), "hook_event_name": event}
        payload.update(extra or {})
        code, _, err = run([self.bin, "hook", event], cwd=self.ws, env=self.env,
                           input=json.dumps(payload).encode())
        if code != 0 or "error" in err:
            self.problems.append(f"{event}: exit {code} {err.strip()[:200]}")

    def start(self):
        self.hook("session-start", {"source": "startup"})

    def pre(self, k: int):
        self.hook("pre-tool", {"tool_name": "Bash", "tool_use_id": f"call-{k}",
                               "tool_input": {"command": f"step {k}"}})

    def post(self, k: int):
        self.hook("post-tool", {"tool_name": "Bash", "tool_use_id": f"call-{k}",
                                "tool_input": {"command": f"step {k}"},
                                "tool_response": {"stdout": "", "stderr": "",
                                                  "interrupted": False}})

    def step(self, k: int, change):
        self.pre(k)
        change()
        self.post(k)

    def finish(self):
        self.hook("session-end", {"reason": "other"})

    def restore_before(self, k: int):
        raise Unsupported("records tool calls only: no file contents, no restore command")

    def cleanup(self):
        pass


DRIVERS = {"tacho": Tacho, "stepback": Stepback, "rewind-ai": RewindAI,
           "agent-strace": AgentStrace}


# ---------------------------------------------------------------- exactness cases

def w(p: Path, data, mode=None):
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    p.write_bytes(data)
    if mode is not None:
        os.chmod(p, mode)


def sh(ws: Path, cmd: str):
    subprocess.run(["sh", "-c", cmd], cwd=ws, check=True)


def base_tree(ws: Path):
    w(ws / "README.md", "# sample\n")
    w(ws / ".gitignore", "build/\n*.log\n")
    for i in range(5):
        w(ws / f"src/mod{i}.py", "".join(f"def f{j}():\n    return {j}  # foo\n" for j in range(20)))
    for i in range(3):
        w(ws / f"src/pkg/sub/file{i}.txt", f"nested {i}\n" * 10)
    w(ws / "run.sh", "#!/bin/sh\necho run\n", 0o644)
    w(ws / "data.bin", bytes(range(256)) * 64)
    w(ws / "build/out.txt", "generated 1\n")


def det_bytes(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


@dataclass
class Case:
    name: str
    desc: str
    setup: object = None          # extra setup (ws) before the repository is committed
    change: object = None         # the agent's step (ws)
    git: bool = True
    user: object = None           # a user change between step 1 and step 2, if any
    change2: object = None        # step 2, if any (the rollback goes to before step 2)
    settle: float = 3.0


def cases(quick: bool) -> list[Case]:
    def big(mb, seed):
        return lambda ws: w(ws / f"big{mb}.bin", det_bytes(mb << 20, seed))

    def replace_big(mb):
        def f(ws):
            with open(ws / f"big{mb}.bin", "r+b") as fh:
                fh.seek((mb << 20) // 2)
                fh.write(det_bytes(4096, 99))
        return f

    return [
        Case("text edit", "rewrite lines of a text file",
             change=lambda ws: w(ws / "src/mod1.py", "def f0():\n    return 'changed'\n")),
        Case("sed -i", "`sed -i` over three files",
             change=lambda ws: sh(ws, "sed -i 's/foo/bar/' src/mod0.py src/mod2.py src/mod3.py")),
        Case("rm -rf dir", "`rm -rf src/pkg`",
             change=lambda ws: sh(ws, "rm -rf src/pkg")),
        Case("mv dir", "`mv src/pkg lib`",
             change=lambda ws: sh(ws, "mv src/pkg lib")),
        Case("binary", "overwrite part of a binary file",
             change=lambda ws: w(ws / "data.bin", det_bytes(16384, 7))),
        Case("5 MB file", "change 4 KiB in the middle of a 5 MB file",
             setup=big(5, 5), change=replace_big(5), settle=8),
        Case("50 MB file", "change 4 KiB in the middle of a 50 MB file",
             setup=big(50, 50), change=replace_big(50), settle=30),
        Case("chmod +x", "`chmod +x run.sh`",
             change=lambda ws: sh(ws, "chmod +x run.sh")),
        Case("0600 file edited", "rewrite `.env`, a 0600 secret (its bits kept, as editors keep them)",
             setup=lambda ws: w(ws / ".env", "TOKEN=one\n", 0o600),
             change=lambda ws: (w(ws / ".env", "TOKEN=two\n"), os.chmod(ws / ".env", 0o600))),
        Case("0600 file deleted", "`rm id_key`, a 0600 file",
             setup=lambda ws: w(ws / "id_key", "-----KEY-----\n", 0o600),
             change=lambda ws: sh(ws, "rm id_key")),
        Case("symlink created", "`ln -s README.md link`",
             change=lambda ws: sh(ws, "ln -s README.md link")),
        Case("symlink retargeted", "`ln -sfn src/mod0.py link` (was README.md)",
             setup=lambda ws: os.symlink("README.md", ws / "link"),
             change=lambda ws: sh(ws, "ln -sfn src/mod0.py link")),
        Case("file -> dir", "`rm thing && mkdir thing && echo x > thing/inner`",
             setup=lambda ws: w(ws / "thing", "a file\n"),
             change=lambda ws: sh(ws, "rm thing && mkdir thing && echo x > thing/inner")),
        Case("dir -> file", "`rm -rf thing && echo x > thing`",
             setup=lambda ws: w(ws / "thing/inner", "inside\n"),
             change=lambda ws: sh(ws, "rm -rf thing && echo x > thing")),
        Case("empty dir removed", "`rmdir empty` (an empty directory of the before-state)",
             setup=lambda ws: (ws / "empty").mkdir(),
             change=lambda ws: sh(ws, "rmdir empty")),
        Case("empty dir created", "`mkdir newdir`",
             change=lambda ws: sh(ws, "mkdir newdir")),
        Case("file in ignored dir", "edit `build/out.txt` (`build/` is in .gitignore)",
             change=lambda ws: w(ws / "build/out.txt", "generated 2\n")),
        Case("name with newline", "edit and add files whose names hold a newline",
             setup=lambda ws: w(ws / "we\nird.txt", "one\n"),
             change=lambda ws: (w(ws / "we\nird.txt", "two\n"), w(ws / "new\nname", "x\n"))),
        Case("user change between steps",
             "step 1 edits mod1.py; the user then edits mod1.py and README.md; step 2 "
             "edits mod1.py and mod2.py; roll back to before step 2 (the user's edits kept)",
             change=lambda ws: w(ws / "src/mod1.py", "agent step 1\n"),
             user=lambda ws: (w(ws / "src/mod1.py", "agent step 1\nuser line\n"),
                              w(ws / "README.md", "# sample\nuser edit\n")),
             change2=lambda ws: (w(ws / "src/mod1.py", "agent step 2\n"),
                                 w(ws / "src/mod2.py", "agent step 2\n"))),
        Case("non-Git directory", "text edit, a new file and a deleted file outside Git",
             git=False,
             change=lambda ws: (w(ws / "src/mod1.py", "changed\n"), w(ws / "new.txt", "n\n"),
                                os.unlink(ws / "src/mod4.py"))),
    ]


def exactness(ctx: Ctx, tools: list[str], only_cases: list[str] | None = None):
    rows = []
    for case in cases(ctx.quick):
        if only_cases and not any(c in case.name for c in only_cases):
            continue
        for tool in tools:
            d = ctx.tmp(f"exact-{tool}")
            ws, home = d / "ws", d / "home"
            ws.mkdir()
            env = tool_env(home)
            base_tree(ws)
            if case.setup:
                case.setup(ws)
            if case.git:
                init_repo(ws, env)
            drv = DRIVERS[tool](ctx, ws, home)
            res = {"case": case.name, "tool": tool}
            t0 = time.time()
            try:
                drv.start()
                step_args = {"settle": case.settle} if tool == "stepback" else {}
                if case.change2 is None:
                    before = tree_state(ws)
                    drv.step(1, lambda: case.change(ws), **step_args)
                    target = 1
                else:
                    drv.step(1, lambda: case.change(ws), **step_args)
                    if hasattr(drv, "user_change"):
                        drv.user_change(lambda: case.user(ws))
                    else:
                        case.user(ws)
                    before = tree_state(ws)
                    drv.step(2, lambda: case.change2(ws), **step_args)
                    target = 2
                changed = tree_state(ws) != before
                drv.finish()
                code, out, err = drv.restore_before(target)
                after = tree_state(ws)
                diffs = tree_diff(before, after)
                res["restore_exit"] = code
                res["restore_output"] = (out + err).strip()[-600:]
                if not changed:
                    res["note"] = "the step changed nothing the comparison sees"
                if not diffs:
                    res["result"] = "exact"
                    if code != 0:
                        res["result"] = "exact (restore exit %d)" % code
                else:
                    res["result"] = "not exact"
                    res["reason"] = "; ".join(diffs)
                    if code != 0:
                        res["reason"] += f" (restore exit {code}: " \
                                         f"{(out + err).strip().splitlines()[-1][:160] if (out + err).strip() else ''})"
            except Unsupported as e:
                res["result"] = "unsupported"
                res["reason"] = str(e)
            except Exception as e:  # a tool failing a case is a result
                res["result"] = "error"
                res["reason"] = f"{type(e).__name__}: {e}"[:300]
            finally:
                try:
                    drv.cleanup()
                except Exception:
                    pass
            if getattr(drv, "problems", None):
                res["problems"] = drv.problems[:5]
            if tool == "tacho":
                hl = drv.hooks_log()
                if hl:
                    res["hooks_log"] = hl[-800:]
            res["seconds"] = round(time.time() - t0, 2)
            log(f"exactness  {case.name:28} {tool:13} {res['result']}"
                + (f"  ({res.get('reason')})" if res.get("reason") else ""))
            rows.append(res)
            if not ctx.keep:
                shutil.rmtree(d, ignore_errors=True)
    ctx.results["exactness"] = rows


# -------------------------------------------------------------------- granularity

def granularity(ctx: Ctx, tools: list[str], steps=15, gap=0.2):
    rows = []
    for tool in tools:
        d = ctx.tmp(f"gran-{tool}")
        ws, home = d / "ws", d / "home"
        ws.mkdir()
        env = tool_env(home)
        base_tree(ws)
        init_repo(ws, env)
        drv = DRIVERS[tool](ctx, ws, home)
        states = []
        res = {"tool": tool, "steps": steps, "gap_s": gap}
        try:
            drv.start()
            for k in range(1, steps + 1):
                states.append(tree_state(ws))

                def change(k=k):
                    w(ws / "src/mod1.py", f"state after step {k}\n")
                    w(ws / f"notes/n{k}.txt", f"{k}\n")
                if tool == "stepback":
                    drv.step(k, change, settle=0)  # the agent does not wait for stepback
                else:
                    drv.step(k, change)
                time.sleep(gap)
            if tool == "stepback":
                time.sleep(2)  # let the last burst settle before the agent exits
            drv.finish()
            reached = set()
            if tool == "tacho":
                attempts = [(k, lambda k=k: drv.restore_before(k)) for k in range(steps, 0, -1)]
            elif tool == "stepback":
                ids = [c["id"] for c in drv.state().get("checkpoints", [])]
                res["checkpoints"] = len(ids)
                attempts = [(i, lambda i=i: run([drv.bin, "rewind", str(i), "--yes"],
                                                cwd=ws, env=drv.env)) for i in reversed(ids)]
            elif tool == "rewind-ai":
                attempts = [(k, lambda k=k: drv.restore_before(k)) for k in range(steps, 0, -1)]
            else:
                raise Unsupported("no restore command")
            fails = []
            for label, fn in attempts:
                code, out, err = fn()
                now = tree_state(ws)
                hit = [i for i, s in enumerate(states) if s == now]
                if hit:
                    reached.add(hit[0])
                if code != 0:
                    fails.append(f"{label}: exit {code} {(out + err).strip()[-160:]}")
            res["reachable"] = len(reached)
            res["states"] = sorted(reached)
            res["result"] = f"{len(reached)} of {steps}"
            if fails:
                res["restore_failures"] = fails[:5]
        except Unsupported as e:
            res["result"] = "unsupported"
            res["reason"] = str(e)
        except Exception as e:
            res["result"] = "error"
            res["reason"] = f"{type(e).__name__}: {e}"[:300]
        finally:
            drv.cleanup()
        log(f"granularity {tool:13} {res['result']}")
        rows.append(res)
        if not ctx.keep:
            shutil.rmtree(d, ignore_errors=True)
    ctx.results["granularity"] = rows


# ------------------------------------------------------------------------- cost

def make_repo(root: Path, files: int, env: dict) -> tuple[Path, list[str]]:
    """A committed Git repository of `files` generated text files (0.3-1.5 KB each),
    100 a directory, two levels deep."""
    ws = root / "repo"
    rng = random.Random(files)
    paths = []
    for i in range(files):
        rel = f"d{i // 1000:02d}/s{(i // 100) % 10}/f{i:05d}.txt"
        paths.append(rel)
        p = ws / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        n = rng.randint(300, 1500)
        p.write_bytes((f"line {i} " * (n // 8 + 1)).encode()[:n] + b"\n")
    w(ws / ".gitignore", "target/\n")
    init_repo(ws, env)
    return ws, paths


def ten_of(paths: list[str]) -> list[str]:
    """The 10 files every tool's "after 10 edits" steps append to, spread over the tree."""
    return paths[::max(1, len(paths) // 10)][:10]


def edit10(ws: Path, paths: list[str], rnd: int):
    for rel in ten_of(paths):
        with open(ws / rel, "a") as f:
            f.write(f"edit {rnd}\n")


STEPBACK_TIMER = r"""
import json, sys, time
from pathlib import Path
from stepback.engine import Engine
ws, n, ten = Path(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
def edit10(rnd):
    for rel in ten:
        with open(ws / rel, "a") as f:
            f.write(f"edit {rnd}\n")
eng = Engine(ws)
eng.start_session()
eng.checkpoint(label="session start")
res = {"unchanged": [], "edited": []}
for _ in range(2):
    eng.checkpoint()
for i in range(n):
    t = time.perf_counter(); eng.checkpoint(); res["unchanged"].append(time.perf_counter() - t)
for i in range(n):
    edit10(1000 + i)
    t = time.perf_counter(); eng.checkpoint(); res["edited"].append(time.perf_counter() - t)
print(json.dumps(res))
"""


def med_ms(xs):
    return round(statistics.median(xs) * 1000, 1) if xs else None


def cost(ctx: Ctx, tools: list[str], sizes: list[int], n: int):
    rows = []
    for size in sizes:
        d = ctx.tmp(f"cost-{size}")
        env0 = tool_env(d / "gen-home")
        log(f"cost: generating a committed repository of {size} files")
        template, paths = make_repo(d, size, env0)
        variants = []
        for tool in tools:
            if tool == "tacho":
                variants += [("tacho", "tacho (hooks as installed)", []),
                             ("tacho", "tacho --no-watch", ["--no-watch"])]
            else:
                variants.append((tool, tool, None))
        for tool, label, args in variants:
            vd = d / label.replace(" ", "_").replace("(", "").replace(")", "")
            ws, home = vd / "ws", vd / "home"
            vd.mkdir()
            subprocess.run(["cp", "-a", str(template), str(ws)], check=True)
            env = tool_env(home)
            res = {"files": size, "tool": label, "n": n}
            unchanged, edited = [], []
            rnd = [0]

            def timed(fn):
                t = time.perf_counter()
                fn()
                return time.perf_counter() - t
            def hook_pairs(drv, warmup):
                """A hook driver's steps (a pre and a post hook each): `warmup` first,
                then `n` unchanged (returned) and `n` after 10 edits (into `edited`)."""
                drv.start()
                k = 0

                def pair():
                    nonlocal k
                    k += 1
                    drv.pre(k)
                    drv.post(k)
                for _ in range(warmup):
                    pair()
                unchanged = [timed(pair) for _ in range(n)]
                for _ in range(n):
                    rnd[0] += 1
                    edit10(ws, paths, rnd[0])
                    edited.append(timed(pair))
                drv.finish()
                return unchanged

            try:
                if tool == "tacho":
                    drv = Tacho(ctx, ws, home, hook_args=args)
                    unchanged = hook_pairs(drv, 3)
                    res["entry"] = "tacho hook claude-code: PreToolUse + PostToolUse (Bash)"
                    if drv.problems:
                        res["problems"] = drv.problems[:3]
                    drv.cleanup()
                elif tool == "agent-strace":
                    drv = AgentStrace(ctx, ws, home)
                    unchanged = hook_pairs(drv, 2)
                    res["entry"] = "agent-strace hook pre-tool + post-tool (no snapshot)"
                    if drv.problems:
                        res["problems"] = drv.problems[:3]
                elif tool == "rewind-ai":
                    drv = RewindAI(ctx, ws, home)
                    for _ in range(2):
                        drv.snap("warm")
                    unchanged = [timed(lambda: drv.snap("step")) for _ in range(n)]
                    for _ in range(n):
                        rnd[0] += 1
                        edit10(ws, paths, rnd[0])
                        edited.append(timed(lambda: drv.snap("step")))
                    res["entry"] = "rewind snap (one process)"
                elif tool == "stepback":
                    code, out, err = run([ctx.vbin / "python", "-c", STEPBACK_TIMER, ws, n,
                                          json.dumps(ten_of(paths))], cwd=ws, env=env)
                    if code != 0:
                        raise RuntimeError(err[-300:])
                    r = json.loads(out.strip().splitlines()[-1])
                    unchanged, edited = r["unchanged"], r["edited"]
                    res["entry"] = ("Engine.checkpoint(), what `stepback run`'s watcher calls "
                                    "once edits settle (in process, no process start)")
                res["unchanged_ms"] = med_ms(unchanged)
                res["edited_ms"] = med_ms(edited)
                res["result"] = "ok"
            except Unsupported as e:
                res["result"] = "unsupported"
                res["reason"] = str(e)
            except Exception as e:
                res["result"] = "error"
                res["reason"] = f"{type(e).__name__}: {e}"[:300]
            if tool == "tacho":  # a watcher the hooks started, even after a failure
                run([ctx.tacho, "watch", "stop", ws], env=env)
            log(f"cost {size:6} files  {label:28} unchanged {res.get('unchanged_ms')} ms, "
                f"after 10 edits {res.get('edited_ms')} ms {res.get('reason', '')}")
            rows.append(res)
            shutil.rmtree(vd, ignore_errors=True)
        if not ctx.keep:
            shutil.rmtree(d, ignore_errors=True)
    ctx.results["cost"] = rows


# ---------------------------------------------------------------------- storage

def du(p: Path) -> int:
    total = 0
    if not p.exists():
        return 0
    for root, dirs, files in os.walk(p):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


STEPBACK_EDITS = r"""
import sys
from pathlib import Path
from stepback.engine import Engine
ws, n = Path(sys.argv[1]), int(sys.argv[2])
eng = Engine(ws)
eng.start_session()
eng.checkpoint(label="session start")
f = ws / "big.txt"
for i in range(n):
    lines = f.read_bytes().split(b"\n")
    lines[i * 97 % (len(lines) - 1)] = b"edited line %d" % i
    f.write_bytes(b"\n".join(lines))
    eng.checkpoint()
"""


def storage(ctx: Ctx, tools: list[str], edits=100):
    rows = []
    lines = [(f"{i:06d} " + "abcdefghij" * 6)[:63] for i in range(16384)]
    content = ("\n".join(lines) + "\n").encode()  # 1 MiB

    def edit(ws: Path, i: int):
        f = ws / "big.txt"
        ls = f.read_bytes().split(b"\n")
        ls[i * 97 % (len(ls) - 1)] = b"edited line %d" % i
        f.write_bytes(b"\n".join(ls))

    for tool in tools:
        d = ctx.tmp(f"storage-{tool}")
        ws, home = d / "ws", d / "home"
        ws.mkdir()
        env = tool_env(home)
        w(ws / "big.txt", content)
        w(ws / "README.md", "x\n")
        init_repo(ws, env)
        # What Git itself needs for the repository before any tool ran, loose and packed.
        base_loose = du(ws / ".git")
        copy = d / "base-copy"
        subprocess.run(["cp", "-a", str(ws / ".git"), str(copy)], check=True)
        run(["git", "--git-dir", copy, "gc", "-q", "--prune=now"], env=env)
        base_packed = du(copy)
        res = {"tool": tool, "edits": edits}
        t0 = time.time()
        try:
            if tool == "tacho":
                drv = Tacho(ctx, ws, home)
                drv.start()
                for i in range(edits):
                    f = ws / "big.txt"
                    before = f.read_bytes()
                    ls = before.split(b"\n")
                    k = i * 97 % (len(ls) - 1)
                    old_line, new_line = ls[k].decode(), f"edited line {i}"
                    inp = {"file_path": str(f), "old_string": old_line, "new_string": new_line}
                    drv.pre(i + 1, "Edit", inp)
                    edit(ws, i)
                    # Claude Code's Edit result as its PostToolUse hook sends it (the
                    # fields of 2.0.74-2.1.63 transcripts): the whole file as it was
                    # before the edit, and the hunk.
                    resp = {"filePath": str(f), "oldString": old_line, "newString": new_line,
                            "originalFile": before.decode(),
                            "structuredPatch": [{"oldStart": k + 1, "oldLines": 1,
                                                 "newStart": k + 1, "newLines": 1,
                                                 "lines": [f"-{old_line}", f"+{new_line}"]}],
                            "userModified": False, "replaceAll": False}
                    drv.post(i + 1, "Edit", inp, response=resp)
                drv.finish()
                th = home / "tacho"
                res["where"] = "TACHO_HOME (snapshots/ + log/ + cache/)"
                res["before_bytes"] = du(th)
                res["snapshots_before"] = du(th / "snapshots")
                res["log_before"] = du(th / "log")
                code, out, err = run([ctx.tacho, "gc"], cwd=ws, env=env)
                res["compaction"] = f"tacho gc (exit {code})"
                res["after_bytes"] = du(th)
                res["snapshots_after"] = du(th / "snapshots")
                res["log_after"] = du(th / "log")
                if drv.problems:
                    res["problems"] = drv.problems[:3]
            elif tool == "stepback":
                code, out, err = run([ctx.vbin / "python", "-c", STEPBACK_EDITS, ws, edits],
                                     cwd=ws, env=env)
                if code != 0:
                    raise RuntimeError(err[-300:])
                res["where"] = ".git of the repository (refs/checkpoints/*), minus what Git held before"
                res["before_bytes"] = du(ws / ".git") - base_loose
                code, out, err = run(["git", "gc", "-q", "--prune=now"], cwd=ws, env=env)
                res["compaction"] = f"git gc --prune=now (stepback has none; exit {code})"
                res["after_bytes"] = du(ws / ".git") - base_packed
            elif tool == "rewind-ai":
                drv = RewindAI(ctx, ws, home)
                for i in range(edits):
                    drv.snap(f"step {i}")
                    edit(ws, i)
                drv.snap("end")
                res["where"] = ".git of the repository (refs/rewind/*), minus what Git held before"
                res["before_bytes"] = du(ws / ".git") - base_loose
                c1, o1, e1 = run([ctx.vbin / "rewind", "prune"], cwd=ws, env=env)
                c2, o2, e2 = run(["git", "gc", "-q", "--prune=now"], cwd=ws, env=env)
                res["compaction"] = f"rewind prune (exit {c1}: {(o1 + e1).strip()[:60]}) + git gc --prune=now (exit {c2})"
                res["after_bytes"] = du(ws / ".git") - base_packed
            elif tool == "agent-strace":
                drv = AgentStrace(ctx, ws, home)
                drv.start()
                for i in range(edits):
                    drv.pre(i + 1)
                    edit(ws, i)
                    drv.post(i + 1)
                drv.finish()
                res["where"] = "AGENT_TRACE_DIR (events only: no file contents)"
                res["before_bytes"] = du(home / "agent-traces") + du(ws / ".agent-traces")
                res["compaction"] = "none"
                res["after_bytes"] = res["before_bytes"]
            res["result"] = "ok"
        except Unsupported as e:
            res["result"] = "unsupported"
            res["reason"] = str(e)
        except Exception as e:
            res["result"] = "error"
            res["reason"] = f"{type(e).__name__}: {e}"[:300]
        res["seconds"] = round(time.time() - t0, 1)
        log(f"storage {tool:13} before {res.get('before_bytes')} B, after "
            f"{res.get('after_bytes')} B ({res.get('compaction', '')}) {res.get('reason', '')}")
        rows.append(res)
        if not ctx.keep:
            shutil.rmtree(d, ignore_errors=True)
    ctx.results["storage"] = rows


# -------------------------------------------------------------------- tampering

def blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def loose(objects: Path, oid: str) -> Path:
    return objects / oid[:2] / oid[2:]


def swap(objects: Path, victim: str, other: str) -> str | None:
    a, b = loose(objects, victim), loose(objects, other)
    if not a.exists() or not b.exists():
        return f"not loose: {victim if not a.exists() else other}"
    os.chmod(a, 0o644)
    a.write_bytes(b.read_bytes())
    return None


def tamper_setup(ctx: Ctx, tool: str, name: str):
    d = ctx.tmp(f"tamper-{tool}-{name}")
    ws, home = d / "ws", d / "home"
    ws.mkdir()
    env = tool_env(home)
    a0, b0 = b"original content of a\n" * 3, b"content of b\n" * 3
    w(ws / "a.txt", a0)
    w(ws / "b.txt", b0)
    init_repo(ws, env)
    drv = DRIVERS[tool](ctx, ws, home)
    drv.start()
    drv.step(1, lambda: w(ws / "a.txt", b"the agent's a\n"))
    drv.finish()
    return d, ws, home, env, drv, a0, b0


def outcome(ws: Path, a0: bytes, b0: bytes) -> str:
    got = (ws / "a.txt").read_bytes() if (ws / "a.txt").is_file() else None
    if got == a0:
        return "a.txt restored correctly"
    if got == b"the agent's a\n":
        return "a.txt left as the agent wrote it"
    if got == b0:
        return "a.txt now holds b.txt's content (the swapped-in object)"
    return f"a.txt holds other content ({got[:30]!r})" if got is not None else "a.txt missing"


def verdict(checks, outcome_text: str) -> str:
    """Whether a command exited non-zero, and what the restore left in the workspace."""
    noticed = any(r[0] != 0 for _, r in checks)
    if "restored correctly" in outcome_text:
        return "noticed; restored correctly" if noticed else "no effect: restored correctly"
    if "left as the agent wrote it" in outcome_text:
        return ("noticed: restore refused, nothing written" if noticed else
                "NOT noticed: restore exit 0 but the file was not restored")
    return ("noticed, but after writing wrong content" if noticed else
            "NOT noticed: wrong content restored silently")


def short(code, out, err, n=300):
    """The exit status and the end of what the command said (errors come last)."""
    text = " ".join((out + err).split())
    return f"exit {code}: {'…' if len(text) > n else ''}{text[-n:]}"


def tampering(ctx: Ctx, tools: list[str]):
    rows = []
    for tool in tools:
        # 1. One stored object swapped for another valid object of the store: the blob
        #    that holds a.txt's before-content now holds b.txt's blob; then (1b) the
        #    same followed by the tool's compaction before the restore.
        for compact in (False, True):
            res = {"tool": tool, "attack": "object swap (a.txt's stored blob := b.txt's blob)"
                   + (", then compaction" if compact else "")}
            d = None
            try:
                if tool == "agent-strace":
                    raise Unsupported("stores no file contents (nothing to swap, nothing to restore)")
                d, ws, home, env, drv, a0, b0 = tamper_setup(ctx, tool, "swap")
                objects = (home / "tacho" / "snapshots" / "objects") if tool == "tacho" \
                    else (ws / ".git" / "objects")
                why = swap(objects, blob_id(a0), blob_id(b0))
                if why:
                    raise Unsupported(why)
                checks = []
                if compact and tool == "tacho":
                    checks.append(("tacho gc", run([ctx.tacho, "gc"], cwd=ws, env=env)))
                elif compact:
                    checks.append(("git gc", run(["git", "gc", "-q", "--prune=now"], cwd=ws, env=env)))
                if tool == "tacho":
                    checks.append(("tacho log verify", run([ctx.tacho, "log", "verify"], cwd=ws, env=env)))
                code, out, err = drv.restore_before(1)
                checks.append(("restore", (code, out, err)))
                res["checks"] = [f"{n}: {short(*r)}" for n, r in checks]
                res["outcome"] = outcome(ws, a0, b0)
                res["result"] = verdict(checks, res["outcome"])
            except Unsupported as e:
                res["result"] = "unsupported"
                res["reason"] = str(e)
            except Exception as e:
                res["result"] = "error"
                res["reason"] = f"{type(e).__name__}: {e}"[:300]
            log(f"tampering {tool:13} swap{' + compaction' if compact else ''}: {res['result']}")
            rows.append(res)
            if d and not ctx.keep:
                shutil.rmtree(d, ignore_errors=True)

        # 2. The record edited: bytes flipped in the log / metadata naming the snapshots.
        res = {"tool": tool}
        d = None
        try:
            d, ws, home, env, drv, a0, b0 = tamper_setup(ctx, tool, "record")
            checks = []
            if tool == "tacho":
                segs = sorted((home / "tacho" / "log" / "streams").rglob("*.tseg"),
                              key=lambda p: p.stat().st_size)
                if not segs:
                    raise Unsupported("no segment file under log/streams")
                seg = segs[-1]
                data = bytearray(seg.read_bytes())
                i = len(data) // 2
                data[i] ^= 0x01
                os.chmod(seg, 0o644)
                seg.write_bytes(bytes(data))
                res["attack"] = f"one bit flipped in the middle of the session's log segment ({len(data)} B)"
                checks.append(("tacho log verify", run([ctx.tacho, "log", "verify"], cwd=ws, env=env)))
                checks.append(("restore", drv.restore_before(1)))
            elif tool == "stepback":
                st = ws / ".git" / "stepback" / "state.json"
                s = json.loads(st.read_text())
                cps = s["checkpoints"]
                cid = drv.before[1]
                first = next(c for c in cps if c["id"] == cid)
                last = cps[-1]
                first["tree"], first["commit"] = last["tree"], last["commit"]
                st.write_text(json.dumps(s, indent=2))
                res["attack"] = "state.json: the before-checkpoint's tree/commit replaced by the last checkpoint's (valid ids)"
                checks.append(("restore", drv.restore_before(1)))
            elif tool == "rewind-ai":
                mp = ws / ".git" / "rewind_meta.json"
                m = json.loads(mp.read_text())
                cps = m["checkpoints"]
                cps[drv.before[1]]["sha"] = cps[-1]["sha"]
                cps[drv.before[1]]["tree_sha"] = cps[-1]["tree_sha"]
                mp.write_text(json.dumps(m, indent=2))
                res["attack"] = "rewind_meta.json: the before-checkpoint's commit replaced by the last one's (valid id)"
                checks.append(("restore", drv.restore_before(1)))
            elif tool == "agent-strace":
                evs = list((home / "agent-traces").rglob("events.ndjson")) + \
                    list((ws / ".agent-traces").rglob("events.ndjson"))
                if not evs:
                    raise Unsupported("no events.ndjson found")
                ev = evs[0]
                text = ev.read_text()
                j = text.find("step 1")
                if j < 0:
                    raise Unsupported("the recorded command was not found in the record")
                ev.write_text(text[:j] + "step 7" + text[j + 6:])
                res["attack"] = "events.ndjson: the recorded command 'step 1' edited to 'step 7'"
                code, out, err = run([ctx.vbin / "agent-strace", "verify"], cwd=ws, env=drv.env)
                checks.append(("agent-strace verify", (code, out, err)))
            res["checks"] = [f"{n}: {short(*r)}" for n, r in checks]
            if tool != "agent-strace":
                res["outcome"] = outcome(ws, a0, b0)
                res["result"] = verdict(checks, res["outcome"])
            else:
                res["result"] = "noticed" if any(r[0] != 0 for _, r in checks) else "NOT noticed"
        except Unsupported as e:
            res["result"] = "unsupported"
            res["reason"] = str(e)
        except Exception as e:
            res["result"] = "error"
            res["reason"] = f"{type(e).__name__}: {e}"[:300]
        log(f"tampering {tool:13} record: {res['result']}")
        rows.append(res)
        if d and not ctx.keep:
            shutil.rmtree(d, ignore_errors=True)
    ctx.results["tampering"] = rows


# ------------------------------------------------------------------------ report

def human(n):
    if n is None:
        return "–"
    for unit in ["B", "KiB", "MiB", "GiB"]:
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def markdown(ctx: Ctx, meta: dict, tools: list[str]) -> str:
    r = ctx.results
    out = [f"# tacho against its peers — {meta['date']}", "",
           f"Machine: {meta['machine']}. Versions: " +
           ", ".join(f"{k} {v}" for k, v in meta["versions"].items()) +
           f". Mode: {'quick' if ctx.quick else 'full'}. Run time: {meta['run_seconds']:.0f} s.", ""]
    for m in meta.get("merged", []):
        out += [f"Merged from {m['file']}: {', '.join(m['sections'])} ({m['date']}, "
                f"{'quick' if m['quick'] else 'full'}, {m['run_seconds']:.0f} s).", ""]
    if "exactness" in r:
        out += ["## Exactness (roll back one agent step with the tool's own restore; whole tree compared)", "",
                "| case | " + " | ".join(tools) + " |", "|---|" + "---|" * len(tools)]
        notes: list[str] = []
        numbers: dict[str, int] = {}  # one note for a reason a tool gives in every case
        by = {(x["case"], x["tool"]): x for x in r["exactness"]}
        for case in dict.fromkeys(x["case"] for x in r["exactness"]):
            cells = []
            for t in tools:
                x = by.get((case, t))
                if not x:
                    cells.append("–")
                    continue
                cell = x["result"]
                if x.get("reason"):
                    same = sum(1 for y in r["exactness"]
                               if y["tool"] == t and y.get("reason") == x["reason"]) > 2
                    text = f"{t}: {x['reason']}" if same else f"{case} / {t}: {x['reason']}"
                    if text not in numbers:
                        notes.append(text)
                        numbers[text] = len(notes)
                    cell += f" [{numbers[text]}]"
                cells.append(cell)
            out.append(f"| {case} | " + " | ".join(cells) + " |")
        out += [""] + [f"{i}. {n}" for i, n in enumerate(notes, 1)] + [""]
    if "granularity" in r:
        g = r["granularity"][0] if r["granularity"] else {}
        out += [f"## Granularity ({g.get('steps', 15)} steps {g.get('gap_s', 0.2)} s apart: earlier states reachable by the tool's restore)", "",
                "| tool | states reachable | notes |", "|---|---|---|"]
        for x in r["granularity"]:
            note = x.get("reason", "")
            if "checkpoints" in x:
                note = f"{x['checkpoints']} checkpoints taken " + note
            if x.get("restore_failures"):
                note += " restore failures: " + "; ".join(x["restore_failures"])[:300]
            out.append(f"| {x['tool']} | {x['result']} | {note.strip()} |")
        out.append("")
    if "cost" in r:
        out += ["## Per-step cost (median ms of whole steps in a committed Git repository)", "",
                "| files | tool | unchanged | after 10 edits | per-step entry point |", "|---:|---|---:|---:|---|"]
        for x in r["cost"]:
            out.append(f"| {x['files']:,} | {x['tool']} | {x.get('unchanged_ms', x.get('result'))} | "
                       f"{x.get('edited_ms', x.get('reason', ''))} | {x.get('entry', '')} |")
        out += [f"", f"N = {r['cost'][0]['n'] if r['cost'] else '?'} steps each.", ""]
    if "storage" in r:
        out += ["## Storage after 100 one-line edits of a 1 MiB file", "",
                "| tool | store | before compaction | after | compaction |", "|---|---|---:|---:|---|"]
        for x in r["storage"]:
            if "snapshots_before" in x:
                x = dict(x, where=x["where"] + f"; snapshots/ alone: {human(x['snapshots_before'])}"
                         f" → {human(x['snapshots_after'])}")
            out.append(f"| {x['tool']} | {x.get('where', x.get('reason', ''))} | {human(x.get('before_bytes'))} | "
                       f"{human(x.get('after_bytes'))} | {x.get('compaction', '')} |")
        out.append("")
    if "tampering" in r:
        out += ["## Tampering", "", "| tool | attack | result | what the tool said / did |", "|---|---|---|---|"]
        for x in r["tampering"]:
            said = "; ".join(x.get("checks", [])) or x.get("reason", "")
            if x.get("outcome"):
                said += f" → {x['outcome']}"
            said = said.replace("|", "\\|")
            out.append(f"| {x['tool']} | {x.get('attack', '')} | {x['result']} | {said} |")
        out.append("")
    out += ["Rerun: `python3 benches/peers/run.py --tacho target/release/tacho` "
            "(`--quick` for a short run; see benches/peers/README.md)."]
    return "\n".join(out) + "\n"


def machine() -> str:
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(open("/proc/meminfo").readline().split()[1])
        mem = f", {kb / 1048576:.1f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return f"{platform.system()} {platform.release()}, {os.cpu_count()} cores ({cpu}){mem}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tacho", help="the tacho binary (default target/release/tacho, then tacho on PATH)")
    ap.add_argument("--venv", default=str(HERE / ".venv"), help="virtual environment for the peers")
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "tacho-peers.json"),
                    help="JSON results; the Markdown report is written beside it (.md)")
    ap.add_argument("--quick", action="store_true", help="small sizes, few repeats (minutes)")
    ap.add_argument("--only", default=",".join(SECTIONS), help="sections: " + ",".join(SECTIONS))
    ap.add_argument("--tools", default=",".join(TOOLS), help="tools: " + ",".join(TOOLS))
    ap.add_argument("--sizes", help="cost sizes, comma-separated (default 1000,5000,20000,50000; quick 1000,5000)")
    ap.add_argument("--repeats", type=int, help="steps measured per cost row (default 15; quick 5)")
    ap.add_argument("--scratch", help="directory for the temporary workspaces (default: a new temp dir)")
    ap.add_argument("--cases", help="exactness cases whose name holds one of these (comma-separated)")
    ap.add_argument("--keep", action="store_true", help="keep the workspaces and stores")
    ap.add_argument("--report-from", nargs="+", metavar="JSON",
                    help="write no new results: merge these results files (a later file's "
                         "sections win) and write the report (--out) from them")
    a = ap.parse_args()
    if a.report_from:
        results, merged = {}, []
        for f in a.report_from:
            r = json.loads(Path(f).read_text())
            m = r.pop("meta")
            results.update(r)
            merged.append(dict(m, file=f, sections=list(r)))
        meta = dict(merged[0], run_seconds=sum(m["run_seconds"] for m in merged),
                    merged=merged if len(merged) > 1 else [])
        ctx = Ctx(tacho=Path(meta["tacho_binary"]), vbin=Path("."), quick=meta["quick"],
                  scratch=Path("."), keep=True, results=dict(results, meta=meta))
        tools = [t for t in TOOLS if any(x.get("tool", "").startswith(t)
                                         for sec in results.values() for x in sec)]
        out = Path(a.out)
        out.write_text(json.dumps(ctx.results, indent=2))
        md = markdown(ctx, meta, tools)
        out.with_suffix(".md").write_text(md)
        print(md)
        return
    only = [s for s in a.only.split(",") if s]
    tools = [t for t in a.tools.split(",") if t]
    for s in only:
        if s not in SECTIONS:
            sys.exit(f"unknown section {s}")
    for t in tools:
        if t not in TOOLS:
            sys.exit(f"unknown tool {t}")
    t_start = time.time()
    tacho = find_tacho(a.tacho)
    vbin = ensure_venv(Path(a.venv))
    scratch = Path(a.scratch) if a.scratch else Path(tempfile.mkdtemp(prefix="tacho-peers-"))
    scratch.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(tacho=tacho, vbin=vbin, quick=a.quick, scratch=scratch, keep=a.keep)
    versions = {"tacho": run([tacho, "--version"])[1].strip().removeprefix("tacho ")}
    for n in PEERS:
        code, out, _ = run([vbin / "python", "-m", "pip", "show", n])
        versions[n] = next((l.split(":", 1)[1].strip() for l in out.splitlines()
                            if l.startswith("Version:")), "?")
    versions["git"] = run(["git", "--version"])[1].strip().removeprefix("git version ")
    log(f"tacho {tacho}; versions {versions}; scratch {scratch}")
    sizes = [int(s) for s in a.sizes.split(",")] if a.sizes else \
        ([1000, 5000] if a.quick else [1000, 5000, 20000, 50000])
    repeats = a.repeats or (5 if a.quick else 15)
    try:
        if "exactness" in only:
            exactness(ctx, tools, a.cases.split(",") if a.cases else None)
        if "granularity" in only:
            granularity(ctx, tools)
        if "cost" in only:
            cost(ctx, tools, sizes, repeats)
        if "storage" in only:
            storage(ctx, tools)
        if "tampering" in only:
            tampering(ctx, tools)
    finally:
        meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(),
                "versions": versions, "tacho_binary": str(tacho), "quick": a.quick,
                "sections": only, "run_seconds": time.time() - t_start,
                "python": platform.python_version()}
        ctx.results["meta"] = meta
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(ctx.results, indent=2))
        md = markdown(ctx, meta, tools)
        out.with_suffix(".md").write_text(md)
        if not a.keep and not a.scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        print(md)
        log(f"wrote {out} and {out.with_suffix('.md')} in {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
