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


class _UnlistedFolders:
    """A finder of last resort for top-level modules in folders on sys.path that the sandbox lets
    be read but not listed: a workspace's root (listing it would list rung's `.rung/` too).
    Python's own finder lists a folder to find a module in it, and finds nothing in one it may
    not list; this one asks for `name.py` (or `name/__init__.py`) by name."""

    _listable = {}

    @classmethod
    def _unlisted(cls, folder):
        if folder not in cls._listable:
            try:
                os.listdir(folder)
                cls._listable[folder] = True
            except PermissionError:
                cls._listable[folder] = False
            except OSError:
                cls._listable[folder] = True  # gone or not a folder: nothing to find here
        return not cls._listable[folder]

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if path is not None or "." in name:
            return None
        import importlib.util
        for entry in list(sys.path):
            folder = entry or os.getcwd()
            if not isinstance(folder, str) or not cls._unlisted(folder):
                continue
            for file, package in ((os.path.join(folder, name + ".py"), False),
                                  (os.path.join(folder, name, "__init__.py"), True)):
                if os.path.isfile(file):
                    where = [os.path.dirname(file)] if package else None
                    return importlib.util.spec_from_file_location(name, file, submodule_search_locations=where)
        return None


def find_unlisted():
    """Lets `import task` find a workspace's own module in the sandbox (see _UnlistedFolders)."""
    if _UnlistedFolders not in sys.meta_path:
        sys.meta_path.append(_UnlistedFolders)
