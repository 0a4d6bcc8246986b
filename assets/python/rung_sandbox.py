"""The part of rung's sandbox a zygote's child makes for itself (see rung's sandbox module).

Imported by the worker; numpy-free and quick: a few system calls through ctypes.
"""
import os
import sys


def seal_proc():
    """In a sandboxed zygote's child, before anything of the version runs: the second Landlock
    layer of rung's sandbox (see its sandbox module), made here because it names this child's
    own /proc/<pid>/task (the CUDA driver writes there as it starts): writing, truncating and
    moving files (a layer that does not handle moves denies them everywhere) stay allowed
    beneath every entry of / that RUNG_SANDBOX_SEAL lists and beneath that folder, and nowhere
    else in /proc (not /proc/sys, nor another process's entries). A child that cannot seal
    itself ends rather than run unsealed."""
    top = os.environ.get("RUNG_SANDBOX_SEAL")
    if top is None:
        return
    try:
        import ctypes
        import stat
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        access = int(os.environ["RUNG_SANDBOX_SEAL_ACCESS"])

        class Beneath(ctypes.Structure):
            _pack_ = 1
            _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

        handled = ctypes.c_uint64(access)
        ruleset = libc.syscall(444, ctypes.byref(handled), ctypes.c_size_t(8), ctypes.c_uint32(0))
        if ruleset < 0:
            raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
        try:
            for path in [p for p in top.split("\n") if p] + ["/proc/self/task"]:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue  # gone since the ruleset was made: nothing to allow
                try:
                    # A rule on a file (not a folder) allows only write and truncate.
                    allowed = access if stat.S_ISDIR(os.fstat(fd).st_mode) else access & ((1 << 1) | (1 << 14))
                    rule = Beneath(allowed, fd)
                    if libc.syscall(445, ruleset, ctypes.c_uint32(1), ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                        raise OSError(ctypes.get_errno(), "landlock_add_rule %s" % path)
                finally:
                    os.close(fd)
            if libc.syscall(446, ruleset, ctypes.c_uint32(0)) != 0:
                raise OSError(ctypes.get_errno(), "landlock_restrict_self")
        finally:
            os.close(ruleset)
    except Exception as exc:
        sys.stderr.write("rung: the sandbox's /proc seal could not be made in the child: %s\n" % exc)
        sys.stderr.flush()
        os._exit(1)
