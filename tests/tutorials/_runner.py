"""Run one tutorial program with real torch (``torch`` mode) or with symgrad answering ``import torch``
(``symgrad`` mode); used by tests/test_tutorials.py in a subprocess.

    python _runner.py torch PROGRAM DRAWS     # records the tensors torch's random factories returned
    python _runner.py symgrad PROGRAM DRAWS   # symgrad's random factories return those values
    python _runner.py serve                   # ``symgrad`` runs, one forked child per program

``serve`` starts as ``symgrad`` mode does (the import hook, then ``import symgrad``) and reads lines
``PROGRAM<TAB>DRAWS<TAB>STDOUT FILE<TAB>STDERR FILE`` from stdin; for each it forks a child that goes on
exactly as ``python _runner.py symgrad PROGRAM DRAWS`` would from there (and ends as that interpreter
would: an uncaught exception's traceback and status 1, threads joined, exit handlers run), its output
in the two files, and writes the child's return code back as a line.
"""

import importlib
import importlib.abc
import importlib.util
import os
import pickle
import runpy
import sys

import numpy as np

RANDOM_FACTORIES = ("rand", "randn", "randint", "rand_like", "randn_like", "randperm")
# In-place fills: torch.nn.init's uniform_/normal_ (and so kaiming_uniform_, which nn.Linear's
# reset_parameters calls) draw through Tensor.uniform_/normal_ in torch, through nn.init's own
# uniform_/normal_ in symgrad; recorded at the one, replayed at the other, in the same order.
RANDOM_FILLS = ("uniform_", "normal_")


class _TorchIsSymgrad(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import torch`` / ``import torch.X`` give ``symgrad`` / ``symgrad.X`` (the program is not edited)."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        return importlib.import_module("symgrad" + spec.name[len("torch"):])

    def exec_module(self, module):
        pass


def _recording(module, draws):
    for name in RANDOM_FACTORIES:
        original = getattr(module, name)

        def wrapper(*args, __original=original, **kwargs):
            out = __original(*args, **kwargs)
            draws.append(out.detach().numpy().copy())
            return out

        setattr(module, name, wrapper)
    for name in RANDOM_FILLS:
        original = getattr(module.Tensor, name)

        def fill(self, *args, __original=original, **kwargs):
            out = __original(self, *args, **kwargs)
            draws.append(out.detach().numpy().copy())
            return out

        setattr(module.Tensor, name, fill)


def _replaying(module, draws):
    for name in RANDOM_FACTORIES:
        original = getattr(module, name)

        def wrapper(*args, __original=original, __name=name, **kwargs):
            out = __original(*args, **kwargs)
            recorded = draws.pop(0)
            if recorded.shape != tuple(out.shape):
                raise AssertionError(f"{__name}: torch drew shape {recorded.shape}, symgrad {tuple(out.shape)}")
            out._data[...] = recorded.astype(out._data.dtype)
            return out

        setattr(module, name, wrapper)

    def replayed_fill(owner, name):
        original = getattr(owner, name)

        def fill(tensor, *args, **kwargs):
            out = original(tensor, *args, **kwargs)
            recorded = draws.pop(0)
            if recorded.shape != tuple(out.shape):
                raise AssertionError(f"{name}: torch filled shape {recorded.shape}, symgrad {tuple(out.shape)}")
            out._data[...] = recorded.astype(out._data.dtype)
            return out

        setattr(owner, name, fill)   # a method of Tensor, a function of nn.init: called alike

    import symgrad.nn.init

    for name in RANDOM_FILLS:
        replayed_fill(module.Tensor, name)
        replayed_fill(symgrad.nn.init, name)


def main(mode: str, program: str, draws_path: str) -> None:
    if mode == "torch":
        import torch

        # a fixed seed and one thread make torch's run, and so the draws replayed to symgrad and the
        # printed trajectory, the same on every run (programs that seed themselves still do)
        torch.manual_seed(0)
        torch.set_num_threads(1)
        draws: list = []
        _recording(torch, draws)
        try:
            runpy.run_path(program, run_name="__main__")
        finally:
            with open(draws_path, "wb") as f:
                pickle.dump(draws, f)
    else:
        if "symgrad" not in sys.modules:   # (a child of ``serve`` has imported it)
            _start_symgrad()
        import symgrad

        with open(draws_path, "rb") as f:
            draws = pickle.load(f)
        _replaying(symgrad, draws)
        runpy.run_path(program, run_name="__main__")
    sys.stdout.flush()
    np.seterr(all="ignore")


def _start_symgrad():
    sys.meta_path.insert(0, _TorchIsSymgrad())
    import symgrad  # noqa: F401


def serve() -> list[str]:
    """Fork a child per program read from stdin; returns, in the child only, its ``main`` arguments."""
    _start_symgrad()
    import symgrad.nn.init  # noqa: F401 - what _replaying imports, before the forks

    for line in sys.stdin:
        program, draws_path, out_path, err_path = line.rstrip("\n").split("\t")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            # the program's stdin is empty and its output goes to the files, not to the server's pipes
            devnull = os.open(os.devnull, os.O_RDONLY)
            out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            for fd, target in ((devnull, 0), (out, 1), (err, 2)):
                os.dup2(fd, target)
                os.close(fd)
            sys.stdin = open(0, closefd=False)
            sys.argv = [sys.argv[0], "symgrad", program, draws_path]
            return sys.argv[1:4]
        _, status = os.waitpid(pid, 0)
        sys.stdout.write(f"{os.waitstatus_to_exitcode(status)}\n")
        sys.stdout.flush()
    sys.exit(0)


if __name__ == "__main__":
    main(*(serve() if sys.argv[1] == "serve" else sys.argv[1:4]))
