# Sandpool's Python zygote (see sandbox/src/zygote/mod.rs and docs/warm-starts.md).
#
# Started by the executor as root in the slot's mount namespace, with the
# language entry's interpreter flags and environment: `python3 -B -c <this>
# MODULE...`. It imports MODULE... once, then forks one child per run and
# never runs user code itself. Everything per run happens in the child, which
# enters the run's namespaces, drops every privilege exactly as the cold path
# does (sandbox/src/namespaces/child.rs prog_main) and then runs the program the way
# `python3 main.py` would.
#
# The zygote never reads a request: it receives only two descriptors per run
# (the run's socket and its init's pid namespace), so nothing of one run's
# data is in its memory when it forks the next run. Namespaces come as
# namespace files, not pidfds: setns(pidfd) needs ptrace access to the init,
# which a pod without CAP_SYS_PTRACE lacks (sandbox/src/namespaces/zygote_init.rs).
#
# Descriptor 3 is the control socket (SOCK_SEQPACKET), 4 the zygote's own pid
# namespace (the slot's mount namespace has no /proc between runs).
#
# Restricted mode (`--restricted` first, sandbox/src/restricted/warm.rs): started
# as the executor's uid with no namespaces to enter, only descriptor 3. A run is
# `R` and its socket; the child sends its pid (`C`), then confines itself as the
# cold path's pre-exec does (sandbox/src/restricted/spawn.rs): a session of its
# own, uid, rlimits, no_new_privs, the run's Landlock domain, seccomp; and runs
# the program only once the executor, which now watches that pid, says `G`. The
# zygote does not reap a run's child until the executor shuts its end of the
# run's socket (it watches for that, never reading the socket): the child's pid
# numbers the run's process group, which the executor kills and sweeps first,
# and must not be reused before it has. A child the executor let go of before
# its program started (a cancelled run) is killed then.
import os
import sys

# Top-level names of the modules the interpreter's own start-up imported: a
# cold `python3 main.py` has them too, so the work dir cannot shadow them.
_STARTUP = set(m.partition(".")[0] for m in sys.modules)

# What the run's own path uses once the work dir may shadow modules (see
# `_unshadow`): bound now, never imported by name after the fork.
import atexit as _atexit  # noqa: E402
import gc as _gc  # noqa: E402
import signal as _signal  # noqa: E402
import types as _types  # noqa: E402
from importlib.machinery import BuiltinImporter as _BuiltinImporter  # noqa: E402
from importlib.machinery import SourceFileLoader as _SourceFileLoader  # noqa: E402

_CLONE_NEWPID = 0x20000000
_CLONE_NEWCGROUP = 0x02000000
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_PR_SET_PDEATHSIG = 1
_SYS_LANDLOCK_RESTRICT_SELF = {"x86_64": 446, "aarch64": 446}


def _zygote():
    import ctypes
    import socket
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    ctl = socket.socket(fileno=3)
    args = sys.argv[1:]
    restricted = args[:1] == ["--restricted"]
    if restricted:
        args = args[1:]
        own_pid_ns = None
    else:
        own_pid_ns = 4
        os.set_inheritable(own_pid_ns, False)

    def setns(fd, flags):
        if libc.setns(fd, flags) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))

    failed = []
    import importlib

    if args[:1] == ["--command"] and len(args) > 1:
        # A `-c` program every run of this zygote runs (a session's driver): compiled once.
        global _COMMAND
        _COMMAND = (args[1], compile(args[1], "<string>", "exec", dont_inherit=True))
        args = args[2:]
    for name in args:
        try:
            importlib.import_module(name)
        except BaseException as e:  # a preload that fails is reported, never fatal
            failed.append("%s: %s" % (name, type(e).__name__))
    # Imported now so that the per-run path imports nothing.
    import io
    import signal
    import resource  # noqa: F401
    import gc

    _PRELOADED.update(m.partition(".")[0] for m in list(sys.modules))
    _PRELOADED.difference_update(_STARTUP)
    global _SockFprog
    _SockFprog = _sock_fprog(ctypes)

    gc.collect()
    # Objects already allocated are never scanned again: each run's collector
    # does not touch (and copy) the zygote's pages.
    gc.freeze()
    ctl.send(("ready\n" + "\n".join(failed)).encode())

    # Children are reaped as they end, not waited for: a session seat's child
    # lives for the whole session while the zygote forks the next ones. A
    # SIGCHLD wakes the loop through `wakeup` (set_wakeup_fd).
    import select

    children = {}  # pid -> the run's socket, where its wait status goes
    released = set()  # restricted: pids the executor let us reap
    wakeup, wakeup_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)
    signal.set_wakeup_fd(wakeup_w)

    poll = select.poll()
    poll.register(ctl, select.POLLIN)
    poll.register(wakeup, select.POLLIN)
    by_fd = {}  # restricted: the run's socket -> its child's pid

    def fork_failed(run_fd, err):
        # Said on the run's socket: the executor starts the run again cold.
        try:
            os.write(run_fd, b"E" + err.encode())
        except OSError:
            pass
        os.close(run_fd)

    def reap_released():
        for pid in list(released):
            try:
                got, status, ru = os.wait4(pid, os.WNOHANG)
            except ChildProcessError:
                got, status, ru = pid, None, None
            if got == 0:
                continue
            released.discard(pid)
            fd = children.pop(pid, None)
            if fd is None:
                continue
            by_fd.pop(fd, None)
            try:
                if status is not None:
                    # The leader's own rusage (its reaped children's included): restricted
                    # runs have no cgroup that counts it.
                    us = lambda t: int(round(t * 1e6))  # noqa: E731
                    os.write(fd, b"S" + struct.pack("<iqqq", status, us(ru.ru_utime), us(ru.ru_stime), ru.ru_maxrss))
            except OSError:
                pass
            os.close(fd)

    def reap():
        if restricted:
            return reap_released()
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            fd = children.pop(pid, None)
            if fd is not None:
                try:
                    os.write(fd, b"S" + struct.pack("i", status))
                except OSError:
                    pass
                os.close(fd)

    while True:
        reap()
        events = poll.poll()
        ready = [fd for fd, _ev in events]
        for fd, _ev in events:
            pid = by_fd.get(fd)
            if pid is not None and pid not in released:
                # The executor is done with the run (or dropped it): end the child if it
                # still lives, and reap it.
                poll.unregister(fd)
                released.add(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if wakeup in ready:
            try:
                while os.read(wakeup, 512):
                    pass
            except BlockingIOError:
                pass
        if ctl.fileno() not in ready:
            continue
        try:
            msg, anc, _flags, _addr = ctl.recvmsg(16, socket.CMSG_SPACE(2 * 4))
        except (InterruptedError, BlockingIOError):
            continue
        if not msg:
            os._exit(0)
        fds = []
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(struct.unpack("%di" % (len(data) // 4), data[: len(data) - len(data) % 4]))
        if restricted and msg == b"R" and len(fds) == 1:
            run_fd, zygote_pid = fds[0], os.getpid()
            try:
                pid = os.fork()
            except OSError as e:
                pid, err = -1, "%s (errno %d)" % (e.strerror, e.errno)
            if pid == 0:
                try:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for fd in [wakeup, wakeup_w, *children.values()]:
                        os.close(fd)
                    os.close(ctl.detach())
                    run = _child_restricted(run_fd, zygote_pid, libc, ctypes, signal, socket, struct)
                except BaseException as e:
                    try:
                        os.write(run_fd, ("Esetting up the run: %r" % (e,)).encode())
                    finally:
                        os._exit(126)
                return run
            if pid > 0:
                children[pid] = run_fd
                by_fd[run_fd] = pid
                # Only the hang-up: the socket's data is the child's to read.
                poll.register(run_fd, select.POLLRDHUP)
                continue
            fork_failed(run_fd, err)
            continue
        if restricted or msg != b"F" or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            ctl.send(b"bad request")
            continue
        run_fd, pid_ns = fds
        pid = -1
        err = ""
        try:
            # Only this process's future children go there; restored below.
            setns(pid_ns, _CLONE_NEWPID)
            try:
                pid = os.fork()
            finally:
                if pid != 0:
                    setns(own_pid_ns, _CLONE_NEWPID)
        except OSError as e:
            err = "%s (errno %d)" % (e.strerror, e.errno)
        if pid == 0:
            try:
                # Nothing of the zygote's loop, nor of other runs, goes on in the run.
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in [wakeup, wakeup_w, own_pid_ns, pid_ns, *children.values()]:
                    os.close(fd)
                os.close(ctl.detach())
                run = _child(run_fd, libc, setns, ctypes, signal, socket, struct)
            except BaseException as e:
                # A sandbox error, not the program's: said on the run's socket.
                try:
                    if isinstance(e, _InitNotReady):
                        os.write(run_fd, b"N")
                    os.write(run_fd, ("Esetting up the run: %r" % (e,)).encode())
                finally:
                    os._exit(126)
            return run
        os.close(pid_ns)
        if pid > 0:
            children[pid] = run_fd
            continue
        fork_failed(run_fd, err)


class _InitNotReady(Exception):
    pass


def _sock_fprog(ctypes):
    """struct sock_fprog, made before the first fork (a class per run costs pages)."""

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    return SockFprog


def _recv_exact(sock, n, fds, socket, struct):
    buf = bytearray()
    while len(buf) < n:
        msg, anc, _f, _a = sock.recvmsg(n - len(buf), socket.CMSG_SPACE(16 * 4))
        if not msg:
            raise EOFError("the executor closed the run socket")
        buf += msg
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(struct.unpack("%di" % (len(data) // 4), data[: len(data) - len(data) % 4]))
    return bytes(buf)


def _child(run_fd, libc, setns, ctypes, signal, socket, struct):
    """Enters the run's sandbox; returns what `_run` needs."""
    sock = socket.socket(fileno=run_fd)
    fds = []
    (n,) = struct.unpack("<I", _recv_exact(sock, 4, fds, socket, struct))
    body = _recv_exact(sock, n, fds, socket, struct)
    sock.detach()
    # A seat's init lives outside the seat's cgroup: its cgroup namespace is
    # not the run's, and the child makes its own once it joined the cgroup.
    argv, env, cwd, prefix, uid, gid, rlimits, filters, n_ns, n_procs, new_cgroup_ns, restricted, scoped = _parse(
        body, struct
    )
    if restricted or len(fds) != 4 + n_ns + n_procs + scoped:
        raise RuntimeError("expected %d descriptors, got %d" % (4 + n_ns + n_procs + scoped, len(fds)))
    namespaces = fds[4 : 4 + n_ns]
    procs = fds[4 + n_ns : 4 + n_ns + n_procs]
    # No network namespace: the Landlock ruleset scoping abstract unix sockets and signals.
    landlock = fds[4 + n_ns + n_procs] if scoped else -1
    # The init mounts the run's /work, /tmp, /dev/shm and /proc meanwhile.
    ready = os.read(fds[3], 1)
    os.close(fds[3])
    if not ready:
        raise _InitNotReady()

    # Into the slot's cgroup first (its memory, pids and CPU accounting), then
    # the run's namespaces: pid already (the zygote forked us into it).
    for fd in procs:
        os.write(fd, b"0")
        os.close(fd)
    if new_cgroup_ns and libc.unshare(_CLONE_NEWCGROUP) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "unshare(CLONE_NEWCGROUP): " + os.strerror(e))
    # ipc, uts, cgroup, net, then mount (which changes our root).
    for fd in namespaces:
        setns(fd, 0)
        os.close(fd)
    _set_cmdline(argv, ctypes)
    # As the cold path's init does for the program: the OOM killer's first choice.
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for i, fd in enumerate(fds[:3]):
        os.dup2(fd, i)
        os.close(fd)
    os.setsid()
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    import resource

    for res, cur, mx in rlimits:
        resource.setrlimit(res, (cur, mx))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "no_new_privs")
    if landlock >= 0:
        nr = _SYS_LANDLOCK_RESTRICT_SELF.get(os.uname().machine)
        if nr is None or libc.syscall(nr, landlock, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
        os.close(landlock)

    _install_filters(filters, libc, ctypes)
    os.chdir(cwd)
    # Everything from here on is the program's: a failure before this line
    # lets the executor run it again cold.
    os.write(run_fd, b"P")
    os.closerange(3, 1 << 20)
    return argv, env, prefix


def _child_restricted(run_fd, zygote_pid, libc, ctypes, signal, socket, struct):
    """Confines this process as a restricted cold run is confined; returns what `_run` needs.

    The same steps, in the same order, as `Confinement::apply` between fork and
    exec (sandbox/src/restricted/spawn.rs), with the uid first as std's spawn
    sets it there.
    """
    # Dies with the zygote, which dies with the executor: nothing of a run outlives it.
    if libc.prctl(_PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_PDEATHSIG")
    if os.getppid() != zygote_pid:
        raise RuntimeError("the zygote is gone")
    # First: the executor numbers the run (its process group) and watches it by this pid.
    os.write(run_fd, b"C" + struct.pack("<i", os.getpid()))
    sock = socket.socket(fileno=run_fd)
    fds = []
    (n,) = struct.unpack("<I", _recv_exact(sock, 4, fds, socket, struct))
    body = _recv_exact(sock, n, fds, socket, struct)
    sock.detach()
    argv, env, cwd, prefix, uid, gid, rlimits, filters, n_ns, n_procs, _new_cg, restricted, _scoped = _parse(body, struct)
    if not restricted or n_ns or n_procs or len(fds) != 4:
        raise RuntimeError("not a restricted run (%d descriptors)" % len(fds))
    landlock = fds[3]
    for i, fd in enumerate(fds[:3]):
        os.dup2(fd, i)
        os.close(fd)
    _set_cmdline(argv, ctypes)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    # A session of its own, whose group (numbered as this process) is the run's.
    os.setsid()
    if os.getuid() != uid or os.getgid() != gid:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    import resource

    for res, cur, mx in rlimits:
        resource.setrlimit(res, (cur, mx))
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "no_new_privs")
    nr = _SYS_LANDLOCK_RESTRICT_SELF.get(os.uname().machine)
    if nr is None or libc.syscall(nr, landlock, 0) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    os.close(landlock)
    _install_filters(filters, libc, ctypes)
    os.chdir(cwd)
    # The executor watches this pid now (or let the run go: then nothing runs).
    if os.read(run_fd, 1) != b"G":
        os._exit(126)
    os.write(run_fd, b"P")
    os.closerange(3, 1 << 20)
    return argv, env, prefix


def _install_filters(filters, libc, ctypes):
    """Installs each seccomp filter (raw `sock_filter` programs), in order."""
    for f in filters:
        buf = ctypes.create_string_buffer(f, len(f))
        prog = _SockFprog(len(f) // 8, ctypes.addressof(buf))
        if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "seccomp")


def _parse(body, struct):
    """The run, as `RunRequest::encode` wrote it."""
    pos = 0

    def u32():
        nonlocal pos
        (v,) = struct.unpack_from("<I", body, pos)
        pos += 4
        return v

    def u64():
        nonlocal pos
        (v,) = struct.unpack_from("<Q", body, pos)
        pos += 8
        return v

    def blob():
        nonlocal pos
        n = u32()
        pos += n
        return body[pos - n : pos]

    argv = [blob().decode() for _ in range(u32())]
    env = [blob() for _ in range(u32())]
    cwd = blob().decode()
    prefix = u32()
    uid, gid = u32(), u32()
    rlimits = [(u32(), u64(), u64()) for _ in range(u32())]
    filters = [blob() for _ in range(u32())]
    n_ns = u32()
    n_procs = u32()
    new_cgroup_ns = u32()
    restricted = u32()
    scoped = u32()
    return argv, env, cwd, prefix, uid, gid, rlimits, filters, n_ns, n_procs, new_cgroup_ns, restricted, scoped


def _set_cmdline(argv, ctypes):
    """Makes /proc/self/cmdline read as the run's argv, as an exec'd program's does.

    The kernel reads it from this process's own memory, the zygote's argv
    (`-c` and this whole file: about 20 KB), which is overwritten in place,
    the rest padded with NULs (so `ps` and `pgrep -f` see `python3 -B main.py
    ARGS`). An argv longer than that area is cut. Needs the run's /proc.
    """
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        # Fields after the command name; arg_start and arg_end are fields 48 and 49.
        fields = stat[stat.rindex(b")") + 2 :].split()
        start, end = int(fields[45]), int(fields[46])
    except (OSError, ValueError, IndexError):
        return
    size = end - start
    if size <= 0:
        return
    data = b"".join(a.encode(errors="surrogateescape") + b"\0" for a in argv)[: size - 1]
    ctypes.memmove(start, data, len(data))
    ctypes.memset(start + len(data), 0, size - len(data))


def _run(argv, env, prefix, io):
    """Makes this process look like `argv` was exec'd, then runs the script
    (or, for `python3 FLAGS -c CODE ARGS`, the code: a session's driver)."""
    command = argv[prefix] == "-c" and len(argv) > prefix + 1
    if command:
        path = "<string>"
        script_dir = os.getcwd()
    else:
        path = os.path.abspath(argv[prefix])
        script_dir = os.path.dirname(path)

    os.environ.clear()
    for kv in env:
        k, _, v = kv.partition(b"=")
        os.environb[k] = v
    # `python3 -c CODE A B` has sys.argv ['-c', 'A', 'B'].
    sys.argv = ["-c"] + argv[prefix + 2 :] if command else argv[prefix:]
    sys.orig_argv = list(argv)
    # The zygote's `-c` put '' first where a script's directory goes (not
    # with -I or -P, which leave both out); a `-c` program keeps '' (its
    # working directory), whose files shadow preloaded modules all the same.
    if sys.path and sys.path[0] == "":
        if not command:
            sys.path[0] = script_dir
        _unshadow(script_dir)
    # The zygote's finder for '' must not serve the script's directory; every
    # other entry's cached finder stays valid (the same read-only
    # directories), which keeps the script's imports fast.
    for entry in ("", script_dir):
        sys.path_importer_cache.pop(entry, None)

    # Fresh standard streams on the run's descriptors, configured as the
    # interpreter's start-up configured the zygote's (same flags, same env).
    def stream(fd, old, write):
        buf = io.open(fd, "wb" if write else "rb", buffering=-1, closefd=False)
        s = io.TextIOWrapper(
            buf,
            encoding=old.encoding,
            errors=old.errors,
            newline="\n",
            line_buffering=old.line_buffering or (write and os.isatty(fd)),
            write_through=old.write_through,
        )
        s.mode = "w" if write else "r"
        # What the interpreter's own streams are called (not their descriptors).
        buf.raw.name = old.buffer.raw.name
        return s

    sys.stdin = sys.__stdin__ = stream(0, sys.__stdin__, False)
    sys.stdout = sys.__stdout__ = stream(1, sys.__stdout__, True)
    sys.stderr = sys.__stderr__ = stream(2, sys.__stderr__, True)

    # Per-process random state a preloaded module seeded at import, which
    # every fork would otherwise share (`random` reseeds itself after fork).
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        np_random.seed()
    mp_process = sys.modules.get("multiprocessing.process")
    if mp_process is not None:
        mp_process.current_process().authkey = os.urandom(32)

    # The names, and their order, of a script's __main__.
    main = _types.ModuleType("__main__")
    main.__annotations__ = {}
    main.__builtins__ = __builtins__
    if command:
        main.__loader__ = _BuiltinImporter
    else:
        main.__loader__ = _SourceFileLoader("__main__", path)
        main.__file__ = path
        main.__cached__ = None
    sys.modules["__main__"] = main

    # The script runs this many frames deeper than `python3 main.py` runs it
    # (measured at start-up, see _DEPTH); the recursion limit is raised by as
    # many, and reported without them.
    depth = _DEPTH
    real_get, real_set = sys.getrecursionlimit, sys.setrecursionlimit

    def getrecursionlimit():
        return real_get() - depth

    def setrecursionlimit(limit):
        real_set(limit + depth)

    getrecursionlimit.__doc__, setrecursionlimit.__doc__ = real_get.__doc__, real_set.__doc__
    real_set(real_get() + depth)
    sys.getrecursionlimit, sys.setrecursionlimit = getrecursionlimit, setrecursionlimit
    del stream, np_random

    try:
        if command and _COMMAND is not None and argv[prefix + 1] == _COMMAND[0]:
            code = _COMMAND[1]
        else:
            if command:
                source = argv[prefix + 1]
            else:
                with io.open_code(path) as f:
                    source = f.read()
            code = compile(source, path, "exec", dont_inherit=True)
            del source
        exec(code, main.__dict__)
    except SystemExit as e:
        _finish(_exit_code(e), False, main)
    except BaseException as e:
        tb = e.__traceback__
        # Drop this module's frames: the traceback starts at the script.
        while tb is not None and tb.tb_frame.f_code.co_filename != path:
            tb = tb.tb_next
        e.__traceback__ = tb
        sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
        sys.excepthook(type(e), e, tb)
        del e, tb
        _finish(1, isinstance(sys.last_value, KeyboardInterrupt), main)
    _finish(0, False, main)


def _exit_code(e):
    """The exit status of an uncaught SystemExit, as the interpreter computes it."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(str(code))
        sys.stderr.write("\n")
    except Exception:
        pass
    return 1


def _finish(code, interrupted, main):
    """Py_FinalizeEx's observable part, then _exit.

    Non-daemon threads are waited for, atexit handlers run, the script's
    globals are cleared (their __del__ methods run), standard streams are
    flushed (a failed flush makes the status 120). Tearing down every
    preloaded module, as a full finalization would, only copies the
    zygote's pages for nothing.
    """
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:
            pass
    _atexit._run_exitfuncs()
    try:
        main.__dict__.clear()
        del main
        _gc.collect()
    except BaseException:
        pass
    for s in (sys.stdout, sys.stderr):
        try:
            # As the interpreter does: a closed stream is left alone.
            if s is not None and not s.closed:
                s.flush()
        except BaseException:
            code = 120
    if interrupted:
        # `python3 main.py` ends by SIGINT after an unhandled KeyboardInterrupt.
        _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
        os.kill(os.getpid(), _signal.SIGINT)
    os._exit(code)


def _unshadow(work):
    """Forgets preloaded modules the work dir shadows: `python3 main.py` would import the run's own."""
    try:
        names = os.listdir(work)
    except OSError:
        return
    tops = set()
    for n in names:
        if n.endswith(".py"):
            tops.add(n[:-3])
        elif "." not in n:
            tops.add(n)
    # Usually nothing (the work dir holds main.py): then sys.modules is not
    # walked, which would touch, and copy, pages of every module's name.
    shadowed = tops & _PRELOADED
    if shadowed:
        for m in [m for m in sys.modules if m.partition(".")[0] in shadowed]:
            del sys.modules[m]


# The `-c` program given with --command, and its code: (source, code) or None.
_COMMAND = None

# Filled in once the preload list is imported: every top-level module that
# importing it brought in (numpy's own imports too), less the start-up's.
_PRELOADED = set()

# A script's module frame is the first frame of `python3 main.py`, as this
# one is; `_run` execs it from one call deeper (measured, not assumed: the
# interpreter counts some C calls too).
def _r():
    global _n
    _n += 1
    _r()


def _headroom_exec():
    """How deep code exec'd here, as `_run` execs the script, may recurse."""
    global _n
    _n = 0
    exec("try:\n    _r()\nexcept RecursionError:\n    pass\n", globals())
    return _n


_n = 0
try:
    _r()
except RecursionError:
    pass
_DEPTH = _n - _headroom_exec()
del _r, _n, _headroom_exec

_run_args = _zygote()
# Only a run's child gets here; after the script the interpreter finalizes as for any program.
import io as _io

_run(*_run_args, _io)
