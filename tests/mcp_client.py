"""An independent MCP client for `rung mcp` (the Python `mcp` SDK, not rmcp): started by
tests/mcp.rs as `python tests/mcp_client.py RUNG WORKSPACE`.

It initialises, lists the tools, reads v002 of a vector-add workspace, submits a changed copy as
a new version with v002 as its parent, checks it, reads its SASS, diffs it with v002, asks for its
profile and its history. Then a path-traversal name, an oversized source and malformed arguments
must each come back as a tool error that names what was wrong and the fix, with the server still
serving afterwards. The SDK validates every structured result against the tool's output schema.

Prints one `ok ...` line per step and `mcp client: N steps passed` at the end; exits non-zero
on the first failure.
"""

import os
import sys
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

TOOLS = {
    "list_versions",
    "read_version",
    "submit_version",
    "check",
    "get_results",
    "get_asm",
    "diff_asm",
    "get_profile",
    "get_trace",
    "history",
}

steps = 0


def ok(what):
    global steps
    steps += 1
    print(f"ok {steps:2} {what}", flush=True)


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


async def call(session, name, arguments=None):
    """A call that must succeed: its structured content."""
    result = await session.call_tool(name, arguments or {})
    assert not result.is_error, f"{name} failed: {text_of(result)}"
    assert result.structured_content is not None, f"{name}: no structured content"
    assert text_of(result).strip(), f"{name}: no text summary"
    return result.structured_content, text_of(result)


async def tool_error(session, name, arguments, *needles):
    """A call that must come back as a tool error naming what was wrong and the fix."""
    result = await session.call_tool(name, arguments)
    text = text_of(result)
    assert result.is_error, f"{name} {str(arguments)[:80]} should fail, got: {text[:400]}"
    assert "help:" in text, f"{name}: the error names no fix: {text}"
    for n in needles:
        assert n in text, f"{name}: {n!r} is not in the error: {text}"
    return text, result.structured_content


def version_files(ws):
    return sorted(p.name for p in (ws / "versions").iterdir())


async def main(rung, ws):
    env = {k: os.environ[k] for k in ("RUNG_HOME", "RUNG_PYTHON", "NO_COLOR") if k in os.environ}
    params = StdioServerParameters(command=rung, args=["mcp", "-C", str(ws)], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        assert init.server_info.name == "rung", init.server_info
        assert init.capabilities.tools is not None
        assert "submit_version" in (init.instructions or "")
        ok(f"initialise: {init.server_info.name} {init.server_info.version}, protocol {init.protocol_version}")

        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == TOOLS, sorted(tools)
        for t in tools.values():
            assert t.input_schema.get("type") == "object", (t.name, t.input_schema)
            assert t.output_schema is not None, t.name
            assert t.description, t.name
        assert "1 MiB" in tools["submit_version"].description
        assert set(tools["submit_version"].input_schema["required"]) == {"name", "source"}
        ok(f"list tools: {', '.join(sorted(tools))}")

        listed, _ = await call(session, "list_versions")
        ids = [v["id"] for v in listed["versions"]]
        assert ids[:3] == ["v001", "v002", "v003"], ids
        ok(f"list_versions: {', '.join(ids)}")

        parent, _ = await call(session, "read_version", {"version": "v002"})
        assert parent["path"] == "versions/v002-float4.cu", parent["path"]
        assert "float4" in parent["source"]
        # The scalar tail becomes one element per thread instead of a loop in thread 0.
        old_tail = "    if (i == 0) {\n        for (int j = vec * 4; j < n; ++j) out[j] = a[j] + b[j];\n    }\n"
        assert old_tail in parent["source"], parent["source"]
        new_tail = "    int t = vec * 4 + i;\n    if (t < n && i < 4) out[t] = a[t] + b[t];\n"
        source = parent["source"].replace(old_tail, new_tail)
        ok("read_version v002")

        submitted, text = await call(
            session, "submit_version", {"name": "Float4 Parallel Tail", "source": source, "parent": "v002"}
        )
        new = submitted["id"]
        assert new == "v004", submitted
        assert submitted["path"] == "versions/v004-float4-parallel-tail.cu", submitted
        assert (submitted["status"], submitted["parent"], submitted["kind"]) == ("proposed", "v002", "cuda")
        assert (ws / submitted["path"]).read_text() == source
        assert "check" in text
        ok(f"submit_version: {submitted['path']} ({submitted['status']}, parent {submitted['parent']})")

        report, text = await call(session, "check", {"versions": [new], "no_bench": True})
        assert report["schema"] == 1 and len(report["versions"]) == 1, report
        record = report["versions"][0]
        stages = {s["stage"]: s for s in record["stages"]}
        assert record["id"] == new and record["status"] == "proposed", record
        assert stages["build"]["verdict"] == "pass", stages["build"]
        assert record["verdict"] in ("pass", "skipped"), text
        assert new in text and "build" in text
        ok(f"check {new}: {record['verdict']} ({'; '.join(s['stage'] + ' ' + s['verdict'] for s in record['stages'])})")

        results, _ = await call(session, "get_results", {"version": new})
        by_stage = {r["stage"]: r for r in results["results"]}
        assert by_stage["build"]["verdict"] == "pass" and by_stage["build"]["current"] is True, by_stage
        assert results["parent"] == "v002"
        ok(f"get_results {new}: {results['verdict']}")

        sass, text = await call(session, "get_asm", {"version": new})
        assert sass["kind"] == "sass" and sass["built_now"] is False, {k: sass[k] for k in ("kind", "built_now")}
        kernel = sass["kernels"][0]
        assert kernel["name"] == "vector_add", kernel["name"]
        assert kernel["lines"] and kernel["mix"]["instructions"] > 0
        assert kernel["mix"]["memory"].get("LDG 128-bit", 0) >= 2, kernel["mix"]
        assert "LDG.E.128" in text, text[:2000]
        ok(f"get_asm {new}: {kernel['mix']['instructions']} instructions, LDG 128-bit ×{kernel['mix']['memory']['LDG 128-bit']}")

        diff, text = await call(session, "diff_asm", {"a": "v002", "b": new})
        k = diff["kernels"][0]
        assert (k["left"], k["right"]) == ("vector_add", "vector_add"), k
        assert k["deleted"] + k["inserted"] > 0 and k["hunks"], k
        assert k["left_mix"] and k["right_mix"]
        assert f"v002 → {new}" in text and "@@" in text, text[:2000]
        ok(f"diff_asm v002 {new}: −{k['deleted']} +{k['inserted']} lines, {len(k['hunks'])} hunks")

        profile, text = await call(session, "get_profile", {"version": new})
        assert profile["available"] is False and profile["profile"] is None, profile
        assert text.startswith(f"not available yet: no profile has been recorded for {new}"), text
        ok(f"get_profile {new}: {text.splitlines()[0]}")

        trace, text = await call(session, "get_trace", {"version": new})
        assert trace["available"] is False and trace["trace"] is None, trace
        assert text.startswith(f"not available yet: no trace has been recorded for {new}"), text
        ok(f"get_trace {new}: {text.splitlines()[0]}")

        hist, _ = await call(session, "history", {"version": new, "stage": "build"})
        assert hist["results"] and all(r["stage"] == "build" for r in hist["results"]), hist
        ok(f"history {new}: {len(hist['results'])} build result(s)")

        # Errors: each is a tool error naming the field and the fix; nothing is written.
        before = version_files(ws)
        text, data = await tool_error(
            session,
            "submit_version",
            {"name": "../../x", "source": source, "extension": "cu"},
            "name `../../x`",
            "may not contain",
        )
        assert data["field"] == "name", data
        assert version_files(ws) == before
        assert not list(ws.parent.glob("*x.cu")) and not list(ws.glob("*x.cu"))
        ok(f"path traversal refused: {text.splitlines()[0]}")

        huge = "// " + "x" * (1 << 20) + "\n" + source
        text, data = await tool_error(
            session, "submit_version", {"name": "huge", "source": huge, "parent": "v002"}, "1048576", "1 MiB"
        )
        assert data["field"] == "source", data
        assert version_files(ws) == before
        ok(f"oversized source refused: {text.splitlines()[0]}")

        missing, data = await tool_error(
            session, "submit_version", {"name": "no-source", "parent": "v002"}, "missing field `source`"
        )
        assert data["field"] == "source", data
        text, data = await tool_error(session, "read_version", {"version": 42}, "read_version: invalid arguments")
        assert data["field"] == "version", data
        text, data = await tool_error(session, "check", {"versions": ["v002"], "sed": 1}, "unknown field `sed`")
        assert data["field"] == "sed", data
        assert version_files(ws) == before
        ok(f"malformed requests refused: {missing.splitlines()[0]}")
        text, data = await tool_error(session, "read_version", {"version": "v999"}, "no version `v999`", "v001")
        assert data["field"] == "version", data
        ok(f"unknown version refused: {text.splitlines()[0]}")

        # Still serving.
        listed, _ = await call(session, "list_versions")
        assert [v["id"] for v in listed["versions"]] == ["v001", "v002", "v003", new], listed["versions"]
        again, _ = await call(session, "read_version", {"version": new})
        assert again["source"] == source and again["status"] == "proposed"
        ok("still serving after the errors")
    print(f"mcp client: {steps} steps passed", flush=True)


async def bounded(rung, ws):
    with anyio.fail_after(float(os.environ.get("MCP_CLIENT_TIMEOUT", "300"))):
        await main(rung, ws)


if __name__ == "__main__":
    anyio.run(bounded, sys.argv[1], Path(sys.argv[2]).resolve())
