"""The code sandbox's harness: trusted code that runs *inside* the sandbox (see :mod:`brorl.sandbox`).

Never imported by the trainer: :func:`brorl.sandbox.run_program` sends this file's compiled code to a fresh
``python -I -S -B`` over stdin, which runs it as ``__main__``. It uses the standard library only.
"""
import gc
import marshal
import os
import resource
import select
import signal
import struct
import sys
import time

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 22, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
EXIT_COMPILE, EXIT_SETUP, EXIT_NO_FUNCTION = 65, 70, 66
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND | 0x400000
CLONE_THREAD = 0x10000
AT_FDCWD, AT_RECURSIVE, OPEN_TREE_CLONE, MOVE_MOUNT_F_EMPTY_PATH, MNT_DETACH = -100, 0x8000, 1, 4, 2
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 1, 2
SYSTEM_LIBS = ("/lib", "/lib64", "/lib32", "/usr/lib", "/usr/lib64", "/usr/lib32")
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/dev/null", "/dev/zero", "/dev/full", "/dev/random",
                "/dev/urandom")
STAGING = "/tmp"  # where the new root is assembled (in the sandbox's own mount namespace only)
json = None  # imported by main() for call-based tests only (interpreter start-up time)

# name: (x86_64, aarch64) syscall numbers (None: the syscall does not exist there)
NR = {
    "socket": (41, 198), "open": (2, None), "openat": (257, 56), "openat2": (437, 437), "creat": (85, None),
    "truncate": (76, 45), "rename": (82, None), "renameat": (264, 38), "renameat2": (316, 276),
    "mkdir": (83, None), "mkdirat": (258, 34), "rmdir": (84, None), "link": (86, None), "linkat": (265, 37),
    "unlink": (87, None), "unlinkat": (263, 35), "symlink": (88, None), "symlinkat": (266, 36),
    "chmod": (90, None), "fchmodat": (268, 53), "fchmodat2": (452, 452), "chown": (92, None),
    "lchown": (94, None), "fchownat": (260, 54), "utime": (132, None), "utimes": (235, None),
    "utimensat": (280, 88), "futimesat": (261, None), "mknod": (133, None), "mknodat": (259, 33),
    "setxattr": (188, 5), "lsetxattr": (189, 6), "removexattr": (197, 14), "lremovexattr": (198, 15),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "unshare": (272, 97), "setns": (308, 268), "ptrace": (101, 117), "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271), "process_madvise": (440, 440), "kcmp": (312, 272),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282), "keyctl": (250, 219),
    "add_key": (248, 217), "request_key": (249, 218), "kill": (62, 129), "tkill": (200, 130),
    "tgkill": (234, 131), "rt_sigqueueinfo": (129, 138), "rt_tgsigqueueinfo": (297, 240),
    "pidfd_send_signal": (424, 424), "pidfd_open": (434, 434), "pidfd_getfd": (438, 438),
    "clone": (56, 220), "clone3": (435, 435), "fork": (57, None), "vfork": (58, None),
    "execve": (59, 221), "execveat": (322, 281), "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265), "open_tree": (428, 428), "move_mount": (429, 429),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442), "acct": (163, 89), "swapon": (167, 224), "swapoff": (168, 225),
    "quotactl": (179, 60), "fanotify_init": (300, 262),
}
ALWAYS_DENY = ("socket", "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp",
               "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "perf_event_open",
               "userfaultfd", "keyctl", "add_key", "request_key", "mount", "umount2", "pivot_root", "chroot",
               "unshare", "setns", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
               "mount_setattr", "acct", "swapon", "swapoff", "quotactl", "fanotify_init", "pidfd_open",
               "pidfd_getfd", "pidfd_send_signal", "tkill", "name_to_handle_at", "open_by_handle_at")
WRITE_DENY = ("creat", "truncate", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir", "link",
              "linkat", "unlink", "unlinkat", "symlink", "symlinkat", "chmod", "fchmodat", "fchmodat2",
              "chown", "lchown", "fchownat", "utime", "utimes", "utimensat", "futimesat", "mknod", "mknodat",
              "setxattr", "lsetxattr", "removexattr", "lremovexattr")
EPERM, EAGAIN, ENOSYS = 1, 11, 38
WARMUP = """
import sys
def f(a, *b, c=1, **d):
    return [x * 2 for x in range(a) if x % 2], {k: v for k, v in d.items()}, f"{a!r:>4}"
class C:
    def m(self):
        try:
            while True:
                break
        except (ValueError, KeyError) as e:
            raise
        finally:
            pass
        with open(0) as fh:
            pass
        return lambda y: (y, -y, not y, y ** 2, y // 3, y >> 1, y[1:2], (yield y))
n, *rest = map(int, sys.stdin.readline().split())
print(*rest, sep=" ", end="\\n")
"""


def read_exact(fd, n):
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError("payload truncated")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def load_libc():
    try:
        import ctypes
        return ctypes, ctypes.CDLL(None, use_errno=True)
    except Exception:
        return None, None


def prctl(ct, libc, *args):
    args = list(args) + [0] * (5 - len(args))
    return libc.prctl(*[a if not isinstance(a, int) else ct.c_ulong(a) for a in args])


def enter_namespaces(ct, libc, iso):
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID) != 0:
        return False
    iso["user_namespace"] = iso["network_namespace"] = iso["mount_namespace"] = True
    try:
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
    except OSError:
        pass
    try:
        with open("/proc/self/uid_map", "w") as f:
            f.write("0 %d 1" % uid)
        with open("/proc/self/gid_map", "w") as f:
            f.write("0 %d 1" % gid)
    except OSError:
        iso["id_mapped"] = False
    return True


def nr_of(name):
    return NR[name][0 if os.uname().machine == "x86_64" else 1]


def mount_setattr(ct, libc, path, flags, attr_set, attr_clr):
    attr = (ct.c_uint64 * 4)(attr_set, attr_clr, 0, 0)
    return libc.syscall(ct.c_long(nr_of("mount_setattr")), ct.c_long(AT_FDCWD), ct.c_char_p(path),
                        ct.c_ulong(flags), ct.byref(attr), ct.c_size_t(32))


def readable_paths(allow_fork):
    """What model code may read besides its own directory: the interpreter, its standard library, the
    system's shared libraries (extension modules load them) and the few files libc reads. The interpreter
    by the name it was started with (its symlinks, e.g. a venv's bin/python) only where model code may
    start processes."""
    ver = "python%d.%d" % sys.version_info[:2]
    paths = [sys.executable if allow_fork else os.path.realpath(sys.executable),
             os.path.join(sys.base_prefix, "lib", ver), os.path.join(sys.base_exec_prefix, "lib", ver)]
    paths += list(SYSTEM_LIBS) + list(SYSTEM_FILES)
    return [p for p in paths if os.path.lexists(p)]


def plan_root(paths):
    """``(links, binds)``: the host's symlinks on the way to ``paths`` (recreated in the new root) and the
    real directories and files to bind there (read-only; nested ones once)."""
    links, binds, todo = [], [], list(paths)
    for _ in range(256):  # bounded: symlink loops
        if not todo:
            break
        path = os.path.normpath(todo.pop())
        parts = path.strip("/").split("/")
        cur = ""
        for i, part in enumerate(parts):
            cur += "/" + part
            if os.path.islink(cur):
                target = os.readlink(cur)
                links.append((cur, target))
                todo.append(os.path.join(os.path.dirname(cur), target, *parts[i + 1:]))
                break
        else:
            if os.path.exists(path):
                binds.append(path)
    binds.sort(key=len)
    kept = []
    for path in binds:
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return links, kept


def mount_private_root(ct, libc, sbx, writable, allow_fork, iso):
    """Pivot into a fresh tmpfs root that holds only :func:`readable_paths` (read-only), a private ``/proc``,
    a two-line ``/etc/passwd`` and the sandbox directory (a tmpfs of its own, so it vanishes with the
    namespace). Returns whether it did; on failure the caller's root is left as it was."""
    links, binds = plan_root(readable_paths(allow_fork))
    clones, root, done = [], None, False
    try:
        for path in binds:  # cloned before the staging tmpfs can hide a source (an interpreter under /tmp)
            fd = libc.syscall(ct.c_long(nr_of("open_tree")), ct.c_long(AT_FDCWD), ct.c_char_p(path.encode()),
                              ct.c_uint(OPEN_TREE_CLONE | os.O_CLOEXEC | AT_RECURSIVE))
            if fd < 0:
                return False
            clones.append((path, fd))
        broot = (STAGING if os.path.isdir(STAGING) else "/mnt").encode()
        if libc.mount(b"tmpfs", broot, b"tmpfs", ct.c_ulong(MS_NOSUID | MS_NODEV), b"size=1m,mode=755") != 0:
            return False
        root = broot.decode()
        for cur, target in links:
            dst = root + cur
            if not os.path.lexists(dst):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                os.symlink(target, dst)
        for path, fd in clones:
            dst = root + path
            if os.path.isdir(path):
                os.makedirs(dst, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                os.close(os.open(dst, os.O_CREAT | os.O_WRONLY, 0o644))
            if libc.syscall(ct.c_long(nr_of("move_mount")), ct.c_long(fd), ct.c_char_p(b""), ct.c_long(AT_FDCWD),
                            ct.c_char_p(dst.encode()), ct.c_uint(MOVE_MOUNT_F_EMPTY_PATH)) != 0:
                return False
        ver = "python%d.%d" % sys.version_info[:2]
        for prefix in {sys.base_prefix, sys.base_exec_prefix}:
            for name in ("site-packages", "dist-packages"):  # installed packages stay hidden
                masked = os.path.join(root + prefix, "lib", ver, name)
                if os.path.isdir(masked) and libc.mount(b"tmpfs", masked.encode(), b"tmpfs",
                                                        ct.c_ulong(MS_NOSUID | MS_NODEV), b"size=4k,mode=555") != 0:
                    return False
        os.makedirs(root + "/etc", exist_ok=True)
        for name, line in (("passwd", "sandbox:x:0:0:sandbox:%s:/nonexistent\n" % sbx), ("group", "sandbox:x:0:\n")):
            with open(root + "/etc/" + name, "w") as f:
                f.write(line)
        os.makedirs(root + "/proc", exist_ok=True)
        libc.mount(b"proc", (root + "/proc").encode(), b"proc", ct.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC), None)
        os.makedirs(root + sbx, exist_ok=True)
        if libc.mount(b"tmpfs", (root + sbx).encode(), b"tmpfs", ct.c_ulong(MS_NOSUID | MS_NODEV),
                      b"size=64m,mode=700") != 0:
            return False
        # read-only and nosuid throughout (not nodev: /dev/null & co. are bound device nodes; the tmpfs
        # mounts are nodev anyway, being made in a user namespace)
        if mount_setattr(ct, libc, broot, AT_RECURSIVE, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0) != 0:
            return False
        if writable and mount_setattr(ct, libc, (root + sbx).encode(), 0, 0, MOUNT_ATTR_RDONLY) != 0:
            return False
        os.chdir(root)
        new_dev = os.stat(".").st_dev
        if libc.syscall(ct.c_long(nr_of("pivot_root")), ct.c_char_p(b"."), ct.c_char_p(b".")) != 0:
            os.chdir("/")
            return False
        done = True
        # the old root, stacked on the new one by pivot_root(".", "."): if it stayed, "/" would be the host's
        if libc.umount2(b".", ct.c_int(MNT_DETACH)) != 0:
            raise OSError("sandbox: the host's root could not be detached")  # fatal: the run scores 0
        os.chdir("/")
        if os.stat("/").st_dev != new_dev:
            raise OSError("sandbox: / is not the private root")
        os.chdir(sbx)
    except OSError:
        if done:
            raise
        return False
    finally:
        for _, fd in clones:
            os.close(fd)
        if root is not None and not done:
            libc.umount2(root.encode(), ct.c_int(MNT_DETACH))
    iso["private_root"] = iso["private_proc"] = iso["readonly_fs"] = True
    return True


def setup_mounts(ct, libc, sbx, writable, allow_fork, iso):
    libc.mount(None, b"/", None, ct.c_ulong(MS_REC | MS_PRIVATE), None)
    if mount_private_root(ct, libc, sbx, writable, allow_fork, iso):
        return
    # second best: the host's tree, read-only except the sandbox directory (reads are not confined)
    os.makedirs(sbx, mode=0o700, exist_ok=True)
    os.chdir(sbx)
    bsbx = sbx.encode()
    if libc.mount(b"proc", b"/proc", b"proc", ct.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC), None) == 0:
        iso["private_proc"] = True
    elif libc.mount(b"tmpfs", b"/proc", b"tmpfs", ct.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC),
                    b"size=4k,mode=555") == 0:
        iso["private_proc"] = True
    if libc.mount(bsbx, bsbx, None, ct.c_ulong(MS_BIND | MS_REC), None) != 0:
        return
    if mount_setattr(ct, libc, b"/", AT_RECURSIVE, MOUNT_ATTR_RDONLY, 0) != 0:
        return
    iso["readonly_fs"] = True
    if writable:
        mount_setattr(ct, libc, bsbx, AT_RECURSIVE, 0, MOUNT_ATTR_RDONLY)
    os.chdir(sbx)


def bpf_program(allow_fork, allow_writes):
    """The seccomp filter as a list of 8-byte instructions, and the indices whose operand must be
    patched with the pid of the process that installs it."""
    m = os.uname().machine
    if m == "x86_64":
        arch, col = 0xC000003E, 0
    elif m in ("aarch64", "arm64"):
        arch, col = 0xC00000B7, 1
    else:
        return None, ()
    LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
    ALLOW, ERRNO, KILL = 0x7FFF0000, 0x00050000, 0x80000000
    ins = lambda code, k, jt=0, jf=0: struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)
    nr = lambda name: NR[name][col]
    p = [ins(LD, 4), ins(JEQ, arch, 1, 0), ins(RET, KILL), ins(LD, 0)]
    slots = []
    if col == 0:
        p += [ins(JGE, 0x40000000, 0, 1), ins(RET, ERRNO | EPERM)]
    deny = list(ALWAYS_DENY) + ["openat2"]
    if not allow_fork:
        deny += ["fork", "vfork", "execve", "execveat"]
    if not allow_writes:
        deny += list(WRITE_DENY)
    for name in deny:
        if nr(name) is not None:
            p += [ins(JEQ, nr(name), 0, 1), ins(RET, ERRNO | (ENOSYS if name == "openat2" else EPERM))]
    p += [ins(JEQ, nr("clone3"), 0, 1), ins(RET, ERRNO | ENOSYS)]
    if not allow_writes:
        for name, arg in (("open", 1), ("openat", 2)):
            if nr(name) is not None:
                p += [ins(JEQ, nr(name), 0, 3), ins(LD, 16 + 8 * arg), ins(JSET, WRITE_FLAGS, 0, 1),
                      ins(RET, ERRNO | EPERM), ins(LD, 0)]
    if not allow_fork:
        p += [ins(JEQ, nr("clone"), 0, 4), ins(LD, 16), ins(JSET, CLONE_THREAD, 0, 1), ins(RET, ALLOW),
              ins(RET, ERRNO | EAGAIN), ins(LD, 0)]
        for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
            p += [ins(JEQ, nr(name), 0, 5), ins(LD, 16)]
            slots.append(len(p))
            p += [ins(JEQ, 0, 2, 0), ins(JEQ, 0, 1, 0), ins(RET, ERRNO | EPERM), ins(RET, ALLOW), ins(LD, 0)]
    p.append(ins(RET, ALLOW))
    return p, slots


class SeccompFilter:
    """A seccomp filter prepared once in the harness; :meth:`install` patches in the caller's pid."""

    def __init__(self, ct, libc, allow_fork, allow_writes):
        prog, self.slots = bpf_program(allow_fork, allow_writes)
        self.ok = prog is not None and len(prog) <= 4096
        if not self.ok:
            return
        class SockFprog(ct.Structure):
            _fields_ = [("len", ct.c_ushort), ("filter", ct.c_void_p)]
        self.ct, self.libc = ct, libc
        self.buf = ct.create_string_buffer(b"".join(prog), len(prog) * 8)
        self.fprog = SockFprog(len(prog), ct.addressof(self.buf))
        self.args = (ct.c_ulong(PR_SET_SECCOMP), ct.c_ulong(2), ct.byref(self.fprog), ct.c_ulong(0), ct.c_ulong(0))

    def install(self):
        if not self.ok:
            return False
        pid = os.getpid()
        view = memoryview(self.buf).cast("B")
        for index in self.slots:
            struct.pack_into("=I", view, index * 8 + 4, pid)
        return self.libc.prctl(*self.args) == 0


def drop_capabilities(ct, libc):
    for cap in range(64):
        if prctl(ct, libc, PR_CAPBSET_DROP, cap) != 0:
            break
    prctl(ct, libc, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = (ct.c_uint32 * 2)(0x20080522, 0)
    data = (ct.c_uint32 * 6)()
    return libc.capset(header, data) == 0


def install_audit_hook(allow_fork, allow_writes, private_proc, mypid):
    realpath = os.path.realpath
    own = ("/proc/self", "/proc/thread-self", "/proc/%d" % mypid)
    deny = {"socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
            "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo",
            "os.killpg", "pty.spawn", "syslog.openlog"}
    if not allow_fork:
        deny |= {"os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.system", "subprocess.Popen",
                 "os.spawn"}
    if not allow_writes:
        deny |= {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
                 "os.link", "os.symlink", "os.utime", "os.mkfifo", "os.mknod", "os.setxattr",
                 "os.removexattr", "shutil.rmtree", "shutil.copyfile", "shutil.move", "shutil.copytree",
                 "tempfile.mkstemp", "tempfile.mkdtemp"}
    blocked_imports = {"ctypes", "_ctypes"} if allow_fork else {"ctypes", "_ctypes", "_posixsubprocess"}
    def hook(event, args):
        if event in deny or event.startswith("ctypes.") or event.startswith("socket."):
            raise PermissionError("sandbox: %s is not allowed" % event)
        if event == "open":
            path = args[0]
            if isinstance(path, int):
                return
            mode, flags = (args[1] if len(args) > 1 else None), (args[2] if len(args) > 2 else 0)
            if not allow_writes and ((isinstance(flags, int) and flags & WRITE_FLAGS)
                                     or (isinstance(mode, str) and any(c in mode for c in "wax+"))):
                raise PermissionError("sandbox: writing files is not allowed")
            if not private_proc and isinstance(path, (str, bytes)):
                try:
                    p = realpath(os.fsdecode(path))
                except Exception:
                    raise PermissionError("sandbox: bad path")
                if p.startswith("/proc/") and not any(p == o or p.startswith(o + "/") for o in own):
                    raise PermissionError("sandbox: other processes are not visible")
        elif event == "import" and args and args[0] in blocked_imports:
            raise ImportError("sandbox: module %s is not available" % args[0])
        elif event == "os.kill" and args and args[0] not in (0, mypid) and not allow_fork:
            raise PermissionError("sandbox: os.kill is not allowed")
    sys.addaudithook(hook)


def set_limit(which, value):
    try:
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))
    except (ValueError, OSError):
        pass


def child(opts, code_src, in_fd, out_fd, err_fd, status_w, null_fd, ct, libc, seccomp, iso, remaining, cap):
    """A test-case process: harden, then run the model's program.  Never returns."""
    try:
        os.setpgid(0, 0)
        os.dup2(in_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.dup2(status_w, 3)
        args = None
        if opts["mode"] == "call":
            raw = b""
            while True:
                chunk = os.read(0, 1 << 20)
                if not chunk:
                    break
                raw += chunk
            args = json.loads(raw.decode("utf-8"))
            del raw
            os.dup2(null_fd, 0)
        os.closerange(4, max(1024, resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
        mypid = os.getpid()
        set_limit(resource.RLIMIT_CORE, 0)
        cpu = max(1, int(remaining + 1.0))
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        except (ValueError, OSError):
            pass
        set_limit(resource.RLIMIT_FSIZE, cap + 1)
        set_limit(resource.RLIMIT_NOFILE, opts["max_open_files"])
        if iso.get("user_namespace"):
            set_limit(resource.RLIMIT_NPROC, opts["max_processes"])
        try:
            resource.setrlimit(resource.RLIMIT_STACK, (64 << 20, resource.getrlimit(resource.RLIMIT_STACK)[1]))
        except (ValueError, OSError):
            pass
        set_limit(resource.RLIMIT_AS, opts["memory_mb"] << 20)
        flags = 0
        if libc is not None:
            prctl(ct, libc, PR_SET_NO_NEW_PRIVS, 1)
            if seccomp is not None and seccomp.install():
                flags |= 1
        if opts["audit_hook"]:
            install_audit_hook(opts["allow_fork"], opts["allow_file_writes"], iso.get("private_proc", False), mypid)
            flags |= 4
        os.write(3, bytes([flags]))
        os.close(3)
        cap_threads(opts["max_processes"])
        for name in ("ctypes", "_ctypes", "ctypes._endian"):
            sys.modules.pop(name, None)
        ct = libc = None
        import io
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False), 1 << 16),
                                                    encoding="utf-8", errors="replace")
        sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False), 1 << 16),
                                                      encoding="utf-8", errors="replace")
        sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False), 1 << 12),
                                                      encoding="utf-8", errors="replace", line_buffering=True)
        sys.argv = ["solution.py"]
        sys.dont_write_bytecode = True
    except BaseException:
        os._exit(EXIT_SETUP)
    try:
        code = compile(code_src, "solution.py", "exec", dont_inherit=True)
    except BaseException:
        os._exit(EXIT_COMPILE)
    del code_src
    import builtins
    g = {"__name__": "__main__", "__builtins__": builtins, "__file__": "solution.py"}
    status = 0
    try:
        if args is None:
            exec(code, g)
        else:
            real_stdout = sys.stdout
            sys.stdout = _Sink()
            exec(code, g)
            fn = g.get(opts["fn_name"])
            if fn is None and isinstance(g.get("Solution"), type):
                fn = getattr(g["Solution"](), opts["fn_name"], None)
            if not callable(fn):
                os._exit(EXIT_NO_FUNCTION)
            result = fn(*args)
            sys.stdout = real_stdout
            text = json.dumps(result, default=repr)
            data = text.encode("utf-8", errors="replace")
            while data:
                data = data[os.write(1, data):]
    except SystemExit as e:
        code_ = e.code
        status = 0 if code_ is None or code_ == 0 else 1
    except BaseException:
        status = 1
        try:
            import traceback
            traceback.print_exc(limit=20)
        except BaseException:
            pass
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
    except BaseException:
        pass
    try:
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        pass
    try:
        g.clear()
        import gc
        gc.collect()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.__stdout__, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            status = status or 1
    os._exit(status)


def cap_threads(limit):
    """At most ``limit`` threads per test case (best effort: RLIMIT_NPROC does not bind root)."""
    import _thread
    start = _thread.start_new_thread
    budget = [limit]
    def start_new_thread(function, args, kwargs=None):
        if budget[0] <= 0:
            raise RuntimeError("can't start new thread (sandbox thread limit)")
        budget[0] -= 1
        return start(function, args, {} if kwargs is None else kwargs)
    _thread.start_new_thread = _thread.start_new = start_new_thread


class _Sink:
    def write(self, s):
        return len(s)
    def flush(self):
        pass


def wait_child(pid, deadline):
    """Wait for ``pid`` until ``deadline``; returns its wait status, or None after killing it on timeout."""
    pfd = None
    try:
        pfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pass
    try:
        if pfd is not None:
            ready = select.select([pfd], [], [], max(0.0, deadline - time.monotonic()))[0]
            if ready:
                return os.waitpid(pid, 0)[1]
        else:
            delay = 0.0005
            while time.monotonic() < deadline:
                done, st = os.waitpid(pid, os.WNOHANG)
                if done:
                    return st
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, 0.01)
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                return st
    finally:
        if pfd is not None:
            os.close(pfd)
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    os.waitpid(pid, 0)
    return None


def reap_strays(pid, pid_ns):
    if pid_ns:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
            except OSError:
                break
    else:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


def pread_all(fd, n):
    chunks, got = [], 0
    while got < n:
        chunk = os.pread(fd, min(n - got, 1 << 20), got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


STATUS_CODES = {"ok": 0, "runtime_error": 1, "timeout": 2, "output_limit": 3, "compile_error": 4,
                "setup_error": 5}
RECORD = struct.Struct("!4sIBIId")


def emit(fd, i, status, out=b"", err=b"", elapsed=0.0):
    """One framed record: magic, case index, status code (255: final), len(out), len(err), seconds."""
    data = RECORD.pack(b"BSR1", i, STATUS_CODES.get(status, 255), len(out), len(err), elapsed) + out + err
    while data:
        data = data[os.write(fd, data):]


def run_cases(opts, blob, ct, libc, iso):
    res_fd = 1
    null_fd = os.open(os.devnull, os.O_RDWR)
    lengths, caps = opts["lengths"], opts["caps"]
    code_src = opts.pop("code")
    deadline = time.monotonic() + opts["timeout"]
    if not iso["private_root"] and not opts["allow_unconfined"]:  # model code could read anything: run none
        emit(res_fd, len(lengths), "done", ",".join(sorted(k for k, v in iso.items() if v) + ["refused"]).encode())
        return
    pid_ns = iso.get("pid_namespace", False)
    # RLIMIT_NPROC is never enforced for kuid 0 (not even inside a user namespace), so process creation
    # is only allowed where the kernel counts this sandbox's processes *and* can kill them all.
    iso["process_limit"] = bool(iso.get("user_namespace") and opts["outer_uid"] != 0)
    opts["allow_fork"] = iso["fork_allowed"] = bool(opts["allow_fork"] and pid_ns and iso["process_limit"])
    seccomp = None
    if libc is not None:
        iso["capabilities_dropped"] = drop_capabilities(ct, libc)
        prctl(ct, libc, PR_SET_NO_NEW_PRIVS, 1)
        if opts["seccomp"]:
            seccomp = SeccompFilter(ct, libc, opts["allow_fork"], opts["allow_file_writes"])
    import io
    io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="replace")  # warm the codec caches
    compile(WARMUP, "warmup.py", "exec")  # the first compile() in a process is ~1 ms of one-off set-up
    gc.collect()
    gc.freeze()
    offset = 0
    for i, (n, cap) in enumerate(zip(lengths, caps)):
        now = time.monotonic()
        if now >= deadline:
            emit(res_fd, i, "timeout")
            break
        in_fd = os.memfd_create("stdin")
        out_fd = os.memfd_create("stdout")
        err_fd = os.memfd_create("stderr")
        status_r, status_w = os.pipe()
        pos = 0
        while pos < n:
            chunk = os.pread(blob, min(n - pos, 1 << 20), offset + pos)
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                view = view[os.write(in_fd, view):]
            pos += len(chunk)
        os.lseek(in_fd, 0, os.SEEK_SET)
        offset += n
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os.close(status_r)
            child(opts, code_src, in_fd, out_fd, err_fd, status_w, null_fd, ct, libc, seccomp, iso,
                  deadline - t0, cap)
            os._exit(EXIT_SETUP)
        os.close(status_w)
        st = wait_child(pid, deadline)
        elapsed = time.monotonic() - t0
        reap_strays(pid, pid_ns)
        try:
            flag = os.read(status_r, 1)
        except OSError:
            flag = b""
        os.close(status_r)
        if flag and i == 0:
            iso["seccomp"] = bool(flag[0] & 1)
            iso["audit_hook"] = bool(flag[0] & 4)
        size = os.fstat(out_fd).st_size
        if st is None:
            status = "timeout"
        elif os.WIFSIGNALED(st):
            sig = os.WTERMSIG(st)
            status = {signal.SIGXCPU: "timeout", signal.SIGXFSZ: "output_limit"}.get(sig, "runtime_error")
        else:
            code = os.WEXITSTATUS(st)
            status = {0: "ok", EXIT_COMPILE: "compile_error", EXIT_SETUP: "setup_error",
                      EXIT_NO_FUNCTION: "runtime_error"}.get(code, "runtime_error")
        if status not in ("timeout", "compile_error", "setup_error") and size > cap:
            status = "output_limit"
        out = pread_all(out_fd, min(size, cap)) if status in ("ok", "runtime_error") else b""
        err = pread_all(err_fd, 4096) if opts["keep_output"] else b""
        for fd in (in_fd, out_fd, err_fd):
            os.close(fd)
        emit(res_fd, i, status, out, err, elapsed)
        if status in ("timeout", "compile_error", "setup_error"):
            break
    emit(res_fd, len(lengths), "done", ",".join(sorted(k for k, v in iso.items() if v)).encode())


def main():
    header_len = struct.unpack("!Q", read_exact(0, 8))[0]
    opts = marshal.loads(read_exact(0, header_len))
    total = sum(opts["lengths"])
    blob = os.memfd_create("inputs")
    copied = 0
    while copied < total:
        chunk = os.read(0, min(total - copied, 1 << 20))
        if not chunk:
            raise EOFError("inputs truncated")
        view = memoryview(chunk)
        while view:
            view = view[os.write(blob, view):]
        copied += len(chunk)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sbx = opts["sandbox_dir"]
    iso = {"user_namespace": False, "network_namespace": False, "mount_namespace": False,
           "pid_namespace": False, "private_proc": False, "private_root": False, "readonly_fs": False, "seccomp": False,
           "capabilities_dropped": False, "audit_hook": False, "rlimits": True, "process_limit": False,
           "fork_allowed": False}
    opts["outer_uid"] = os.getuid()
    if opts["mode"] == "call":
        global json
        import json
    ct, libc = load_libc()
    if opts["namespaces"] and libc is not None and enter_namespaces(ct, libc, iso):
        pid = os.fork()
        if pid:
            st = os.waitpid(pid, 0)[1]
            os._exit(os.WEXITSTATUS(st) if os.WIFEXITED(st) else 1)
        prctl(ct, libc, PR_SET_PDEATHSIG, signal.SIGKILL)
        iso["pid_namespace"] = os.getpid() == 1
        setup_mounts(ct, libc, sbx, opts["allow_file_writes"], opts["allow_fork"], iso)
    if not iso["private_root"]:  # on the host's filesystem: a directory of its own there
        os.makedirs(sbx, mode=0o700, exist_ok=True)
        os.chdir(sbx)
    if libc is not None:
        prctl(ct, libc, PR_SET_DUMPABLE, 0)
    set_limit(resource.RLIMIT_CORE, 0)
    run_cases(opts, blob, ct, libc, iso)
    os._exit(0)


if __name__ == "__main__":
    main()
