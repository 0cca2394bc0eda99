# Sandpool's Python session driver: a REPL that takes cells through files.
#
# Runs inside the session's sandbox as `python3 -c <this>`, for the session's
# whole life. The executor writes call N as /work/.sandpool/in/N.json (and
# N.stdin), then the empty marker N.go; the driver runs it and answers with
# /work/.sandpool/out/N/{stdout,stderr} and, last, out/N.json (renamed into
# place, so its existence means the reply is complete). Output goes to /tmp
# first and only its first `output_bytes` reach /work.
#
# Everything here runs with the user's code, as the user's uid: the executor
# trusts nothing it reads back (caps, parses defensively, enforces wall time).
import sys

# The driver's own imports must not find a cell's files (a json.py in /work);
# cells get the working directory back on their import path below.
_CWD_ENTRY = sys.path.pop(0) if sys.path and sys.path[0] in ("", "/work") else None

import ast
import fcntl
import io
import json
import linecache
import os
import resource
import shutil
import subprocess
import threading
import time
import traceback
import types

BASE = "/work/.sandpool"
IN = BASE + "/in"
OUT = BASE + "/out"
SCRATCH = "/tmp/.sandpool"
RESERVE = BASE + "/reserve"
# Processes started in the background (E2B's commands): procs/N/{stdout,stderr}, then
# procs/N/exit (the exit code, or minus the signal), written by a wrapper shell as the
# command ends, or by the driver when it reaps one killed with its wrapper.
PROCS = BASE + "/procs"
WRAP = 'bash -c "$1"; c=$?; printf %s "$c" > "$2.tmp" && mv "$2.tmp" "$2"; exit "$c"'
_procs = {}
# Ids of background processes: never reused in a session, also across interpreter restarts
# (each start has its own epoch), so a caller's old id never names a new process.
_next_pid = [int(os.environ.get("SANDPOOL_EPOCH", "1") or 1) % 40000 * 100000]


def _cpu_seconds():
    a = resource.getrusage(resource.RUSAGE_SELF)
    b = resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def _capped(path, cap):
    with open(path, "rb") as f:
        data = f.read(cap + 1)
    return data[:cap], len(data) > cap


def _set_cpu_limit(seconds):
    """Per-call CPU: the soft RLIMIT_CPU at what this process used plus the call's share."""
    if seconds <= 0:
        return
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        used = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(used.ru_utime + used.ru_stime) + int(seconds) + 1
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (ValueError, OSError):
        pass


def _run_cell(src, ns):
    """Runs `src` like a notebook cell; returns the final expression's value (or None)."""
    # Tracebacks show the failing line, as in a notebook.
    linecache.cache["<cell>"] = (len(src), None, src.splitlines(True), "<cell>")
    tree = ast.parse(src, "<cell>", "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, "<cell>", "exec"), ns)
    if last is not None:
        return eval(compile(last, "<cell>", "eval"), ns)
    return None


def _user_traceback(e):
    """The exception's traceback without the driver's own frames."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(e), e, tb))


def _clean(text):
    """`text` as valid UTF-8: lone surrogates (odd file names, a custom __repr__) escaped."""
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def _give_up_reserve():
    """Frees the space the executor keeps back in /work (it fills it again after the call)."""
    try:
        os.unlink(RESERVE)
    except OSError:
        pass


def _reply(n, meta, out_path, err_path, cap):
    for k in ("display", "error", "cwd"):
        meta[k] = _clean(meta.get(k, ""))
    try:
        _write_reply(n, meta, out_path, err_path, cap)
    except OSError:
        # /work is full (the cell filled it): the reply goes out without its output.
        _give_up_reserve()
        meta["reserve_used"] = True
        meta["display"] = meta["display"][:4096]
        _write_reply(n, meta, os.devnull, os.devnull, cap)


def _write_reply(n, meta, out_path, err_path, cap):
    d = "%s/%d" % (OUT, n)
    os.makedirs(d, exist_ok=True)
    for name, path in (("stdout", out_path), ("stderr", err_path)):
        data, cut = _capped(path, cap)
        meta[name + "_truncated"] = cut
        with open("%s/%s" % (d, name), "wb") as f:
            f.write(data)
    tmp = "%s/%d.json.tmp" % (OUT, n)
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(meta, f, ensure_ascii=False)
    os.rename(tmp, "%s/%d.json" % (OUT, n))


def _open_regular(path, mode="rb"):
    """Opens `path` only if it is a regular file itself: a FIFO, socket or link a cell left at
    a request's name is refused (an open of a FIFO would wait for a writer for ever)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_mode & 0o170000 != 0o100000:
            raise OSError("not a regular file: %s" % path)
        return os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise


def _is_regular(path):
    try:
        return os.lstat(path).st_mode & 0o170000 == 0o100000
    except OSError:
        return False


def _forget(n):
    """Removes call n's request and reply: the executor has read it once call n+1 arrives."""
    for p in ("%s/%d.json" % (IN, n), "%s/%d.stdin" % (IN, n), "%s/%d.go" % (IN, n), "%s/%d.json" % (OUT, n)):
        try:
            os.unlink(p)
        except OSError:
            pass
    shutil.rmtree("%s/%d" % (OUT, n), ignore_errors=True)


def _write_exit(i, code):
    path = "%s/%d/exit" % (PROCS, i)
    if os.path.exists(path):
        return
    with open(path + ".tmp", "w") as f:
        f.write(str(code))
    os.rename(path + ".tmp", path)


def _reap():
    """Collects the background processes that ended (no zombies), noting each one's end."""
    for i, (p, _) in list(_procs.items()):
        code = p.poll()
        if code is not None:
            del _procs[i]
            try:
                _write_exit(i, code)
            except OSError:
                pass


def _op(req):
    """A background-process operation; its answer (JSON) goes back as the call's display."""
    kind = req.get("kind")
    if kind == "spawn":
        cap = int(req.get("max_running", 0) or 0)
        running = sum(1 for p, _ in _procs.values() if p.poll() is None)
        if cap and running >= cap:
            return {"error": "resource_exhausted", "message": "this sandbox already runs %d background processes (the per-sandbox cap); wait for one to end or kill one" % running}
        _next_pid[0] += 1
        i = _next_pid[0]
        d = "%s/%d" % (PROCS, i)
        os.makedirs(d)
        with open(d + "/stdout", "wb") as o, open(d + "/stderr", "wb") as e:
            p = subprocess.Popen(
                ["bash", "-c", WRAP, "sandpool-proc", req.get("source", ""), d + "/exit"],
                stdin=subprocess.PIPE if req.get("stdin") else subprocess.DEVNULL,
                stdout=o, stderr=e, start_new_session=True,
            )
        if p.stdin is not None:
            os.set_blocking(p.stdin.fileno(), False)
        _procs[i] = (p, req.get("config") or {})
        return {"pid": i}
    if kind == "procs":
        return {"processes": [{"pid": i, "config": c} for i, (p, c) in sorted(_procs.items()) if p.poll() is None]}
    entry = _procs.get(int(req.get("pid", 0)))
    if entry is None or entry[0].poll() is not None:
        return {"error": "not_found", "message": "no running process with pid %s" % req.get("pid")}
    p = entry[0]
    if kind == "signal":
        os.killpg(p.pid, int(req.get("signal", 9)))
        return {}
    if kind == "input":
        if p.stdin is None or p.stdin.closed:
            return {"error": "failed_precondition", "message": "the process was started without stdin, or its stdin is closed"}
        data = bytes.fromhex(req.get("data", ""))
        try:
            while data:
                data = data[os.write(p.stdin.fileno(), data):]
        except BlockingIOError:
            return {"error": "resource_exhausted", "message": "the process is not reading its stdin (its pipe is full)"}
        except BrokenPipeError:
            return {"error": "failed_precondition", "message": "the process closed its stdin"}
        return {}
    if kind == "close_stdin":
        if p.stdin is not None and not p.stdin.closed:
            p.stdin.close()
        return {}
    return {"error": "invalid_argument", "message": "unknown operation %r" % kind}


# Full pause (docs/sessions.md, "Pause and resume"): the namespace's names that can be
# serialised, written by the driver itself to STATE_OUT (archived beside /work by the
# executor, which never reads it) and read back from STATE_IN by the next start of this
# session's driver, wherever it runs.
STATE_OUT = BASE + "/sandpool-state"
STATE_IN = BASE + "/state"
_NOT_STATE = {"__builtins__", "__name__", "__doc__", "__loader__", "__spec__", "__package__",
              "__annotations__", "__file__", "__cached__"}


def _pickle_lib():
    """cloudpickle (functions and classes of the session by value), else pickle; the
    library, not a cell's file of the same name in the working directory."""
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if p not in ("", "/work")]
    try:
        import cloudpickle as lib
    except ImportError:
        import pickle as lib
    finally:
        sys.path[:] = saved
    return lib


def _save(req, ns):
    """Writes what can be kept of `ns` to STATE_OUT, at most `max_bytes` of it (the largest
    names go first when it would not fit); answers the names that could not be kept."""
    import pickle

    lib = _pickle_lib()
    cap = max(0, int(req.get("max_bytes", 0) or 0))
    modules, values, lost = {}, {}, []
    for name, value in list(ns.items()):
        if name in _NOT_STATE or not isinstance(name, str):
            continue
        if isinstance(value, types.ModuleType):
            # Re-imported on resume: only its name is kept.
            if getattr(value, "__name__", None) in sys.modules:
                modules[name] = value.__name__
            else:
                lost.append(name)
            continue
        try:
            values[name] = lib.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:
            lost.append(name)
    total = 0
    for name in sorted(values, key=lambda k: len(values[k])):
        total += len(values[name])
        if total > cap:
            lost.append(name)
            del values[name]
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = ""
    state = {"v": 1, "cwd": cwd, "modules": modules, "values": values}
    try:
        with open(STATE_OUT + ".tmp", "wb") as f:
            pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.rename(STATE_OUT + ".tmp", STATE_OUT)
    except OSError as e:
        try:
            os.unlink(STATE_OUT + ".tmp")
        except OSError:
            pass
        return {"saved": False, "not_kept": sorted(set(lost) | set(values) | set(modules)), "error": str(e)}
    return {"saved": True, "not_kept": sorted(lost)}


def _rebind(f, ns):
    """A function loaded by value has globals of its own: it gets the session's back."""
    g = types.FunctionType(f.__code__, ns, f.__name__, f.__defaults__, f.__closure__)
    g.__kwdefaults__ = f.__kwdefaults__
    g.__dict__.update(f.__dict__)
    g.__qualname__, g.__doc__, g.__module__ = f.__qualname__, f.__doc__, f.__module__
    g.__annotations__ = f.__annotations__
    return g


def _restore(ns):
    """Loads STATE_IN (a full resume's), else STATE_OUT, into `ns` once, then removes it; a
    name that does not load is left out."""
    import importlib
    import pickle

    # STATE_OUT too: the session's own save that it went on from (a snapshot's or a fork's
    # source, or a pause that failed after saving), so its interpreter keeps its names.
    state = None
    for path in (STATE_IN, STATE_OUT):
        try:
            with _open_regular(path) as f:
                state = pickle.load(f)
        except FileNotFoundError:
            continue
        except BaseException:
            state = None
        try:
            os.unlink(path)
        except OSError:
            pass
        break
    if not isinstance(state, dict):
        return
    for name, mod in dict(state.get("modules") or {}).items():
        try:
            ns[name] = importlib.import_module(mod)
        except BaseException:
            pass
    _pickle_lib()
    for name, data in dict(state.get("values") or {}).items():
        try:
            ns[name] = pickle.loads(data)
        except BaseException:
            pass
    for name, value in list(ns.items()):
        if isinstance(value, types.FunctionType) and value.__module__ == "__main__" and value.__globals__ is not ns:
            ns[name] = _rebind(value, ns)
        elif isinstance(value, type) and value.__module__ == "__main__":
            for k, v in list(vars(value).items()):
                if isinstance(v, types.FunctionType) and v.__globals__ is not ns:
                    setattr(value, k, _rebind(v, ns))
    try:
        if state.get("cwd"):
            os.chdir(state["cwd"])
    except OSError:
        pass


class _Live:
    """Copies a cell's output, as it is written, from its scratch files to
    /work/.sandpool/live/<id>/ (at most `cap` bytes each), for the executor to stream (E2B's
    run_code). Only when the request asks; stopped before the driver writes a traceback."""

    def __init__(self, live_id, paths, cap):
        self.dir = "%s/live/%s" % (BASE, live_id)
        shutil.rmtree("%s/live" % BASE, ignore_errors=True)
        os.makedirs(self.dir)
        self.paths, self.cap, self.sent = paths, cap, {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _copy(self):
        for name, src in self.paths:
            sent = self.sent.get(name, 0)
            if sent >= self.cap:
                continue
            with open(src, "rb") as f:
                f.seek(sent)
                data = f.read(min(self.cap - sent, 1 << 16))
            if data:
                with open("%s/%s" % (self.dir, name), "ab") as o:
                    o.write(data)
                self.sent[name] = sent + len(data)

    def _run(self):
        while not self.stop.wait(0.03):
            try:
                self._copy()
            except Exception:
                return  # a full /work, say: the reply still carries the output

    def close(self):
        self.stop.set()
        self.thread.join()


def _call(n, req, ns):
    if req.get("kind") in ("spawn", "procs", "signal", "input", "close_stdin", "save"):
        meta = {"n": n, "status": "ok", "display": "", "exit_code": 0, "error": ""}
        _set_cpu_limit(float(req.get("cpu_seconds", 0)))
        try:
            meta["display"] = json.dumps(_save(req, ns) if req.get("kind") == "save" else _op(req))
        except Exception as e:
            meta["display"] = json.dumps({"error": "internal", "message": "%s: %s" % (type(e).__name__, e)})
        try:
            meta["cwd"] = os.getcwd()
        except OSError:
            meta["cwd"] = ""
        _reply(n, meta, os.devnull, os.devnull, 1)
        return
    cap = max(1, int(req.get("output_bytes", 1 << 20)))
    out_path, err_path = "%s/out" % SCRATCH, "%s/err" % SCRATCH
    stdin_path = "%s/%d.stdin" % (IN, n)
    if not _is_regular(stdin_path):
        stdin_path = os.devnull
    meta = {"n": n, "status": "ok", "display": "", "exit_code": 0, "error": ""}
    cpu0 = _cpu_seconds()
    _set_cpu_limit(float(req.get("cpu_seconds", 0)))
    try:
        fin = _open_regular(stdin_path) if stdin_path != os.devnull else open(os.devnull, "rb")
    except OSError:
        fin = open(os.devnull, "rb")
    with fin, open(out_path, "wb") as fout, open(err_path, "wb") as ferr:
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except Exception:
                pass
        os.dup2(fin.fileno(), 0)
        os.dup2(fout.fileno(), 1)
        os.dup2(ferr.fileno(), 2)
    # Fresh text streams each call: a cell may have replaced or closed them.
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "rb", closefd=False), encoding="utf-8", errors="replace")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "wb", closefd=False), encoding="utf-8", errors="backslashreplace", write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "wb", closefd=False), encoding="utf-8", errors="backslashreplace", write_through=True)
    live = None
    if req.get("live"):
        try:
            live = _Live(str(req["live"]).replace("/", "_"), (("stdout", out_path), ("stderr", err_path)), cap)
        except Exception:
            live = None
    try:
        if req.get("kind") == "command":
            p = subprocess.run(["bash", "-c", req.get("source", "")], stdin=0, stdout=1, stderr=2)
            meta["exit_code"] = p.returncode if p.returncode >= 0 else 128 - p.returncode
            if p.returncode != 0:
                meta["status"] = "error"
        else:
            value = _run_cell(req.get("source", ""), ns)
            if value is not None:
                ns["_"] = value
                dcap = max(1, int(req.get("display_chars", 1 << 18)))
                text = repr(value)
                meta["display"] = text[:dcap]
                meta["display_truncated"] = len(text) > dcap
    except SystemExit as e:
        if live is not None:
            live.close()
        meta["status"] = "error"
        meta["error"] = "SystemExit"
        code = e.code
        meta["exit_code"] = code if isinstance(code, int) else (0 if code is None else 1)
        if meta["exit_code"] == 0:
            meta["status"] = "ok"
    except BaseException as e:
        if live is not None:
            live.close()
        meta["status"] = "error"
        meta["error"] = type(e).__name__
        meta["exit_code"] = 1
        try:
            sys.stderr.write(_user_traceback(e))
        except Exception:
            pass
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass
    if live is not None:
        live.close()
    meta["cpu_us"] = int((_cpu_seconds() - cpu0) * 1e6)
    meta["max_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    try:
        meta["cwd"] = os.getcwd()
    except OSError:
        meta["cwd"] = ""
    _reply(n, meta, out_path, err_path, cap)


def _close_quietly(fd):
    try:
        os.close(fd)
    except OSError:
        pass


class _Waiter:
    """Sleeps until a file appears in IN, or `timeout` passes: an idle session wakes for
    nothing (hundreds of them sit in one executor), through inotify (ctypes: the standard
    library has no binding). Without it, a plain sleep of at most 50 ms. Its descriptor is
    closed while a cell runs (`close`), so cells see the descriptors a fresh interpreter has."""

    _IN_CREATE, _IN_MOVED_TO = 0x100, 0x80

    def __init__(self):
        self.fd = -1
        try:
            import ctypes
            import select

            self._select = select.select
            self._libc = ctypes.CDLL(None, use_errno=True)
        except Exception:
            self._libc = None

    def arm(self):
        """Watches IN from now on (before looking for a request: none can slip by)."""
        if self._libc is None or self.fd >= 0:
            return
        fd = self._libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
        if fd >= 0:
            self.fd = fd
            self._watch()

    def _watch(self):
        # Again after each quiet wait: a cell may have removed and made IN again.
        if self.fd >= 0 and self._libc.inotify_add_watch(self.fd, IN.encode(), self._IN_CREATE | self._IN_MOVED_TO) < 0:
            self.close()

    def close(self):
        """Gives the descriptor up before a cell runs. Closing an inotify instance waits for
        a kernel grace period (5 to 15 ms), paid on return from close() by the thread that
        closed it: a short-lived thread pays it, and this one waits only until the number is
        free (the cell then sees the descriptors a fresh interpreter has)."""
        fd, self.fd = self.fd, -1
        if fd < 0:
            return
        try:
            threading.Thread(target=_close_quietly, args=(fd,), daemon=True).start()
        except RuntimeError:
            _close_quietly(fd)
            return
        while True:
            try:
                fcntl.fcntl(fd, fcntl.F_GETFD)
            except OSError:
                return
            time.sleep(0)

    def wait(self, timeout):
        if self.fd < 0:
            time.sleep(min(timeout, 0.05))
            return
        if not self._select([self.fd], [], [], timeout)[0]:
            self._watch()
            return
        try:
            while os.read(self.fd, 65536):
                pass
        except OSError:
            pass


def _ready():
    with open(BASE + "/ready.tmp", "w") as f:
        f.write(os.environ.get("SANDPOOL_EPOCH", ""))
    os.rename(BASE + "/ready.tmp", BASE + "/ready")


def main():
    # What an interpreter killed earlier in this session left.
    shutil.rmtree(IN, ignore_errors=True)
    shutil.rmtree(OUT, ignore_errors=True)
    shutil.rmtree(PROCS, ignore_errors=True)
    shutil.rmtree(BASE + "/live", ignore_errors=True)
    os.makedirs(SCRATCH, exist_ok=True)
    os.makedirs(PROCS, exist_ok=True)
    os.makedirs(IN, exist_ok=True)
    os.makedirs(OUT, exist_ok=True)
    # An E2B sandbox's starts in its home, /home/user (the same files as /work).
    os.chdir(os.environ.pop("SANDPOOL_CWD", "") or "/work")
    ns = {"__name__": "__main__", "__builtins__": __builtins__}
    sys.modules["__main__"] = types.ModuleType("__main__")
    sys.modules["__main__"].__dict__.update(ns)
    ns = sys.modules["__main__"].__dict__
    if _CWD_ENTRY is not None:
        sys.path.insert(0, _CWD_ENTRY)
    try:
        _restore(ns)
    except BaseException:
        pass
    n = int(os.environ.get("SANDPOOL_FIRST_CALL", "1"))
    waiter = _Waiter()
    try:
        _ready()
    except OSError:
        _give_up_reserve()
        _ready()
    while True:
        if _procs:
            _reap()
        waiter.arm()
        # The executor renames its marker into place: anything else there (a FIFO a cell
        # planted for this number) is not a request.
        if not _is_regular("%s/%d.go" % (IN, n)):
            # Asleep until the executor writes a request (the watch sees the file made after
            # this check too): 0.05 s with background processes to reap, else at most five
            # seconds (a backstop: a cell may have removed the watched directory).
            waiter.wait(0.05 if _procs else 5.0)
            continue
        _forget(n - 1)
        try:
            with _open_regular("%s/%d.json" % (IN, n), "r") as f:
                req = json.load(f)
        except (OSError, ValueError):
            req = {"kind": "code", "source": "raise RuntimeError('sandpool: unreadable request')"}
        waiter.close()
        _call(n, req, ns)
        n += 1


main()
