"""Python processes for the tests, forked from one interpreter that has done their common imports.

Starting an interpreter and importing numpy, Numba and symgrad is most of a short process's time. A
server (``python tests/forkserver.py SETUP``, started by :class:`ForkServer`) runs the code ``SETUP``
once (imports only: no kernel loaded, no cache directory read), then forks a child per process asked
for. The child takes its working directory, standard streams and ``sys.argv``/``sys.path[0]`` as
``python -c CODE``, ``python -m MODULE`` or ``python SCRIPT`` would, runs that, and ends as that
interpreter would (a traceback and status 1 on an uncaught exception, threads joined, exit handlers
run). Its environment is the server's, except the variables the server allows a child to set:
libraries read some variables once at import (``SYMGRAD_TIERED``, Numba's), so a child may only set
those read at each use. Children started together run at once.

Server protocol, one tab-separated line each way: ``start KEY REQUEST_JSON``, answered with the
child's process id, and ``wait KEY``, answered with its return code.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

TIMEOUT = 600


def _serve() -> dict:
    """The server's loop; returns only in a forked child, the request it is to run."""
    children = {}
    for line in sys.stdin:
        verb, key, *rest = line.rstrip("\n").split("\t")
        if verb == "wait":
            _, status = os.waitpid(children.pop(key), 0)
            sys.stdout.write(f"{os.waitstatus_to_exitcode(status)}\n")
            sys.stdout.flush()
            continue
        request = json.loads(rest[0])
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _become_child(request)
            return request
        children[key] = pid
        sys.stdout.write(f"{pid}\n")
        sys.stdout.flush()
    sys.exit(0)


def _become_child(request: dict) -> None:
    os.chdir(request["cwd"])
    os.environ.update(request["env"])
    devnull = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd, target in ((devnull, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, closefd=False)


def _run_child(request: dict) -> None:
    import runpy

    kind, target, args = request["kind"], request["target"], request["args"]
    if kind == "-c":
        import types

        sys.argv, sys.path[0] = ["-c", *args], ""
        main = sys.modules["__main__"] = types.ModuleType("__main__")
        exec(compile(target, "<string>", "exec"), main.__dict__)
    elif kind == "-m":
        sys.argv, sys.path[0] = ["-m", *args], os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv, sys.path[0] = [target, *args], os.path.dirname(os.path.abspath(target))
        runpy.run_path(target, run_name="__main__")


class ForkServer:
    """A server process (started at once) and the processes it forks; :meth:`close` stops it.

    ``setup``: the code the server runs before forking; ``env``: its environment; ``allowed_env``:
    the variables a child may set (each read at use, never at import)."""

    def __init__(self, setup: str, *, cwd: Path, env: dict, allowed_env=()) -> None:
        self.allowed_env = set(allowed_env)
        self.folder = Path(tempfile.mkdtemp(prefix="symgrad-forkserver-"))
        self.count = 0
        self.running: dict = {}     # key -> process id of the children not waited for yet
        self.log = self.folder / "server.err"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, json.dumps({"setup": setup})],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, cwd=cwd, env=env)

    def start(self, kind: str, target: str, args=(), *, cwd: Path, env: dict | None = None) -> dict:
        """Start ``python -c target``, ``python -m target`` or ``python target`` (``kind``: "-c", "-m",
        "script") with ``args``; returns the handle :meth:`wait` takes."""
        refused = sorted(set(env or {}) - self.allowed_env)
        if refused:
            raise ValueError(f"a forked process cannot set {refused}: the server's libraries may have read them "
                             f"at import (allowed: {sorted(self.allowed_env)})")
        self.count += 1
        key = str(self.count)
        request = {"kind": kind, "target": str(target), "args": [str(a) for a in args], "cwd": str(cwd),
                   "env": dict(env or {}), "stdout": str(self.folder / f"{key}.out"),
                   "stderr": str(self.folder / f"{key}.err")}
        self.proc.stdin.write(f"start\t{key}\t{json.dumps(request)}\n")
        self.proc.stdin.flush()
        pid = int(self._answer(60))
        self.running[key] = pid
        return dict(request, key=key, pid=pid)

    def _answer(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self._kill_all()
            raise RuntimeError(f"the fork server stopped or timed out:\n{self.log.read_text()[-3000:]}")
        return line

    def _kill_all(self) -> None:
        for pid in self.running.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.running.clear()
        self.proc.kill()

    def wait(self, child: dict, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
        self.proc.stdin.write(f"wait\t{child['key']}\n")
        self.proc.stdin.flush()
        line = self._answer(timeout)
        del self.running[child["key"]]
        out, err = Path(child["stdout"]), Path(child["stderr"])
        done = subprocess.CompletedProcess([child["kind"], child["target"], *child["args"]], int(line),
                                           out.read_text(errors="replace"), err.read_text(errors="replace"))
        out.unlink()
        err.unlink()
        return done

    def run(self, kind: str, target: str, args=(), *, cwd: Path, env: dict | None = None,
            timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
        return self.wait(self.start(kind, target, args, cwd=cwd, env=env), timeout)

    def close(self) -> None:
        """Stop the server; children never waited for (a test stopped early) are killed."""
        try:
            self.proc.stdin.close()
            if self.running:
                self._kill_all()
            self.proc.wait(timeout=60)
        finally:
            self.proc.kill()
            self.proc.stdout.close()
            shutil.rmtree(self.folder, ignore_errors=True)


if __name__ == "__main__":
    _config = json.loads(sys.argv[1])
    exec(compile(_config["setup"], "<forkserver setup>", "exec"), {"__name__": "forkserver_setup"})
    _request = _serve()
    del _config
    _run_child(_request)
