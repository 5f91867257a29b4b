"""The sandboxed side of a `python` grader: run as a script (`python -I <this file>`) by
engine.rewards.sandbox, in a fresh temporary directory, with an empty environment. Standard library
only: the project's packages must not be importable from in here.

Reads one JSON request on stdin (`source`, `samples`, `items`, `limits`, `audit`), confines itself,
then writes JSON lines on the protocol pipe (the original stdout):

    {"ready": {"mechanisms": {...}}}     confinement done, which layers hold (or why not)
    {"setup_error": "..."}               the source failed to load or defines no grade()
    {"start": i}                         grading sample i
    {"i": i, "score": x} | {"i": i, "error": "..."}
    {"done": true}

Layers, strongest first, each applied when the kernel allows it (unprivileged; the ones that fail are
reported in `mechanisms`, never silently skipped):

1. resource limits: RLIMIT_CPU (SIGXCPU, then SIGKILL), RLIMIT_AS (allocations fail: MemoryError),
   RLIMIT_FSIZE, RLIMIT_NOFILE, no core files;
2. a new user + network + mount namespace (unshare): no network interface but a down loopback, and no
   capability over the outer namespace;
   a filesystem of its own (pivot_root): a small tmpfs as `/` holding only read-only binds of the read
   roots (below) and, at the temporary directory's path, a tmpfs of `disk_mb` MiB and `files` inodes
   (all its files together: ENOSPC beyond). Nothing else exists: stat/listdir of `/proc`, `/home`, the
   project ... fail with ENOENT;
3. Landlock: reads only below the Python installation and the system libraries, reads and writes
   only in the temporary directory, no TCP bind/connect (ABI 4+), no signals or abstract unix
   sockets outside the sandbox (ABI 6+); no mounts;
4. seccomp (libseccomp through ctypes): no socket(), exec, fork (threads are allowed), ptrace,
   namespaces, mounts, bpf, io_uring, raising limits, or signals to other processes;
5. a Python audit hook (defence in depth and clear errors; it can be subverted by determined code,
   the layers above cannot): refuses sockets, subprocesses, exec/fork/system, ctypes/cffi, file
   reads outside the allowed roots, writes outside the temporary directory, raising limits, and
   gc/frame introspection that could reach the hook.
"""

from __future__ import annotations

import builtins
import ctypes
import errno
import json
import math
import numbers
import os
import resource
import sys
import traceback

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNS = 0x00020000
_PR_SET_PDEATHSIG = 1
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_ST_FLAGS = ((os.ST_NOSUID, _MS_NOSUID), (os.ST_NODEV, _MS_NODEV), (os.ST_NOEXEC, _MS_NOEXEC),
             (os.ST_RDONLY, _MS_RDONLY), (getattr(os, "ST_NOATIME", 1024), 1024),
             (getattr(os, "ST_NODIRATIME", 2048), 2048), (getattr(os, "ST_RELATIME", 4096), 1 << 21))
"""statvfs flags -> mount flags a read-only bind must keep (a user namespace cannot drop locked ones)."""
_CLONE_NEWNET = 0x40000000
_CLONE_THREAD = 0x00010000
_PR_SET_NO_NEW_PRIVS = 38
_FS_READ = (1 << 2) | (1 << 3)  # READ_FILE, READ_DIR
_FS_FILE_RIGHTS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15)  # the rights a file (not a dir) takes
_SYSCALLS_LANDLOCK = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_DENIED_SYSCALLS = (
    "socket", "socketpair", "execve", "execveat", "fork", "vfork", "ptrace", "process_vm_readv",
    "process_vm_writev", "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "bpf",
    "perf_event_open", "keyctl", "add_key", "request_key", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "reboot", "swapon", "swapoff", "acct", "open_by_handle_at", "name_to_handle_at", "pidfd_getfd", "kcmp",
    "setrlimit", "tkill", "mount_setattr", "move_mount", "open_tree", "fsopen", "fsmount", "fspick",
)
_REFUSED_EVENTS = (
    "socket.", "subprocess.", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.system",
    "os.kill", "os.killpg", "ctypes.", "resource.setrlimit", "resource.prlimit",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames", "sys._current_exceptions",
    "pty.", "webbrowser.", "urllib.", "http.client.", "ftplib.", "smtplib.", "poplib.", "imaplib.", "nntplib.",
    "telnetlib.", "os.chown", "os.chflags", "os.setxattr", "os.removexattr", "mmap.__new__", "signal.pthread_kill",
    "sys.remote_exec", "cpython.remote_debugger_script",
)
_REFUSED_MODULES = {"cffi", "_cffi_backend", "_xxsubinterpreters", "_xxinterpchannels"}
"""Ways to call C without an audit event. ctypes itself stays importable (numpy imports it): every ctypes
call, load or raw memory access raises a `ctypes.*` event, and those are refused."""
_TEMP_ONLY_EVENTS = {"os.remove", "os.rmdir", "os.mkdir", "os.rename", "os.link", "os.symlink", "os.truncate",
                     "os.chmod", "os.utime", "os.mkfifo", "os.mknod", "shutil.rmtree", "shutil.copyfile",
                     "shutil.copymode", "shutil.copystat", "shutil.move", "shutil.make_archive",
                     "shutil.unpack_archive", "os.replace"}
_READ_EVENTS = {"os.listdir", "os.scandir", "glob.glob", "glob.glob/2", "os.walk", "os.fwalk"}


def _write(fd: int, message: dict) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


# --- layer 1: resource limits -------------------------------------------------------------------

def _limit(limits: dict) -> str:
    cpu = max(1, math.ceil(limits["cpu_s"]))
    memory = int(limits["memory_mb"]) * 1024 * 1024
    size = int(limits["file_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(limits["open_files"]),) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return f"cpu={cpu}s as={limits['memory_mb']}MiB fsize={limits['file_mb']}MiB nofile={limits['open_files']}"


# --- layer 2: namespaces --------------------------------------------------------------------------

def _unshare(libc) -> str:
    uid, gid = os.geteuid(), os.getegid()
    flags, name = _CLONE_NEWUSER | _CLONE_NEWNET | _CLONE_NEWNS, "user+net+mount"
    if libc.unshare(flags) != 0:
        flags, name = _CLONE_NEWUSER | _CLONE_NEWNET, "user+net"
        if libc.unshare(flags) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER|CLONE_NEWNET) failed")
    # Map our one uid/gid (as 0 inside): files can be created only by a mapped uid. Capabilities inside
    # reach nothing outside the new namespaces.
    for entry, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{entry}", "w") as f:
            f.write(text)
    return name


def _mount(libc, source: str | None, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda v: None if v is None else v.encode())
    if libc.mount(enc(source), enc(target), enc(kind), ctypes.c_ulong(flags), enc(data)) != 0:
        raise OSError(ctypes.get_errno(), f"mount({source}, {target}, {kind}) failed")


def _filesystem(libc, temp: str, roots: list[str], limits: dict) -> str:
    """A root of our own (see layer 2): the read roots bound read-only, a size-capped tmpfs at `temp`."""
    if not os.path.exists("/proc/self/ns/mnt") or os.stat("/proc/self/ns/mnt").st_ino == _outer_mnt_ns:
        raise OSError(errno.EPERM, "no mount namespace of our own")
    _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing we mount propagates out
    new = temp  # the new root is mounted over the temporary directory (only in our namespace)
    _mount(libc, "keel-root", new, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
    for path in roots:
        if any(path.startswith(other.rstrip("/") + "/") for other in roots):
            continue  # below another root: bound with it
        inside = new + path
        if os.path.isdir(path):
            os.makedirs(inside, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(inside), exist_ok=True)
            open(inside, "a").close()  # a mount point for a file
        _mount(libc, path, inside, None, _MS_BIND | _MS_REC)
        kept = os.statvfs(path).f_flag
        locked = sum(flag for st, flag in _ST_FLAGS if kept & st)
        _mount(libc, None, inside, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | locked)
    for link, target in _links(roots):
        os.makedirs(os.path.dirname(new + link), exist_ok=True)
        if not os.path.lexists(new + link):
            os.symlink(target, new + link)
    scratch = new + temp
    os.makedirs(scratch, exist_ok=True)
    disk, files = int(limits["disk_mb"]), int(limits["files"])
    _mount(libc, "keel-grader", scratch, "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
           f"size={disk}m,nr_inodes={files + 1},mode=0700")
    os.makedirs(new + "/.old", exist_ok=True)
    if libc.syscall(155 if os.uname().machine == "x86_64" else 41, new.encode(), (new + "/.old").encode()) != 0:
        raise OSError(ctypes.get_errno(), "pivot_root failed")
    os.chdir("/")
    if libc.umount2(b"/.old", _MNT_DETACH) != 0:
        raise OSError(ctypes.get_errno(), "umount2(old root) failed")
    os.rmdir("/.old")
    _mount(libc, None, "/", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    os.chdir(temp)
    return f"own root; temp tmpfs {disk}MiB, {files} files"


def _links(roots: list[str]) -> list[tuple[str, str]]:
    """Symbolic links on the way to the read roots (`/lib` -> `usr/lib` on merged-/usr systems, which
    the dynamic loader's cache names), recreated in the new root."""
    out = []
    for path in _root_candidates():
        if os.path.islink(path) and os.path.realpath(path) in roots:
            out.append((path, os.readlink(path)))
    return out


# --- layer 3: Landlock ----------------------------------------------------------------------------

class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _root_candidates() -> set[str]:
    roots = {os.path.join(p, "lib") for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    roots |= {os.path.join(p, "lib64") for p in (sys.prefix, sys.base_prefix)}
    return roots | {"/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib", "/usr/share/zoneinfo",
                    "/etc/ld.so.cache", "/etc/localtime", "/dev/urandom", "/dev/null"}


def read_roots() -> list[str]:
    """Where the interpreter, its standard library and installed packages, and the system libraries
    live: readable in the sandbox. The project's own directory is not (an editable install of Keel
    puts it on sys.path; it is left out on purpose)."""
    return sorted({os.path.realpath(r) for r in _root_candidates() if os.path.exists(r)})


def _landlock(libc, temp: str) -> str:
    machine = os.uname().machine
    if machine not in _SYSCALLS_LANDLOCK:
        raise OSError(errno.ENOSYS, f"no Landlock syscall numbers known for {machine}")
    create, add, restrict = _SYSCALLS_LANDLOCK[machine]
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(create, None, ctypes.c_long(0), ctypes.c_long(1))  # LANDLOCK_CREATE_RULESET_VERSION
    if abi < 1:
        raise OSError(ctypes.get_errno(), "Landlock is not enabled in this kernel")
    fs = (1 << 13) - 1  # ABI 1: execute .. make_sym
    fs |= (1 << 13) if abi >= 2 else 0  # refer
    fs |= (1 << 14) if abi >= 3 else 0  # truncate
    fs |= (1 << 15) if abi >= 5 else 0  # ioctl_dev
    net = 0b11 if abi >= 4 else 0  # bind_tcp, connect_tcp: handled and never allowed
    scoped = 0b11 if abi >= 6 else 0  # abstract unix sockets, signals
    attr = (ctypes.c_uint64 * 3)(fs, net, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(create, ctypes.byref(attr), ctypes.c_long(size), ctypes.c_long(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        writable = fs & ~((1 << 0) | (1 << 6) | (1 << 11))  # not execute, no device nodes
        rules = [(r, _FS_READ) for r in read_roots()] + [(temp, writable)]
        for path, access in rules:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                if not os.path.isdir(path):
                    access &= _FS_FILE_RIGHTS
                    access |= (1 << 1) if path == "/dev/null" else 0
                rule = _PathBeneath(access & fs, fd)
                if libc.syscall(add, ruleset, 1, ctypes.byref(rule), ctypes.c_long(0)) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}) failed")
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(restrict, ruleset, ctypes.c_long(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return f"abi {abi}" + (", tcp" if net else "") + (", scoped" if scoped else "")


# --- layer 4: seccomp -----------------------------------------------------------------------------

class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def _seccomp(libc) -> str:
    lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
    ne, masked_eq = 1, 7
    ctx = lib.seccomp_init(allow)
    if not ctx:
        raise OSError(errno.EINVAL, "seccomp_init failed")

    def rule(action: int, syscall: str, *cmps: tuple[int, int, int, int]) -> bool:
        nr = lib.seccomp_syscall_resolve_name(syscall.encode())
        if nr < 0:  # not a syscall on this architecture
            return False
        array = (_ArgCmp * max(1, len(cmps)))(*[_ArgCmp(*c) for c in cmps])
        rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), array)
        if rc != 0:
            raise OSError(-rc, f"seccomp_rule_add({syscall}) failed")
        return True

    try:
        denied = [s for s in _DENIED_SYSCALLS if rule(eperm, s)]
        rule(eperm, "clone", (0, masked_eq, _CLONE_THREAD, 0))  # a new process; a thread has CLONE_THREAD
        rule(enosys, "clone3")  # its flags are behind a pointer: glibc falls back to clone()
        rule(eperm, "prlimit64", (2, ne, 0, 0))  # setting a limit; reading one passes NULL
        me = os.getpid()
        rule(eperm, "kill", (0, ne, me, 0))
        rule(eperm, "tgkill", (0, ne, me, 0))
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        rc = lib.seccomp_load(ctx)
        if rc != 0:
            raise OSError(-rc, "seccomp_load failed")
    finally:
        lib.seccomp_release(ctx)
    return f"{len(denied) + 5} rules"


# --- layer 5: the audit hook ----------------------------------------------------------------------

def _audit_hook(temp: str, roots: list[str]):
    temp = os.path.realpath(temp)
    readable = [*roots, temp]

    def inside(path, places) -> bool:
        if isinstance(path, int):  # an already-open descriptor
            return True
        try:
            full = os.path.realpath(os.path.join(os.getcwd(), os.fsdecode(path)))
        except (TypeError, ValueError):
            return False
        return any(full == p or full.startswith(p.rstrip("/") + "/") for p in places)

    def refuse(event: str, detail: str = "") -> None:
        raise PermissionError(f"refused by the grader sandbox: {event}{' ' + detail if detail else ''}")

    def hook(event: str, args: tuple) -> None:
        if event.startswith(_REFUSED_EVENTS):
            refuse(event)
        if event == "import" and args and str(args[0]).split(".")[0] in _REFUSED_MODULES:
            refuse("import", str(args[0]))
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            if path is None:
                return
            write = any(c in (mode or "") for c in "wax+") or bool(
                (flags or 0) & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))
            if not inside(path, [temp] if write else readable):
                refuse("open", f"{path!r}" + (" for writing" if write else ""))
        elif event in _TEMP_ONLY_EVENTS:
            for arg in args:
                if isinstance(arg, str | bytes | os.PathLike) and not inside(arg, [temp]):
                    refuse(event, repr(arg))
        elif (event in _READ_EVENTS and args and isinstance(args[0], str | bytes | os.PathLike)
              and not inside(args[0], readable)):
            refuse(event, repr(args[0]))

    return hook


# --- grading ----------------------------------------------------------------------------------------

def _error(e: BaseException) -> str:
    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == "<grader>"]
    where = f" (line {lines[-1]})" if lines else ""
    text = str(e)
    return (f"{type(e).__name__}: {text}" if text else type(e).__name__)[:1000] + where


def _score(value) -> tuple[float | None, str | None]:
    if isinstance(value, numbers.Real):
        out = float(value)
        if math.isfinite(out):
            return out, None
    shown = repr(value)
    return None, f"grade() returned {shown[:200]}, not a finite number"


def _die_with_parent(libc) -> None:
    """SIGKILL when the process that started us ends, whatever kills it (argv[1]: its pid, to catch
    a parent that was gone before this took effect)."""
    import signal

    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if len(sys.argv) > 1 and os.getppid() != int(sys.argv[1]):
        os._exit(1)


_outer_mnt_ns = 0


def main() -> None:
    global _outer_mnt_ns
    libc = ctypes.CDLL(None, use_errno=True)
    _die_with_parent(libc)
    request = json.loads(sys.stdin.buffer.read())
    temp = os.getcwd()
    proto = os.dup(1)
    mechanisms: dict[str, str] = {}
    roots = read_roots()
    _outer_mnt_ns = os.stat("/proc/self/ns/mnt").st_ino
    layers = (("rlimits", lambda: _limit(request["limits"])), ("namespaces", lambda: _unshare(libc)),
              ("filesystem", lambda: _filesystem(libc, temp, roots, request["limits"])),
              ("landlock", lambda: _landlock(libc, temp)), ("seccomp", lambda: _seccomp(libc)))
    for name, apply in layers:
        try:
            mechanisms[name] = apply()
        except (OSError, AttributeError, ValueError) as e:  # unavailable here: reported, not hidden
            mechanisms[name] = f"unavailable: {e}"
    _die_with_parent(libc)  # again: changing credentials (the user namespace) may have cleared it
    # Output of the grader's own prints goes to a file in the temporary directory (RLIMIT_FSIZE caps it),
    # never onto the protocol pipe.
    log = os.open(os.path.join(temp, "output.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    if request.get("audit", True):
        sys.addaudithook(_audit_hook(temp, roots))
        mechanisms["audit_hook"] = "on"
    else:
        mechanisms["audit_hook"] = "off (requested)"
    libc = None  # the grader reaches no handle of ours (calling one would be refused anyway)
    _write(proto, {"ready": {"mechanisms": mechanisms}})
    namespace = {"__name__": "__grader__", "__builtins__": builtins}
    try:
        exec(compile(request["source"], "<grader>", "exec"), namespace)  # noqa: S102 - the point of the sandbox
        grade = namespace.get("grade")
        if not callable(grade):
            raise TypeError("the source defines no grade(sample, item) function")
    except BaseException as e:  # noqa: BLE001 - whatever the user's module does is reported
        _write(proto, {"setup_error": _error(e)})
        return
    for i, (sample, item) in zip(request["indices"], zip(request["samples"], request["items"])):
        _write(proto, {"start": i})
        try:
            score, problem = _score(grade(sample, item))
        except BaseException as e:  # noqa: BLE001
            score, problem = None, _error(e)
        _write(proto, {"i": i, "score": score} if problem is None else {"i": i, "error": problem})
    _write(proto, {"done": True})


if __name__ == "__main__":
    main()
