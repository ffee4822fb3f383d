"""Run one tutorial program with real torch (``torch`` mode) or with symgrad answering ``import torch``
(``symgrad`` mode); used by tests/test_tutorials.py in a subprocess.

    python _runner.py torch PROGRAM DRAWS     # records the tensors torch's random factories returned
    python _runner.py symgrad PROGRAM DRAWS   # symgrad's random factories return those values

A child of tests/forkserver.py's server runs this file in ``symgrad`` mode with symgrad imported
(behind the import hook) by the server: :func:`start_symgrad`.
"""

import importlib
import importlib.abc
import importlib.util
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
        if "symgrad" not in sys.modules:   # (a fork server's child has imported it)
            start_symgrad()
        import symgrad

        with open(draws_path, "rb") as f:
            draws = pickle.load(f)
        _replaying(symgrad, draws)
        runpy.run_path(program, run_name="__main__")
    sys.stdout.flush()
    np.seterr(all="ignore")


def start_symgrad():
    """``import torch`` answered by symgrad, then ``import symgrad``."""
    sys.meta_path.insert(0, _TorchIsSymgrad())
    import symgrad  # noqa: F401


if __name__ == "__main__":
    main(*sys.argv[1:4])
