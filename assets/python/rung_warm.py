"""What the Python zygote does once before it forks, so that every child inherits it: the torch
modules a workspace's code would import on first use (RUNG_PREIMPORT), and the work Triton does
once per process at its first compile or cache lookup. Neither may open CUDA: a zygote that did
starts again without the step that did (execv, before its handshake). `proto` is the protocol's
standard output, which the restarted zygote must get back as its own."""

import os
import sys
import time

from rung_host import cuda_opened


def preimport(proto):
    """Modules torch imports on first use, imported once here for every forked child
    (RUNG_PREIMPORT: runners::preimports), before the harness's torch entries are remembered.
    A module whose import opened CUDA would leave every forked child unable to use it: the
    zygote then starts again without it (execv, before its handshake), and says so."""
    import importlib
    names = [n for n in os.environ.get("RUNG_PREIMPORT", "").split(",") if n]
    # torch._inductor asks torch.cuda.is_available() as it is imported, which calls cuInit
    # unless torch counts devices through NVML instead: set only for these imports.
    key = "PYTORCH_NVML_BASED_CUDA_CHECK"
    nvml = os.environ.get(key)
    os.environ[key] = "1"

    def restore():
        os.environ.pop(key, None)
        if nvml is not None:
            os.environ[key] = nvml
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:
            sys.stderr.write("rung: preimport %s: %s: %s\n" % (name, type(exc).__name__, exc))
        if cuda_opened():
            restore()
            sys.stderr.write("rung: preimport %s opened CUDA in the zygote; starting again without it\n" % name)
            sys.stderr.flush()
            os.environ["RUNG_PREIMPORT"] = ",".join(n for n in names if n != name)
            os.dup2(proto.fileno(), 1)  # the protocol's standard output, as this process got it
            os.execv(sys.executable, [sys.executable] + sys.argv)
    restore()


class TritonKey(object):
    """triton_key() on a thread of its own, started as soon as Triton is imported: it hashes
    Triton's sources and libtriton (hundreds of megabytes, hashlib working without the GIL), which
    then overlaps torch's import instead of following it. Joined by warm_triton before the
    zygote forks anything, so no child inherits a running thread."""

    def __init__(self):
        import threading
        self.seconds = None
        self.error = None
        self.thread = threading.Thread(target=self._run, name="rung-triton-key", daemon=True)
        self.thread.start()

    def _run(self):
        import importlib
        t = time.perf_counter()
        for name in ("triton.runtime.cache", "triton.compiler.compiler"):
            try:
                key = getattr(importlib.import_module(name), "triton_key", None)
                if callable(key):
                    key()
                    self.seconds = time.perf_counter() - t
                    return
            except Exception as exc:  # noqa: BLE001 - said, and the first compile pays instead
                self.error = "triton_key from %s: %s: %s" % (name, type(exc).__name__, exc)

    def join(self, warmed):
        t = time.perf_counter()
        self.thread.join()
        if self.seconds is not None:
            warmed["triton_key"] = self.seconds
            warmed["triton_key wait"] = time.perf_counter() - t
        elif self.error:
            sys.stderr.write("rung: %s\n" % self.error)


def start_triton_key():
    """The thread that computes triton_key(), or None where the warm-up is off."""
    if os.environ.get("RUNG_NO_TRITON_WARM") == "1":
        return None
    return TritonKey()


def warm_triton(proto, key=None):
    """What Triton computes once per process at its first compile or cache lookup, computed here
    once so that every forked child inherits it: triton_key() hashes Triton's own sources and
    libtriton (0.34 s of a 0.55 s first compile on the CPU machine), which every prewarm child
    and then the check's child paid again at its first launch; and the modules the prewarm and
    the first JIT launch import (the launch capture, Gluon's language). None of it may open
    CUDA (a zygote that did could fork no working child): if it did, the zygote starts again
    without it (RUNG_NO_TRITON_WARM). Returns the seconds each step took, by name."""
    warmed = {}
    if os.environ.get("RUNG_NO_TRITON_WARM") == "1":
        return warmed
    import importlib
    (key or TritonKey()).join(warmed)
    for name in ("triton_capture", "triton.experimental.gluon"):
        t = time.perf_counter()
        try:
            importlib.import_module(name)
            warmed[name] = time.perf_counter() - t
        except Exception:
            pass  # not in this Triton: imported by nobody, then
    if cuda_opened():
        sys.stderr.write("rung: warming Triton opened CUDA in the zygote; starting again without it\n")
        sys.stderr.flush()
        os.environ["RUNG_NO_TRITON_WARM"] = "1"
        os.dup2(proto.fileno(), 1)  # the protocol's standard output, as this process got it
        os.execv(sys.executable, [sys.executable] + sys.argv)
    return warmed
