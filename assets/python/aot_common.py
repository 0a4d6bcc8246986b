"""Helpers shared by rung's ahead-of-time compile scripts (triton_aot.py, cute_aot.py): finding
the user's frame in a traceback, exception chains, the one JSON reply, capturing the compiler's
output, importing the version file, the compiler's modules imported at first use, finding and
running a tool, the files each kernel leaves (its folder, its SASS), the command line, the
guesses from a parameter's name, and the supervisor that turns a compiler crash into one JSON
reply. rung writes this file beside the script it runs."""

import argparse
import glob
import importlib
import importlib.util
import json
import os
import re
import signal
import site
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


# --------------------------------------------------------------------------- names, tools, the command line

# A parameter's name says what it likely is when nothing else does.
INT_PREFIXES = ("stride", "n_", "num_", "len", "offset", "off_", "seq", "max_seqlen", "start", "end")
FLOAT_NAMES = {"eps", "epsilon", "scale", "alpha", "beta", "sm_scale", "softmax_scale",
               "temperature", "momentum", "p_drop", "dropout_p", "negative_slope", "slope",
               "min_val", "max_val", "lr", "weight_decay", "inv_scale"}

# A compiler's `file:line:col: error: message` line.
DIAG_RE = re.compile(r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning|note|remark): ?(?P<msg>.*)$",
                     re.MULTILINE)


class Lazy(object):
    """A module imported at its first use (`triton = Lazy("triton")`): the supervisor, which only
    starts the compiling process, never imports the compiler, and no module has to be handed it."""

    def __init__(self, name):
        self.__dict__["_name"] = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(self.__dict__["_name"]), attr)


def tool_dirs():
    """Where a CUDA tool may be, in order: CUTE_AOT_CUDA_BIN, beside the ptxas rung chose
    (TRITON_PTXAS_PATH), CUDA_HOME/bin, PATH, this Python's nvidia-* wheels, rung's own
    environment, /usr/local/cuda/bin."""
    dirs = []
    if os.environ.get("CUTE_AOT_CUDA_BIN"):
        dirs.append(os.environ["CUTE_AOT_CUDA_BIN"])
    for k in ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH"):
        if os.environ.get(k):
            dirs.append(os.path.dirname(os.environ[k]))
    for k in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(k):
            dirs.append(os.path.join(os.environ[k], "bin"))
    dirs.extend(os.environ.get("PATH", "").split(os.pathsep))
    sps = []
    try:
        sps.extend(site.getsitepackages())
    except Exception:
        pass
    sps.append(os.path.join(sys.prefix, "lib", "python%d.%d" % sys.version_info[:2], "site-packages"))
    for sp in sps:
        for sub in ("cu13", "cuda_nvcc", "cuda_nvdisasm", "cuda_cuobjdump", "cu12"):
            dirs.append(os.path.join(sp, "nvidia", sub, "bin"))
    dirs.extend(sorted(glob.glob(os.path.expanduser("~/.cache/rung/env/lib/python3*/site-packages/nvidia/cu13/bin"))))
    dirs.append("/usr/local/cuda/bin")
    return [d for d in dirs if d]


def find_tool(name, env_var=None, also=()):
    """The CUDA tool `name`: the path in `env_var` when set, else the first executable in
    tool_dirs() and then `also`."""
    env = os.environ.get(env_var) if env_var else None
    for c in ([env] if env else []) + [os.path.join(d, name) for d in tool_dirs() + list(also)]:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def parse_arch(s):
    """A compute capability as `--arch` takes it (80, 90a, sm_90a, compute_100a) -> (90, "a")."""
    m = re.match(r"^(?:sm_?|compute_?)?(\d{2,3})([af]?)$", str(s).strip().lower())
    if not m or not 70 <= int(m.group(1)) < 200:
        raise ValueError("bad --arch %r (want a compute capability such as 80, 90, 90a, sm_90a, 100a)" % s)
    return int(m.group(1)), m.group(2)


def parse_cli(ap, argv, out, result, script):
    """The script's arguments (`ap` holds its own; --version-file, --arch and --out are added
    here), with every usage error ending in the one JSON reply (exit 2): the
    hidden `--_result` (where a worker writes its reply) is read before parsing, so even a bad
    command line reaches the supervisor. Adds the hidden `--_result` and `--_skip` (kernels that
    crashed an earlier worker), and sets result's "version_file" and "out"."""
    ap.add_argument("--version-file", required=True)
    ap.add_argument("--arch", required=True, help="compute capability: 80, 90, 90a, sm_90a, 100a ...")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--_result", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_skip", action="append", default=[], help=argparse.SUPPRESS)
    usage_error = []
    ap.error = lambda msg: (usage_error.append(msg), sys.exit(2))
    raw = list(sys.argv[1:] if argv is None else argv)
    for i, a in enumerate(raw):
        if a == "--_result" and i + 1 < len(raw):
            out.result_path = raw[i + 1]
        elif a.startswith("--_result="):
            out.result_path = a.split("=", 1)[1]
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        if e.code in (0, None):
            sys.exit(0)  # --help
        msg = usage_error[0] if usage_error else "bad command line"
        sys.stderr.write(ap.format_usage() + "%s: error: %s\n" % (script, msg))
        result["errors"].append({"kernel": None, "type": "UsageError", "message": msg,
                                 "traceback": None, "lineno": None})
        out.emit(result, 2)
    out.result_path = args._result or out.result_path
    result["version_file"], result["out"] = os.path.abspath(args.version_file), os.path.abspath(args.out)
    return args


# --------------------------------------------------------------------------- a kernel's files


def clean_kernel_dir(kdir, stem):
    """Removes what an earlier run left for this kernel (so a failed build leaves no stale IR)."""
    if not os.path.isdir(kdir):
        return
    for f in os.listdir(kdir):
        if f == "meta.json" or f.startswith(stem + "."):
            try:
                os.remove(os.path.join(kdir, f))
            except OSError:
                pass


def write_file(path, data):
    """Writes text or bytes; returns the absolute path."""
    with open(path, "wb" if isinstance(data, (bytes, bytearray)) else "w") as f:
        f.write(data)
    return os.path.abspath(path)


def write_meta(entry, kdir, extra, default):
    """Writes <kdir>/meta.json, the kernel's entry with `extra` over it (the compiler's version
    and metadata, the tools), JSON-encoded with `default`; names it in the entry's files."""
    meta = dict(entry)
    meta.update(extra)
    fp = os.path.join(kdir, "meta.json")
    with open(fp, "w") as f:
        json.dump(meta, f, indent=2, default=default)
    entry["files"]["meta"] = os.path.abspath(fp)


def write_sass(tools, cubin_path, kdir, stem, notes):
    """<stem>.sass from the cubin: nvdisasm -c -g (with the version file's line info), else
    cuobjdump --dump-sass. Returns (path or None, the tool used or None); says why in `notes`."""
    rc, text, used = -1, None, None
    if tools.get("nvdisasm"):
        rc, text = run_tool([tools["nvdisasm"], "-c", "-g", cubin_path], merge=False)
        used = "nvdisasm -c -g"
    if (rc != 0 or not text) and tools.get("cuobjdump"):
        rc, text = run_tool([tools["cuobjdump"], "--dump-sass", cubin_path], merge=False)
        used = "cuobjdump --dump-sass"
    if rc == 0 and text:
        return write_file(os.path.join(kdir, "%s.sass" % stem), text), used
    notes.append("no SASS: nvdisasm/cuobjdump not found or failed")
    return None, None


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
