"""rung's Python worker: executes, never judges.

rung (Rust) owns the inputs, the poisoning, the hashing, the metrics and the verdicts. This
process only calls functions: a version's `run(...)`, a problem's `reference(...)`, a GPU MODE
`custom_kernel` or a KernelBench `ModelNew`, with tensors that live in files rung wrote.

It is a zygote. The parent imports numpy, Triton and torch once, without touching CUDA, and
forks a child per check ({"op": "fork"}); the child serves that check's requests until
{"op": "exit"}, then ends, so nothing a version memoised survives into the next check and a
crash or a sticky CUDA error ends only the child. When a child dies the parent says so in one
line ({"ok": false, "error": {"type": "WorkerDied", ...}}).

The messages are defined in Rust (src/model/protocol.rs) and described by schema/worker.schema.json;
the first line out is the handshake. Lines are read a byte at a time so that no process reads
ahead into a line meant for another (parent and child share standard input). Standard output
carries the protocol only: anything a version prints goes to standard error.

Under a profiler or sanitizer (RUNG_WORKER_NO_FORK=1, which `rung profile` sets) the zygote
does not fork: it serves its first fork's requests itself and ends with them. Nsight Compute
attaches to processes that are started, not forked: a forked child inherits the injected
library's state but none of its threads, and on an H100 its first profiled call waited on a
lock for good.
"""

import importlib
import importlib.util
import json
import os
import signal
import sys
import time

import rung_judge
import rung_launched
import rung_problem as rp
import rung_sandbox
import rung_warm
# The host side of a call (rung_host.py) and the timing (rung_bench.py), written beside this file.
from rung_host import Guarded, HostGuarded, HostTensor, _error, _load, _map, _modules, _np
from rung_host import _sync_and_pending
from rung_bench import _bench_req, _ceiling, _note_l2_baseline, _problem_modules, _seeded_model

# A workspace's own modules (`import task`) from its root, which the sandbox lets be read, not
# listed.
rung_sandbox.find_unlisted()

PROTOCOL = 2

_proto = None  # the protocol's stream (the original standard output)


_token = None  # a forked child's token (the fork request's), on each of its answers


def _send(obj):
    if _token is not None and "id" in obj:
        obj = dict(obj, token=_token)
    _proto.write(json.dumps(obj) + "\n")
    _proto.flush()


def _readline():
    """One line from standard input, read a byte at a time (no read-ahead)."""
    buf = bytearray()
    while True:
        b = os.read(0, 1)
        if not b:
            return None if not buf else buf.decode()
        if b == b"\n":
            return buf.decode()
        buf += b


# ---------------------------------------------------------------------------------------------
# Requests


def _call(req, state):
    np = _np()
    mode = req.get("mode", "interpret")
    collect = None
    if req.get("trace"):
        # `rung trace`: the buffer first, so the version's kernels compile with their markers.
        # The markers' module rung named for the version's kind (rung_trace: Triton's).
        collect = importlib.import_module(req["trace"].get("markers") or "rung_trace").arm(req["trace"])
    t_import = time.perf_counter()
    module = _load(req["file"])
    phases = {"import": time.perf_counter() - t_import} if req["file"] not in state["imported"] else {}
    state["imported"].add(req["file"])
    fn = getattr(module, req["function"], None)
    if fn is None:
        raise AttributeError("%s defines no %s()" % (req["file"], req["function"]))
    kwargs = {}
    host = {}
    guarded = {}
    guard = int(req.get("guard_bytes") or 0)
    for name, arg in req.get("args", {}).items():
        if "tensor" in arg:
            t = arg["tensor"]
            if mode == "cuda":
                g = Guarded(t["path"], t["dtype"], t["shape"], guard)
                guarded[name] = g
                kwargs[name] = g.tensor
            elif mode == "interpret" and guard:
                g = HostGuarded(t["path"], t["dtype"], t["shape"], guard)
                guarded[name] = g
                kwargs[name] = HostTensor(g.arr, t["dtype"])
            else:
                arr = _map(t, "r+")
                host[name] = arr
                kwargs[name] = arr if mode == "reference" else HostTensor(arr, t["dtype"])
        else:
            kwargs[name] = arg["value"]
    if mode == "cuda":
        import torch
        torch.cuda.synchronize()
    threads = rp.threads_now()
    t0 = time.perf_counter()
    result = fn(**kwargs)
    resp = {}
    if mode == "cuda":
        resp["pending_ms"] = _sync_and_pending()
    seconds = time.perf_counter() - t0
    if collect is not None:
        resp.update(collect())
    late = rp.late_threads(threads)
    if late:
        raise rp.LateWork("%s() returned while a thread it started was still running (%s): its time leaves that "
                          "work out, and its outputs could change after rung read them" % (req["function"], "; ".join(late[:3])))
    guards = []
    for name, g in guarded.items():
        breach = g.write_back()
        if breach:
            breach["name"] = name
            guards.append(breach)
    if guards:
        resp["guards"] = guards
    if mode == "cuda":
        kernels = rung_launched.captured(os.path.join(state["dir"], "launched"))
        if kernels:
            resp["kernels"] = kernels
    returns = req.get("returns") or {}
    if returns:
        names = list(returns)
        if isinstance(result, dict):
            values = [result[n] for n in names]
        elif isinstance(result, (tuple, list)) and len(names) > 1:
            values = list(result)
        else:
            values = [result]
        if len(values) != len(names):
            raise ValueError("reference() returned %d outputs, rung.toml declares %d (%s)" % (len(values), len(names), ", ".join(names)))
        for name, value in zip(names, values):
            spec = returns[name]
            if hasattr(value, "detach"):
                value = value.detach().cpu().numpy()
            arr = np.asarray(value)
            if tuple(arr.shape) != tuple(spec["shape"]) and arr.size == int(np.prod(spec["shape"])):
                arr = arr.reshape(spec["shape"])
            if tuple(arr.shape) != tuple(spec["shape"]):
                raise ValueError("reference() returned %s with shape %s; rung.toml says %s" % (name, list(arr.shape), spec["shape"]))
            out = _map(spec, "w+")
            out[...] = arr.astype(out.dtype)
            out.flush()
    for arr in host.values():
        arr.flush()
    resp["seconds"] = seconds
    if phases:
        resp["phases"] = phases
    return resp


def _user_rungs(req):
    """Runs every @rung("name") function of the user's checks.py on one size's buffers. Each is
    its own result: ok, or the error with its traceback. The functions get numpy arrays by name
    (inputs, outputs) and the size variables."""
    import types
    registry = []

    def rung(name):
        def register(fn):
            registry.append((name, fn))
            return fn
        return register

    shim = types.ModuleType("rung")
    shim.rung = rung
    sys.modules["rung"] = shim
    path = os.path.abspath(req["file"])
    spec = importlib.util.spec_from_file_location("rung_user_checks_%d" % len(_modules), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    arrays = {}
    for group in ("inputs", "outputs"):
        arrays[group] = {name: _map(t, "r") for name, t in req[group].items()}
    results = []
    for name, fn in registry:
        try:
            fn(arrays["inputs"], arrays["outputs"], dict(req["sizes"]))
            results.append({"name": name, "ok": True})
        except BaseException as exc:  # the user's assertion is the verdict
            err = _error(exc, req["file"])
            r = {"name": name, "ok": False, "error": err["message"], "traceback": err["traceback"]}
            if err.get("lineno"):
                r["lineno"] = err["lineno"]
            results.append(r)
    return {"rungs": results}


# ---------------------------------------------------------------------------------------------
# GPU MODE and KernelBench problems


def _problem(req, state):
    """One test of a GPU MODE or KernelBench problem: with `warmup`, the version's compile phase
    (one unjudged call); otherwise one judged case per seed (rung_problem.py)."""
    import torch
    device = "cuda" if state["mode"] == "cuda" else "cpu"
    seeds = [int(s) for s in (req.get("seeds") or [req["seed"]])]
    phases = {}
    t = time.perf_counter()
    prob, version = _problem_modules(req["problem"], req["version"], req["format"], device)
    phases["import"] = time.perf_counter() - t
    args = dict(req.get("args") or {})
    gm = req["format"] == "gpu-mode"

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    with torch.no_grad():
        if not gm:
            torch.manual_seed(seeds[0])
            with rp.problem_code("get_init_inputs()", device), torch.device(device):
                init = prob.get_init_inputs()
            if "model_new" not in state:
                state["model_new"] = _seeded_model(version.ModelNew, init, seeds[0], device)
            model_new = state["model_new"]
        if req.get("warmup"):
            # The compile phase: the version's first call (load_inline, torch.compile and
            # Triton compile here), then, for a version that declares Triton kernels, a second
            # whose launches are listed. The reference does not run here: the judge's process
            # learns what it writes.
            t = time.perf_counter()
            # Its inputs are drawn under a seed of their own (seeds[-1]), so nothing it leaves
            # behind, freed memory included, holds a judged case's answer.
            lap = [t]

            def mark(name):
                # Where the compile phase's time goes: warmup_inputs, warmup_call (the version's
                # first call), warmup_listing.
                sync()
                now = time.perf_counter()
                phases["warmup_" + name] = now - lap[0]
                lap[0] = now

            names = gpu_names = None
            gpu = device == "cuda" and bool(req.get("list_gpu_kernels"))
            listing = device == "cuda" and (req.get("list_kernels") or gpu)
            if gm:
                data = rp.gpu_mode_draw(prob, args, seeds[-1], device)()
                mark("inputs")
                version.custom_kernel(rp.clone(data) if listing else data)
                mark("call")
                if listing:
                    names, gpu_names = rung_launched.kernel_launches(lambda: version.custom_kernel(data), gpu)
                    mark("listing")
                del data
            else:
                inputs = rp.kernelbench_inputs(prob, seeds[-1], device)
                mark("inputs")
                model_new(*inputs)
                mark("call")
                if listing:
                    names, gpu_names = rung_launched.kernel_launches(lambda: model_new(*inputs), gpu)
                    mark("listing")
                del inputs
            sync()
            rp.give_back(device)
            phases["warmup"] = time.perf_counter() - t
            out = {"args": args, "cases": []}
            if names is not None and req.get("list_kernels"):
                out["launched"] = names
            if gpu_names is not None:
                out["launched_gpu"] = gpu_names
            patched = rp.patched_timers()
            if patched:
                out["patched"] = patched
            harness = rp.patched_harness()
            if harness:
                out["harness"] = harness
            return {"seconds": phases["warmup"], "phases": phases, "problem": out}
        # A judged test: what the version's process saw, written for the judge's process.
        hints = req.get("hints") or {}
        dump = req.get("dump")
        if not dump:
            raise ValueError("a judged test needs its `dump` folder")
        observed = []
        # The sparse probe's request (a check's last) is one call on the first draw, moved.
        sparse = hints.get("sparse") if req.get("sparse_call") else None
        if req.get("sparse_call") and not sparse:
            raise ValueError("a sparse probe's call needs the judge's `sparse` hint")
        for k, (seed, moved) in enumerate([(seeds[0], sparse)] if sparse else [(s, None) for s in seeds]):
            folder = os.path.join(dump, "case-%d" % k)
            os.makedirs(folder, exist_ok=True)
            if gm:
                observe = rp.observe_gpu_mode
                call = (prob, version, args, seed, rp.POISONS[k % 2], hints, state.setdefault("late_slots", set()),
                        device, folder)
                more = {"no_tf32": bool(req.get("no_tf32")), "sparse": moved}
            else:
                observe = rp.observe_kernelbench
                call = (prob, model_new, seed, device, set(hints.get("regenerable", ())), folder)
                more = {"sparse": moved, "inout": set(hints.get("inout_slots", ()))}
            rec = rp.observe_probe(observe, seed, *call, **more) if moved else observe(*call, **more)
            rec.pop("_files", None)
            observed.append(rec)
        if sparse is None or not observed[0].get("probe_raised"):
            rp.give_back(device)  # after a raise on the probe's draw the context may be broken
    for c in observed:
        for k, v in c.pop("phases").items():
            phases[k] = phases.get(k, 0.0) + v
    resp = {"seconds": sum(c["seconds"] for c in observed), "phases": phases,
            "problem": {"args": args, "cases": [], "observed": observed}}
    if device == "cuda":
        kernels = rung_launched.captured(os.path.join(state["dir"], "launched"))
        if kernels:
            resp["kernels"] = kernels
    return resp


# ---------------------------------------------------------------------------------------------
# The child: one check


_done_fd = None  # the child's end of the pipe that tells the zygote an exit was asked for


def _leave():
    """The child's one way out when rung asked it to (or rung is gone): it tells the zygote
    first, so that any other ending, a version's os._exit(0) included, is reported at once."""
    try:
        if _done_fd is not None:
            os.write(_done_fd, b"x")
    except OSError:
        pass
    os._exit(0)


def _serve_child(fork_req, t_fork, gate):
    global _token
    _token = fork_req.get("token")
    mode = fork_req.get("mode", "interpret")
    state = {"mode": mode, "imported": set(), "dir": os.environ.get("RUNG_WORKER_DIR", "/tmp")}
    phases = {"fork": time.perf_counter() - t_fork}
    if mode == "cuda":
        t = time.perf_counter()
        try:
            import torch
            torch.cuda.init()
            torch.empty(1, device="cuda")
            torch.cuda.synchronize()
        except BaseException as exc:
            _send({"id": fork_req.get("id"), "ok": False, "error": _error(exc, None)})
            os._exit(3)
        phases["cuda_init"] = time.perf_counter() - t
        _note_l2_baseline()
        rung_launched.hook_triton()
        rung_launched.hook_dsls()
    if gate is not None:
        # The prewarm's time and how many of its children were killed, when it is done.
        text = b""
        while True:
            chunk = os.read(gate, 64)
            if not chunk:
                break
            text += chunk
        os.close(gate)
        parts = text.decode().split()
        if len(parts) == 2:
            phases["prewarm"] = float(parts[0])
            if int(parts[1]):
                phases["prewarm_killed"] = float(parts[1])
    _send({"id": fork_req.get("id"), "ok": True, "pid": os.getpid(), "phases": phases})
    while True:
        line = _readline()
        if line is None:
            _leave()
        if not line.strip():
            continue
        req = json.loads(line)
        op = req.get("op")
        if op == "exit":
            _send({"id": req.get("id"), "ok": True})
            _leave()
        try:
            resp = {"id": req.get("id"), "ok": True}
            if op == "checks":
                resp.update(_user_rungs(req))
            elif op == "call":
                resp.update(_call(req, state))
            elif op == "problem":
                resp.update(_problem(req, state))
            elif op == "judge":
                resp.update(rung_judge.judge(req, state))
            elif op == "bench":
                resp.update(_bench_req(req, state))
            elif op == "ceiling":
                resp.update(_ceiling(req))
            else:
                raise ValueError("unknown op %r" % op)
        except BaseException as exc:  # the verdict is rung's to give
            file = req.get("file") or req.get("version")
            resp = {"id": req.get("id"), "ok": False, "error": _error(exc, file)}
        _send(resp)


def _prewarm_start(req):
    """Starts the fork's prewarm calls at once, each in its own child that exits without a word,
    so Triton compiles every specialisation in parallel into the cache the check's child then
    reads. With `prewarm_arch` a child compiles for that GPU without opening it (run() with fake
    tensors, triton_capture.warm_cache); otherwise it opens the GPU and calls run(). Returns what
    _prewarm_wait needs, or None when there is nothing to do."""
    calls = req.get("prewarm") or []
    if not calls:
        return None
    arch = req.get("prewarm_arch")
    limit = float(req.get("prewarm_seconds") or 30.0)
    t0 = time.perf_counter()
    pids = []
    for call in calls:
        pid = os.fork()
        if pid == 0:
            _own_group()
            try:
                if arch:
                    # The capture's own time limit is past the zygote's, which kills the child:
                    # a run() that never returns is then reported as the time-out it is.
                    os.environ["RUNG_CAPTURE_SECONDS"] = str(int(limit) + 30)
                    here = os.path.dirname(os.path.abspath(__file__))
                    if here not in sys.path:
                        sys.path.insert(0, here)
                    import triton_capture
                    args = {k: ({"tensor": {"dtype": v["tensor"]["dtype"], "shape": v["tensor"]["shape"]}}
                                if "tensor" in v else v) for k, v in (call.get("args") or {}).items()}
                    triton_capture.warm_cache(call["file"], {"args": args}, int(arch))
                else:
                    import torch
                    torch.cuda.init()
                    _call(call, {"mode": "cuda", "imported": set(),
                                 "dir": os.environ.get("RUNG_WORKER_DIR", "/tmp")})
                    torch.cuda.synchronize()
            except BaseException as exc:
                sys.stderr.write("rung prewarm: %s: %s\n" % (type(exc).__name__, exc))
            sys.stderr.flush()
            os._exit(0)
        _own_group(pid)
        pids.append(pid)
    return pids, t0, limit


# The process groups of the zygote's live children (each leads its own), killed if the zygote
# itself ends (a Ctrl-C at rung's terminal reaches the zygote, not them).
_GROUPS = set()


def _own_group(pid=0):
    """Makes the child (pid 0: this process) the leader of its own process group, so that what
    the version starts is killed with it. Both sides call it, so the group exists before
    either goes on. In the child, SIGTERM goes back to its default (the zygote's handler is
    the zygote's), and the child dies with the zygote: out of the zygote's group, it would no
    longer get what is sent to that group (the SSH runner's SIGTERM to the remote check)."""
    if pid:
        _GROUPS.add(pid)
    else:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        zygote = os.getppid()
        try:
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        if os.getppid() != zygote:  # the zygote died before the line above
            os._exit(1)
        rung_sandbox.seal_proc()
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # the child has already exited: nothing to group


def _terminated(signum, frame):
    """SIGTERM ends the zygote through its `finally`, which kills its children's groups."""
    raise SystemExit(128 + signum)


def _kill_group(pid):
    """Kills every process left in the group a child led."""
    _GROUPS.discard(pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass  # nothing left in it


def _prewarm_wait(pids, t0, limit):
    """Waits for the prewarm children; those still running at the limit are killed. Returns the
    seconds it took and how many were killed."""
    deadline = t0 + limit
    killed = 0
    while pids:
        for pid in list(pids):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                pids.remove(pid)
                _kill_group(pid)
        if pids and time.perf_counter() > deadline:
            for pid in pids:
                _kill_group(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            for pid in pids:
                os.waitpid(pid, 0)
            killed = len(pids)
            break
        if pids:
            time.sleep(0.002)
    return time.perf_counter() - t0, killed


def _death(status):
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "signal %d" % sig
        return "the child running the check was killed by %s" % name
    return ("the process running the check exited with status %d before it answered "
            "(the version, or something it called, ended it)" % os.WEXITSTATUS(status))


def main():
    signal.signal(signal.SIGTERM, _terminated)
    try:
        _serve()
    finally:
        for pid in list(_GROUPS):
            _kill_group(pid)


def _serve():
    global _proto
    t_start = time.perf_counter()
    # The protocol keeps the real standard output; prints go to standard error.
    _proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    interpret = "--interpret" in sys.argv
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    # A reference zygote (--reference) runs only the problem's own code: numpy is what a
    # rung.toml reference takes; torch or triton, if it imports them, load in its child.
    reference = "--reference" in sys.argv
    packages = {}
    # A reference or checks.py that imports torch: imported here once, not in every check's child
    # (RUNG_REFERENCE_IMPORTS; CUDA is left alone, as in every zygote).
    wanted = ("numpy",) + tuple(filter(None, os.environ.get("RUNG_REFERENCE_IMPORTS", "").split(",")))
    # How long each step of the start took, by name: the hello carries them (`warmed`), and a
    # check that waited for this zygote reports them.
    took = {}
    key = None
    for mod in wanted if reference else ("numpy", "triton", "torch"):
        t = time.perf_counter()
        try:
            packages[mod] = str(__import__(mod).__version__)
            took["import " + mod] = time.perf_counter() - t
        except Exception:
            continue
        if mod == "triton" and not interpret:
            # Hashing Triton for its cache key overlaps torch's import (rung_warm.TritonKey).
            key = rung_warm.start_triton_key()
    if "torch" in packages:
        t = time.perf_counter()
        rung_warm.preimport(_proto)
        rp.save_timers()
        rp.watch_torch()
        took["preimport"] = time.perf_counter() - t
    warmed = rung_warm.warm_triton(_proto, key) if "triton" in packages and not interpret and not reference else {}
    warmed.update(took)
    caps = ["call", "checks", "fork"]
    if "triton" in packages:
        caps.append("triton-interpret")
    if "torch" in packages:
        caps.append("problems")
        if not interpret:
            caps.append("cuda")
    _send({"protocol": PROTOCOL, "worker": "python", "pid": os.getpid(), "capabilities": caps,
           "python": sys.version.split()[0], "packages": packages, "warmed": warmed,
           "start_seconds": time.perf_counter() - t_start})
    while True:
        line = _readline()
        if line is None:
            break
        if not line.strip():
            continue
        req = json.loads(line)
        op = req.get("op")
        if op == "exit":
            break
        if op != "fork":
            _send({"id": req.get("id"), "ok": False,
                   "error": {"type": "BadRequest", "message": "the zygote takes fork and exit; %r needs a fork first" % op}})
            continue
        t_fork = time.perf_counter()
        _proto.flush()
        sys.stderr.flush()
        if os.environ.get("RUNG_WORKER_NO_FORK") == "1":
            # This process is the child: nothing is prewarmed (that forks too), and its exit
            # (_leave) ends the zygote.
            _serve_child(req, t_fork, None)
        prewarm = _prewarm_start(req)
        # Prewarm children that open the GPU: the check's child is forked after them, since
        # opening the GPU while six processes do so at once took 0.68 s instead of 0.14 s on the
        # H200 and slowed the compiles too. Children that compile without the GPU: it is forked
        # at once and opens the GPU alone while they compile, then waits at the gate.
        compile_only = bool(prewarm and req.get("prewarm_arch"))
        gate = None
        if prewarm and not compile_only:
            seconds, killed = _prewarm_wait(*prewarm)
            gate = os.pipe()
            os.write(gate[1], ("%f %d\n" % (seconds, killed)).encode())
            os.close(gate[1])
            t_fork = time.perf_counter()
        elif compile_only:
            gate = os.pipe()
        done = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                # Its own process group: whatever the version starts is killed with it.
                _own_group()
                global _done_fd
                os.close(done[0])
                _done_fd = done[1]
                if compile_only:
                    os.close(gate[1])
                _serve_child(req, t_fork, gate[0] if gate else None)
            finally:
                os._exit(4)
        os.close(done[1])
        if gate:
            os.close(gate[0])
        if compile_only:
            seconds, killed = _prewarm_wait(*prewarm)
            try:
                os.write(gate[1], ("%f %d\n" % (seconds, killed)).encode())
            except OSError:
                pass  # the child is gone: waitpid below reports it
            os.close(gate[1])
        _own_group(pid)
        _, status = os.waitpid(pid, 0)
        # What the version left running in its group (a process it started and did not wait
        # for) goes with it.
        _kill_group(pid)
        # Non-blocking: anything the version forked may still hold the write end.
        os.set_blocking(done[0], False)
        try:
            asked = os.read(done[0], 1) == b"x"
        except BlockingIOError:
            asked = False
        os.close(done[0])
        # Asked to exit, or 3: it already said why it could not start. Anything else (a signal,
        # an abort, a version's own exit) is reported at once, with its status.
        if not ((asked and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0)
                or (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3)):
            _send({"ok": False, "error": {"type": "WorkerDied", "message": _death(status)}})


if __name__ == "__main__":
    main()
