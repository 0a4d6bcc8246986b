"""Helpers shared by rung's ahead-of-time compile scripts (triton_aot.py, cute_aot.py): finding
the user's frame in a traceback, exception chains, and mapping a PTX line back to its source
through the PTX's `.loc` directives. rung writes this file beside the script it runs."""

import os
import re
import traceback


def _same_file(e_filename, path):
    try:
        return os.path.samefile(e_filename, path)
    except OSError:
        return os.path.abspath(e_filename) == os.path.abspath(path)


def _last_frame_in(tb, path):
    found = None
    for fs in traceback.extract_tb(tb):
        if fs.filename and _same_file(fs.filename, path):
            found = fs
    return found


def _chain(e):
    out, cur, guard = [], e, set()
    while cur is not None and id(cur) not in guard:
        guard.add(id(cur))
        out.append(cur)
        cur = cur.__cause__ or (None if cur.__suppress_context__ else cur.__context__)
    return out


def ptx_line_to_source(ptx, ptx_line):
    """(file, line, col) of the last `.loc` at or before PTX line `ptx_line` (1-based)."""
    files = {}
    for m in re.finditer(r'^\s*\.file\s+(\d+)\s+"([^"]*)"(?:\s*,\s*\d+\s*,\s*\d+)?(?:\s+"([^"]*)")?', ptx,
                         re.MULTILINE):
        files[int(m.group(1))] = os.path.join(m.group(2), m.group(3)) if m.group(3) else m.group(2)
    lines = ptx.split("\n")
    for i in range(min(ptx_line, len(lines)) - 1, -1, -1):
        m = re.match(r"\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)", lines[i])
        if m:
            return files.get(int(m.group(1))), int(m.group(2)), int(m.group(3))
    return None
