"""Drives `tacho mcp` with the official Python MCP client (the `mcp` package).

Usage: client.py TACHO_BIN WORKSPACE SESSION
The workspace holds src/value.txt (41), checks/parity.sh and plan.md; the session is
recorded. After the goal is frozen the client fixes the value (42), as an agent's work
would: a check must fail without the change (SPEC §12.2). Prints one JSON object with what each step returned; exits 1 on any surprise.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def payload(result):
    """The structured result of a tool call, or its text."""
    if getattr(result, "structured_content", None) is not None:
        return result.structured_content
    texts = [c.text for c in result.content if getattr(c, "type", "") == "text"]
    return {"text": "\n".join(texts)}


async def main(tacho, workspace, session):
    env = dict(os.environ)
    params = StdioServerParameters(command=tacho, args=["mcp"], env=env, cwd=workspace)
    out = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as client:
            init = await client.initialize()
            out["server"] = init.server_info.name
            tools = await client.list_tools()
            out["tools"] = sorted(t.name for t in tools.tools)
            with open(os.path.join(workspace, "plan.md"), encoding="utf-8") as f:
                plan = f.read()
            created = await client.call_tool("create_goal", {"session": session, "plan": plan, "objective": "make the value right"})
            out["create_error"] = bool(created.is_error)
            out["created"] = payload(created)
            with open(os.path.join(workspace, "src", "value.txt"), "w", encoding="utf-8") as f:
                f.write("42\n")
            check = await client.call_tool("verify_project", {"session": session, "goalCheck": "parity"})
            out["check_error"] = bool(check.is_error)
            out["check"] = payload(check)
            bad = await client.call_tool("verify_project", {"session": session, "goalCheck": "not-a-check"})
            out["bad_check_error"] = bool(bad.is_error)
            out["bad_check"] = payload(bad)
            # A block without the statement that no independent work remains: the
            # refusal names the argument an agent passes, not a CLI flag.
            unblocked = await client.call_tool("update_goal", {"session": session, "status": "blocked", "kind": "user_input", "reason": "r", "requiredChange": "c", "evidence": []})
            out["block_error"] = bool(unblocked.is_error)
            out["block"] = payload(unblocked)
            status = await client.call_tool("get_goal", {"session": session})
            out["status"] = payload(status)
            done = await client.call_tool("update_goal", {"session": session, "status": "complete"})
            out["complete_error"] = bool(done.is_error)
            out["complete"] = payload(done)
            resumed = await client.call_tool("update_goal", {"session": session, "status": "resume"})
            out["resume_error"] = bool(resumed.is_error)
            out["resume"] = payload(resumed)
            # Assurance is opt-in: a plan without a contract makes a plain goal.
            plain_plan = "# tidy up\nGoal kind: chore\n\n## Acceptance criteria\n- AC1: tidy\n\n## Verification plan\nLook at it.\n\n## Non-goals\n- none\n\n## Assumed scope\nsrc/\n"
            plain = await client.call_tool("create_goal", {"session": session, "plan": plain_plan})
            out["plain_error"] = bool(plain.is_error)
            out["plain"] = payload(plain)
            required = await client.call_tool("create_goal", {"session": session, "plan": plain_plan, "assure": True})
            out["required_error"] = bool(required.is_error)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
