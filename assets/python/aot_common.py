"""Helpers shared by rung's ahead-of-time compile scripts (triton_aot.py, cute_aot.py): finding
the user's frame in a traceback, exception chains, mapping a PTX line back to its source through
the PTX's `.loc` directives, the one JSON reply, capturing the compiler's output, importing
the version file, running a tool, the guesses from a parameter's name, and the supervisor that
turns a compiler crash into one JSON reply. rung writes this file beside the script it runs."""

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
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


# --------------------------------------------------------------------------- the JSON reply

MAX_LOG_CHARS = 20000


class JsonOut(object):
    """The script's one JSON object on stdout. Made at import, before anything can print: from
    then on fd 1 (print() in the compiler, C++ diagnostics, the version module) goes to stderr,
    and the object is written to the saved stdout. In the worker process (`--_result PATH`,
    `result_path`) it goes to that file instead, with "done": true, and `progress` records there
    what is being compiled, so the supervisor can name what crashed."""

    def __init__(self, default):
        sys.stdout.flush()
        self.fd = os.dup(1)
        os.dup2(2, 1)
        self.default = default
        self.result_path = None

    def write_file(self, path, obj):
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(obj, f, default=self.default)
        os.replace(tmp, path)

    def emit(self, obj, code):
        sys.stdout.flush()
        sys.stderr.flush()
        if self.result_path:
            obj = dict(obj)
            obj["done"] = True
            obj["exit_code"] = code
            self.write_file(self.result_path, obj)
            sys.exit(code)
        data = (json.dumps(obj, indent=2, default=self.default) + "\n").encode("utf-8")
        with os.fdopen(self.fd, "wb") as f:  # buffered write: no short writes on pipes
            f.write(data)
        sys.exit(code)

    def progress(self, obj, current):
        if self.result_path:
            obj = dict(obj)
            obj["current"] = current
            self.write_file(self.result_path, obj)


def tail(text, limit=MAX_LOG_CHARS):
    if text is None:
        return None
    return text if len(text) <= limit else "...[truncated]...\n" + text[-limit:]


_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text):
    """Text without terminal colour codes (the compilers colour their diagnostics)."""
    return _ANSI_RE.sub("", text) if isinstance(text, str) else text


def format_exc(e):
    return strip_ansi("".join(traceback.format_exception(type(e), e, e.__traceback__)))


# --------------------------------------------------------------------------- capture

# Output captured during the most recent Capture block (read after a failed compile).
LAST_LOG = [""]


class Capture(object):
    """Redirect fd 1 and 2 into a temp file; echo it to stderr afterwards."""

    def __init__(self):
        self.text = ""

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self._tmp = tempfile.TemporaryFile(mode="w+b")
        self._saved = (os.dup(1), os.dup(2))
        os.dup2(self._tmp.fileno(), 1)
        os.dup2(self._tmp.fileno(), 2)
        return self

    def __exit__(self, *exc):
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os.dup2(self._saved[0], 1)
            os.dup2(self._saved[1], 2)
            os.close(self._saved[0])
            os.close(self._saved[1])
        self._tmp.seek(0)
        self.text = strip_ansi(self._tmp.read().decode("utf-8", "replace"))
        self._tmp.close()
        LAST_LOG[0] = self.text
        if self.text:
            sys.stderr.write(self.text)
            sys.stderr.flush()
        return False


# --------------------------------------------------------------------------- the version file


def import_version(path):
    """Import the version file; returns (module, None) or (None, error dict)."""
    modname = "rung_version_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    vdir = os.path.dirname(os.path.abspath(path))
    if vdir not in sys.path:
        sys.path.insert(0, vdir)
    try:
        spec = importlib.util.spec_from_file_location(modname, path)
        if spec is None or spec.loader is None:
            raise ImportError("cannot load %s as a Python module" % path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[modname] = mod
        spec.loader.exec_module(mod)
        return mod, None
    except SyntaxError as e:
        sys.modules.pop(modname, None)
        return None, {
            "kernel": None, "type": "SyntaxError", "exception": type(e).__name__,
            "message": "%s: %s" % (type(e).__name__, e.msg),
            "traceback": format_exc(e),
            "file": e.filename, "lineno": e.lineno, "col": e.offset,
            "text": (e.text or "").rstrip("\n") or None,
            "in_version_file": bool(e.filename) and _same_file(e.filename, path),
        }
    except BaseException as e:  # noqa: B902 - report anything raised at import time
        sys.modules.pop(modname, None)
        if isinstance(e, KeyboardInterrupt):
            raise
        fs = _last_frame_in(e.__traceback__, path)
        return None, {
            "kernel": None,
            "type": "ImportError" if isinstance(e, ImportError) else type(e).__name__,
            "exception": type(e).__name__,
            "message": strip_ansi("%s: %s" % (type(e).__name__, e)),
            "traceback": format_exc(e),
            "file": fs.filename if fs else None,
            "lineno": fs.lineno if fs else None,
            "text": fs.line if fs else None,
            "in_version_file": fs is not None,
        }


# --------------------------------------------------------------------------- names and tools

# A parameter's name says what it likely is when nothing else does.
INT_PREFIXES = ("stride", "n_", "num_", "len", "offset", "off_", "seq", "max_seqlen", "start", "end")
FLOAT_NAMES = {"eps", "epsilon", "scale", "alpha", "beta", "sm_scale", "softmax_scale",
               "temperature", "momentum", "p_drop", "dropout_p", "negative_slope", "slope",
               "min_val", "max_val", "lr", "weight_decay", "inv_scale"}

# A compiler's `file:line:col: error: message` line.
DIAG_RE = re.compile(r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning|note|remark): ?(?P<msg>.*)$",
                     re.MULTILINE)

def run_tool(cmd, timeout=300, merge=True):
    """(status, output) of a tool; with merge=False its stderr goes to ours rather than into the
    output. A tool that cannot start or overruns is status -1 with the reason."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge else subprocess.PIPE,
                           timeout=timeout)
        out = p.stdout.decode("utf-8", "replace")
        if not merge and p.stderr:
            sys.stderr.write(p.stderr.decode("utf-8", "replace"))
        return p.returncode, out
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, str(e)


def load_sig_json(v, what):
    """--signature-json: inline JSON or a file holding it, an object of `what` name -> spec."""
    if v is None:
        return {}
    text = v
    if not v.lstrip().startswith("{") and os.path.isfile(v):
        with open(v) as f:
            text = f.read()
    obj = json.loads(text)
    if not isinstance(obj, dict):
        raise ValueError("--signature-json must be a JSON object: %s name -> spec" % what)
    return obj


# --------------------------------------------------------------------------- the supervisor

def supervise(script, argv, main, emit, prefix, empty_result, run_mark=None, run_crash=None, plain=None,
              no_traceback=None):
    """Runs `script`'s main() in a worker process so that a compiler crash (an abort or a segfault
    in MLIR, LLVM, NVVM or ptxas) still ends in one JSON object: the crashed kernel is reported and
    the rest are compiled by a new worker, started with `--_skip` for each that crashed.

    `empty_result` is the reply when no worker got far enough to write one. A script whose worker
    also calls the version's run() names that phase `run_mark` while it lasts: a crash there is
    passed to the next worker as `--_run_crash` (which falls back to inference and warns), with
    `run_crash` % how for its message. `plain` cleans the log's text (colour codes);
    `no_traceback` is what a crash's traceback field holds."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") or a.startswith("--_") for a in argv):
        return main(argv)
    crashed = []
    with tempfile.TemporaryDirectory(prefix=prefix) as td:
        res_path = os.path.join(td, "result.json")
        while True:
            cmd = [sys.executable, os.path.abspath(script)] + argv + ["--_result", res_path]
            for k in crashed:
                if run_mark is not None and k["kernel"] == run_mark:
                    cmd += ["--_run_crash", k["message"]]
                else:
                    cmd += ["--_skip", k["kernel"]]
            if os.path.exists(res_path):
                os.remove(res_path)
            # stream the worker's output to our stderr as it comes, keeping the tail for a crash report
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            last = b""
            while True:
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    break
                os.write(2, chunk)
                last = (last + chunk)[-4 * MAX_LOG_CHARS:]
            p.stdout.close()
            rc = p.wait()
            log = last.decode("utf-8", "replace")
            if plain is not None:
                log = plain(log)
            result = None
            if os.path.exists(res_path):
                try:
                    with open(res_path) as f:
                        result = json.load(f)
                except ValueError:
                    result = None
            if result is not None and result.get("done") and rc in (0, 1, 2):
                break
            current = (result or {}).get("current")
            if rc < 0:
                try:
                    how = "was killed by %s" % signal.Signals(-rc).name
                except (ValueError, AttributeError):
                    how = "was killed by signal %d" % -rc
            else:
                how = "exited with status %d without a result" % rc
            err = {"kernel": current, "type": "CompilerCrash",
                   "message": "the compiler process %s%s" % (how, " while compiling %s" % current if current else ""),
                   "traceback": no_traceback, "lineno": None, "log": tail(log)}
            if run_mark is not None and current == run_mark:  # the next worker falls back to inference
                err["message"] = run_crash % how
            if current is None or any(c["kernel"] == current for c in crashed) or len(crashed) >= 64:
                result = result or dict(empty_result)
                result["errors"] = list(result.get("errors", [])) + [err]
                rc = 1
                break
            crashed.append(err)
    for k in ("done", "current", "exit_code"):
        result.pop(k, None)
    crashed = [c for c in crashed if run_mark is None or c["kernel"] != run_mark]  # the worker warns of it
    if crashed:
        result["errors"] = crashed + [e for e in result.get("errors", [])
                                      if not any(e.get("kernel") == c["kernel"] and e.get("type") == "CompilerCrash"
                                                 for c in crashed)]
        rc = max(rc, 1)
    emit(result, rc)
