"""Runs parity cases for tests/test_parity.py: one process imports the harness (and so the library) once,
then forks a child per case, whose output goes to files, as ``python <case>.py`` would print it.

Reads case file paths from stdin, one per line; for each writes ``<returncode>\\t<stdout file>\\t<stderr
file>`` to stdout.  A forked child starts from the state right after ``import harness`` (nothing run
yet), which is what a fresh interpreter running the case would have.
"""

import os
import runpy
import sys
import tempfile
import traceback


def run_child(path: str, out_path: str, err_path: str) -> None:
    code = 0
    with open(out_path, "w", encoding="utf-8") as out, open(err_path, "w", encoding="utf-8") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdout, sys.stderr = out, err
        sys.argv = [path]
        sys.path.insert(0, os.path.dirname(path))
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - the case's own failure, reported as python would
            traceback.print_exc()
            code = 1
        out.flush()
        err.flush()
    os._exit(code)


def main() -> None:
    import harness  # noqa: F401 - binds PARITY_MODULE once, before the forks

    folder = tempfile.mkdtemp(prefix="parity-")
    for k, line in enumerate(sys.stdin):
        path = line.strip()
        if not path:
            continue
        out_path, err_path = os.path.join(folder, f"{k}.out"), os.path.join(folder, f"{k}.err")
        pid = os.fork()
        if pid == 0:
            run_child(path, out_path, err_path)
        _, status = os.waitpid(pid, 0)
        rc = os.waitstatus_to_exitcode(status)
        sys.stdout.write(f"{rc}\t{out_path}\t{err_path}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
