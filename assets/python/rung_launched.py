"""The kernels a version really launched on the GPU, captured from the compiler that built them at
run time, so that the PTX, cubin and SASS rung shows are what ran:

- Triton: JITFunction.run returns the compiled kernel; its PTX and cubin are in `asm`.
- CuTe DSL: every call of a compiled function (JitCompiledFunction: `cute.compile`'s result, and
  what a direct call of a `@cute.jit` function runs) is remembered; its host module embeds the
  fatbin the driver loads (`@kernels_binary`), whose ELF entries are the cubins that ran. The
  DSL keeps no PTX unless asked to, which would switch its compile cache off: a CuTe DSL
  capture has a cubin and no PTX.
- TileLang: nvcc's cubin (and the PTX it keeps) is stored by the hash of the CUDA source
  whenever TileLang compiles one in a worker (TILELANG_CACHE_DIR/rung-cubins); a kernel its
  cache served is found again there by its source. A cache entry compiled outside rung has
  none: that kernel is not captured.

The DSLs are not imported here: their hooks go in when the version imports them (an import
hook on the modules named in _PATCHES), or at once where they are already imported.
"""

import hashlib
import importlib.abc
import os
import re
import shutil
import struct
import sys
import tempfile

_launched = []  # Triton: (kernel, grid), one per launch
_dsl = {}  # id -> (compiler, compiled function or kernel), one per object called


# ---------------------------------------------------------------------------------------------
# Triton


def hook_triton():
    """Wraps JITFunction.run so that every kernel a call launches is remembered: its PTX and
    cubin are what really ran on this GPU."""
    try:
        from triton.runtime import jit
    except Exception:
        return
    original = jit.JITFunction.run
    if getattr(original, "_rung_hooked", False):
        return

    def run(self, *args, **kwargs):
        kernel = original(self, *args, **kwargs)
        try:
            _launched.append((kernel, kwargs.get("grid")))
        except Exception:
            pass
        return kernel

    run._rung_hooked = True
    jit.JITFunction.run = run


def triton_launches(fn):
    """The names of the Triton kernels that fn() launches (the launch hook's records)."""
    import torch
    before = len(_launched)
    fn()
    torch.cuda.synchronize()
    names = []
    for kernel, _ in _launched[before:]:
        try:
            name = str(getattr(kernel, "name", None) or getattr(kernel.metadata, "name", "kernel"))
        except Exception:
            continue
        if name not in names:
            names.append(name)
    return names


def kernel_launches(fn, gpu):
    """(the Triton kernels fn() launches, by the launch hook; with `gpu`, every GPU kernel it
    launches, by torch's profiler, or None where the profiler could not run or recorded none,
    so that a listing that failed never reads as a fallback)."""
    import torch
    prof = None
    if gpu:
        try:
            from torch.profiler import ProfilerActivity, profile
            prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            prof.__enter__()
        except Exception:
            prof = None
    try:
        names = triton_launches(fn)
    finally:
        if prof is not None:
            try:
                prof.__exit__(None, None, None)
            except Exception:
                prof = None
    kernels = None
    if prof is not None:
        try:
            cuda = torch.autograd.DeviceType.CUDA
            kernels = sorted({e.name for e in prof.events() if getattr(e, "device_type", None) == cuda
                              and not e.name.startswith("Memcpy") and not e.name.startswith("Memset")}) or None
        except Exception:
            kernels = None
    return names, kernels


def _triton_captured(out_dir, seen):
    for kernel, _ in _launched:
        try:
            h = str(getattr(kernel, "hash", "") or "")
            if not h or h in seen:
                continue
            name = getattr(kernel, "name", None) or getattr(kernel.metadata, "name", "kernel")
            rec = {"name": str(name), "hash": h}
            asm = getattr(kernel, "asm", {}) or {}
            for key in ("ptx", "cubin"):
                if key in asm:
                    data = asm[key]
                    rec[key] = _write(out_dir, "%s-%s.%s" % (name, h[:12], key),
                                      data if isinstance(data, (bytes, bytearray)) else str(data).encode())
            warps = getattr(getattr(kernel, "metadata", None), "num_warps", None)
            if warps:
                rec["num_warps"] = int(warps)
            seen[h] = rec
        except Exception:
            continue
    del _launched[:]


# ---------------------------------------------------------------------------------------------
# Cubins and fatbins


def cubin_entries(elf):
    """The kernel entries of a cubin (its `.text.<name>` sections), in section order; [] for
    anything that is not a 64-bit little-endian ELF."""
    if len(elf) < 64 or elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        return []
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    if shoff + shnum * shentsize > len(elf) or shstrndx >= shnum or shentsize < 0x28:
        return []
    sections = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    strtab = sections[shstrndx][4]

    def name(off):
        end = elf.find(b"\0", strtab + off)
        return elf[strtab + off:end].decode("latin-1") if end >= 0 else ""
    return [name(s[0])[6:] for s in sections if name(s[0]).startswith(".text.")]


def _elf_size(elf):
    """Where a cubin inside a padded fatbin entry ends: past its section and program headers."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", elf, 0x36)
    return max(shoff + shentsize * shnum, phoff + phentsize * phnum)


def fatbin_cubins(data):
    """The uncompressed cubins a fatbin holds (its ELF entries); a compressed entry is left out."""
    out = []
    if len(data) < 16 or struct.unpack_from("<I", data, 0)[0] != 0xBA55ED50:
        return out
    _, _, header, size = struct.unpack_from("<IHHQ", data, 0)
    off, end = header, min(len(data), header + size)
    while off + 16 <= end:
        kind, _, ehs, payload = struct.unpack_from("<HHIQ", data, off)
        body = data[off + ehs:off + ehs + payload]
        if kind == 2 and body[:4] == b"\x7fELF" and len(body) >= 64:
            out.append(bytes(body[:_elf_size(body)]))
        if ehs == 0 or payload == 0:
            break
        off += ehs + payload
    return out


# The device code in a host module: lowered, a global holding the fatbin (`@kernels_binary`);
# not yet lowered, a gpu.binary's objects (`bin = "..."`, a fatbin or a cubin).
_MLIR_BINARY = re.compile(r'(?:llvm\.mlir\.global\s+internal\s+constant\s+@"?\w*binary\w*"?\(|\bbin\s*=\s*)'
                          r'"((?:[^"\\]|\\.)*)"')


def mlir_string_bytes(text):
    """The bytes of an MLIR string literal's body (`\\XX` hex escapes, `\\\\` a backslash)."""
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            if text[i + 1] in "\\\"":
                out.append(ord(text[i + 1]))
                i += 2
            else:
                out.append(int(text[i + 1:i + 3], 16))
                i += 3
        else:
            out.extend(c.encode("utf-8"))
            i += 1
    return bytes(out)


def cute_cubins(compiled):
    """The cubins a CuTe DSL compiled function loads: the fatbins embedded in its host module."""
    try:
        text = str(compiled.ir_module)
    except Exception:
        return []
    out = []
    for m in _MLIR_BINARY.finditer(text):
        data = mlir_string_bytes(m.group(1))
        out.extend([data] if data[:4] == b"\x7fELF" else fatbin_cubins(data))
    return out


# ---------------------------------------------------------------------------------------------
# The DSL hooks


def _cubin_store():
    base = os.environ.get("TILELANG_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "tilelang")
    return os.path.join(base, "rung-cubins")


def _source_key(code):
    return hashlib.sha256(code.encode() if isinstance(code, str) else bytes(code)).hexdigest()


def _patch_cute(module):
    cls = getattr(module, "JitCompiledFunction", None)
    if cls is None or getattr(cls.__call__, "_rung_hooked", False):
        return

    def wrap(original):
        def called(self, *args, **kwargs):
            if id(self) not in _dsl:
                _dsl[id(self)] = ("cute-dsl", self)
            return original(self, *args, **kwargs)
        called._rung_hooked = True
        return called
    # `cute.compile`'s result is called (__call__); a direct call of a @cute.jit function runs
    # the compiled one's run_compiled_program.
    cls.__call__ = wrap(cls.__call__)
    cls.run_compiled_program = wrap(cls.run_compiled_program)


def _patch_tilelang_nvcc(module):
    original = getattr(module, "compile_cuda", None)
    if original is None or getattr(original, "_rung_hooked", False):
        return

    def compile_cuda(code, target_format="ptx", arch=None, options=None, path_target=None, verbose=False):
        keep = tempfile.mkdtemp(prefix="rung-nvcc-")
        opts = ([options] if isinstance(options, str) else list(options or [])) + ["--keep", "--keep-dir=" + keep]
        try:
            binary = original(code, target_format, arch, opts, path_target, verbose)
            try:
                if target_format == "cubin" and binary:
                    store = _cubin_store()
                    os.makedirs(store, exist_ok=True)
                    key = _source_key(code)
                    _write(store, key + ".cubin", bytes(binary))
                    ptx = sorted(f for f in os.listdir(keep) if f.endswith(".ptx"))
                    if ptx:
                        shutil.copyfile(os.path.join(keep, ptx[0]), os.path.join(store, key + ".ptx"))
            except OSError:
                pass  # not kept: this kernel is not captured, the build goes on
            return binary
        finally:
            shutil.rmtree(keep, ignore_errors=True)
    compile_cuda._rung_hooked = True
    module.compile_cuda = compile_cuda


def _patch_tilelang_kernel(module):
    cls = getattr(module, "JITKernel", None)
    if cls is None or getattr(cls.__call__, "_rung_hooked", False):
        return
    original = cls.__call__

    def called(self, *args, **kwargs):
        if id(self) not in _dsl:
            _dsl[id(self)] = ("tilelang", self)
        return original(self, *args, **kwargs)
    called._rung_hooked = True
    cls.__call__ = called


_PATCHES = {
    "cutlass.base_dsl.jit_executor": _patch_cute,
    "tilelang.contrib.nvcc": _patch_tilelang_nvcc,
    "tilelang.jit.kernel": _patch_tilelang_kernel,
}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Patches a module of _PATCHES as soon as it has been executed."""

    def find_spec(self, name, path, target=None):
        if name not in _PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                loader = spec.loader
                run = loader.exec_module

                def exec_module(module, _run=run, _name=name):
                    _run(module)
                    try:
                        _PATCHES[_name](module)
                    except Exception as exc:
                        sys.stderr.write("rung: capturing %s's kernels: %s: %s\n" % (_name, type(exc).__name__, exc))
                loader.exec_module = exec_module
                return spec
            if spec is not None:
                return None
        return None


def hook_dsls():
    """The CuTe DSL and TileLang hooks: at once for a module already imported, else when it is."""
    for name, patch in _PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())


def _dsl_captured(out_dir, seen):
    for compiler, obj in list(_dsl.values()):
        try:
            files = []  # (cubin, ptx or None)
            if compiler == "cute-dsl":
                files = [(c, None) for c in cute_cubins(obj)]
            else:
                key = _source_key(obj.get_kernel_source())
                base = os.path.join(_cubin_store(), key)
                if os.path.isfile(base + ".cubin"):
                    with open(base + ".cubin", "rb") as f:
                        cubin = f.read()
                    ptx = None
                    if os.path.isfile(base + ".ptx"):
                        with open(base + ".ptx", "rb") as f:
                            ptx = f.read()
                    files = [(cubin, ptx)]
            for cubin, ptx in files:
                for name in cubin_entries(cubin) or ["kernel"]:
                    # One record per entry, each its own hash: a cubin may hold several kernels,
                    # and rung keeps one record per hash.
                    h = hashlib.sha256(cubin + b"\0" + name.encode()).hexdigest()
                    if h in seen:
                        continue
                    stem = "%s-%s" % (name, h[:12])
                    rec = {"name": name, "hash": h, "compiler": compiler, "cubin": _write(out_dir, stem + ".cubin", cubin)}
                    if ptx:
                        rec["ptx"] = _write(out_dir, stem + ".ptx", ptx)
                    seen[h] = rec
        except Exception as exc:
            sys.stderr.write("rung: capturing a %s kernel: %s: %s\n" % (compiler, type(exc).__name__, exc))
    _dsl.clear()


# ---------------------------------------------------------------------------------------------


def _write(out_dir, name, data):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def captured(out_dir):
    """Every kernel launched since the last call, written into out_dir: [{"name", "hash",
    "ptx"?, "cubin"?, "num_warps"?, "compiler"?}], one per kernel entry."""
    seen = {}
    _triton_captured(out_dir, seen)
    _dsl_captured(out_dir, seen)
    return list(seen.values())
