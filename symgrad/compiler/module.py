"""Compiling modules, and functions that call modules: parameters are inputs of the graph.

A compiled graph holds the tensors its function reads from outside its arguments as constants of
the trace.  For a parameter that would be doubly wrong: its gradient would be dropped, and after an
optimizer step the kernels would still compute with the old weights.  So the parameters of a compiled
:class:`~symgrad.nn.Module`, and every leaf tensor requiring grad that a compiled function reads from
outside (a closed-over module's parameters, a global ``nn.Parameter``), are passed to the kernels as
extra leading inputs.  Each call passes their current values, and the ``CompiledFunctionBackward``
node of the outputs has edges to them, so ``loss.backward()`` fills their ``.grad``.

How a call binds them: the trace runs ``lifted(*parameters, *args)``, which tells the tracer that
each parameter object stands for its placeholder before calling the user's function; ops reading
``self.weight`` then record that placeholder instead of a constant.

>>> import symgrad as torch
>>> model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()
>>> fast = torch.compile(model)
>>> out = fast(torch.ones(2, 3, dtype=torch.float64))
>>> type(out.grad_fn).__name__
'CompiledFunctionBackward'
>>> out.sum().backward(); model[0].weight.grad.shape
symgrad.Size([4, 3])
"""

from __future__ import annotations

import functools
import inspect
import keyword
import re
from collections.abc import Callable

from ..nn.modules import module as nn_module
from ..nn.modules.module import Module
from ..ops import registry
from ..tensor import Tensor
from .compile import CompiledFunction


class _NewParameters(Exception):
    """Raised inside a trace: the function read leaf tensors that require grad from outside."""

    def __init__(self, tensors: list) -> None:
        super().__init__(f"{len(tensors)} parameter(s) found while tracing")
        self.tensors = tensors


def _identifier(name: str, taken: set) -> str:
    """A placeholder name made from a parameter's dotted name (generated code uses it)."""
    base = re.sub(r"\W", "_", name) or "param"
    if base[0].isdigit() or keyword.iskeyword(base):
        base = "p_" + base
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def _note_modules(value, found: dict) -> None:
    if isinstance(value, Module):
        found.setdefault(id(value), value)
    elif isinstance(value, (list, tuple)):
        for v in value[:64]:
            if isinstance(v, Module):
                found.setdefault(id(v), v)


class _Reach:
    """The modules ``fn`` can reach directly: itself, its ``self``, its closure cells and the globals
    its code names (parameters found while tracing are named after them)."""

    def __init__(self, fn: Callable) -> None:
        self.fixed: dict[int, Module] = {}
        _note_modules(fn, self.fixed)
        _note_modules(getattr(fn, "__self__", None), self.fixed)
        self.cells = tuple(getattr(fn, "__closure__", None) or ())
        code = getattr(fn, "__code__", None)
        names: set = set()
        stack = [code] if code is not None else []
        while stack:
            c = stack.pop()
            names.update(c.co_names)
            stack.extend(k for k in c.co_consts if inspect.iscode(k))
        self.globals = getattr(fn, "__globals__", {})
        self.names = tuple(sorted(names))

    def modules(self) -> list:
        found = dict(self.fixed) if self.fixed else {}
        for cell in self.cells:
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(value, (Module, list, tuple)):
                _note_modules(value, found)
        globs = self.globals
        for name in self.names:
            value = globs.get(name)
            if isinstance(value, (Module, list, tuple)):
                _note_modules(value, found)
        return list(found.values()) if found else []


class LiftedFunction(CompiledFunction):
    """A compiled function whose parameters are inputs of its graph (see the module docstring).

    ``module``: the parameters (and buffers) of this module are passed at every call, read afresh
    (a replaced submodule is seen); otherwise the parameters are the ones found while tracing.
    """

    def __init__(self, fn: Callable, module: Module | None = None, **options) -> None:
        super().__init__(fn.forward if isinstance(fn, Module) else fn, **options)
        self.user_fn = fn
        self.module = module
        self._found: list[tuple[str, Tensor]] = []     # parameters found while tracing, in order
        self._n_lifted = 0                             # leading arguments of the current call that are parameters
        self._discover = False
        self._kernel_sets: dict = {}
        self._mode_modules: list = []                 # modules whose training flag a trace read
        self._new_mode_modules: list = []
        self._last_built = None
        self._signatures: dict = {}                    # parameter names -> the signature naming placeholders
        user_fn = fn
        compiled = self

        def lifted(*args):
            n = compiled._n_lifted
            params, args = args[:n], args[n:]
            recorder = registry._recorder
            if recorder is None:   # run eagerly: the parameters are read from their modules
                return user_fn(*args)
            for (_, p), stand_in in zip(compiled._current, params):
                v = recorder.value_of(stand_in)
                recorder.bind(p, v)
                recorder.inputs.append((p, v))   # writing into a parameter inside the function is refused
            watch = _OutsideTensors(recorder) if compiled._discover else None
            outer, nn_module._training_reads = nn_module._training_reads, []
            try:
                out = user_fn(*args)
            finally:
                compiled._new_mode_modules += [m for m in nn_module._training_reads
                                               if all(m is not k for k in compiled._mode_modules)]
                nn_module._training_reads = outer
                if watch is not None:
                    watch.close()
            if watch is not None:
                watch.check()
            return out

        functools.update_wrapper(lifted, fn.forward if isinstance(fn, Module) else fn, updated=())
        self.fn = fn                 # what eager callers of ``.fn`` (value_and_grad, the CLI, dask) run
        self._lifted = lifted        # what the trace runs
        self._current: list[tuple[str, Tensor]] = []
        self._user_signature = self._signature([])
        lifted.__signature__ = self._user_signature

    def _build(self, args: tuple, wrt, joint_kernel: bool = False):
        fn, self.fn = self.fn, self._lifted
        try:
            self._last_built = super()._build(args, wrt, joint_kernel)
            return self._last_built
        finally:
            self.fn = fn

    def _parameters(self) -> list[tuple[str, Tensor]]:
        if self.module is None:
            return list(self._found)
        named = [(n, p) for n, p in self.module.named_parameters()]
        named += [(n, b) for n, b in self.module.named_buffers()]
        return named + [entry for entry in self._found if all(entry[1] is not p for _, p in named)]

    def _signature(self, params: list) -> inspect.Signature:
        """Parameters first, then the function's own arguments: the trace names its placeholders by it."""
        taken: set = set()
        user = []
        try:
            fn = self.user_fn.forward if isinstance(self.user_fn, Module) else self.user_fn
            user = [p for p in inspect.signature(fn).parameters.values()
                    if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            pass
        taken.update(p.name for p in user)
        lifted = [inspect.Parameter(_identifier(name, taken), inspect.Parameter.POSITIONAL_ONLY)
                  for name, _ in params]
        rest = [p.replace(kind=inspect.Parameter.POSITIONAL_ONLY, default=inspect.Parameter.empty) for p in user]
        return inspect.Signature(lifted + rest)

    def _mode(self) -> tuple:
        """The training flags the traces read: kernels are kept per value of them."""
        return tuple([m.__dict__["_training"] for m in self._mode_modules])

    def __call__(self, *args):
        self._kernels = self._kernel_sets.setdefault(self._mode(), {})
        if self.module is None and not self._found:
            # nothing to lift so far: the plain call, watching the trace for parameters
            self._current = []
            self._discover = True
            try:
                return self._settle(super().__call__(*args))
            except _NewParameters as found:
                self._stats["calls"] -= 1
                self._remember(found.tensors, [])
            finally:
                self._discover = False
        return self._settle(self._call_lifted(args))

    def _settle(self, result):
        """After a trace that read training flags not read before: keep the kernels just built under
        the key of the flags' current values (earlier kernels did not record those flags: dropped)."""
        if self._new_mode_modules:
            for m in self._new_mode_modules:
                if all(m is not k for k in self._mode_modules):
                    self._mode_modules.append(m)
            self._new_mode_modules = []
            built = self._last_built
            self._kernels = {key: k for key, k in self._kernels.items() if k is built}
            self._kernel_sets = {self._mode(): self._kernels}
        return result

    def _remember(self, tensors: list, current: list) -> None:
        known = {id(p) for _, p in current} | {id(p) for _, p in self._found}
        names = {id(p): name for m in _Reach(self.user_fn).modules() for name, p in m.named_parameters()}
        for t in tensors:
            if id(t) not in known:
                known.add(id(t))
                self._found.append((names.get(id(t), f"param{len(self._found)}"), t))

    def _call_lifted(self, args: tuple):
        for attempt in (0, 1):
            self._current = current = self._parameters()
            if current:
                names = tuple(name for name, _ in current)
                signature = self._signatures.get(names)
                if signature is None:
                    signature = self._signatures[names] = self._signature(current)
                self._lifted.__signature__ = signature
            self._n_lifted = len(current)
            self._discover = attempt == 0
            try:
                return super().__call__(*[p for _, p in current], *args)
            except _NewParameters as found:
                self._stats["calls"] -= 1
                self._remember(found.tensors, current)
            finally:
                self._n_lifted = 0
                self._discover = False
                self._lifted.__signature__ = self._user_signature
        raise AssertionError("unreachable: the second trace does not look for parameters")

    def kernels_for(self, *args, **options):
        # kernels are kept per value of the training flags the traces read
        self._kernels = self._kernel_sets.setdefault(self._mode(), {})
        return super().kernels_for(*args, **options)

    def _call_eager(self, args: tuple):
        # the eager fallback runs the user's function, which reads its parameters from the modules
        return super()._call_eager(args[self._n_lifted:])

    def inspect(self, *args):
        """The kernels a call with these arguments runs (parameters as inputs, as in :meth:`__call__`)."""
        self._kernels = self._kernel_sets.setdefault(self._mode(), {})
        self._current = current = self._parameters()
        self._lifted.__signature__ = self._signature(current)
        self._n_lifted = len(current)
        try:
            return self._settled(self._settle(self.kernels_for(*[p for _, p in current], *args)))
        finally:
            self._n_lifted = 0
            self._lifted.__signature__ = self._user_signature

    def parameters_passed(self) -> list[str]:
        """The names of the parameters passed as inputs at the last call (placeholder order)."""
        return [name for name, _ in self._current]


class _OutsideTensors:
    """Watches a trace for tensors that require grad and become constants of the graph: tensors read
    from outside the function's arguments.  Leaves among them are parameters to lift (the call is
    traced again with them as inputs); a non-leaf cannot be lifted and is refused."""

    def __init__(self, recorder) -> None:
        self.recorder = recorder
        self.found: dict[int, Tensor] = {}
        self.stand_ins: set = set()   # copies an in-place op makes of a tensor: the tensor itself is noted
        self._as_value, self._same_value = recorder._as_value, recorder.same_value
        recorder._as_value, recorder.same_value = self.as_value, self.same_value

    def close(self) -> None:
        del self.recorder._as_value, self.recorder.same_value

    def note(self, t: Tensor) -> None:
        if t.requires_grad and id(t) not in self.stand_ins and self.recorder.value_of(t) is None:
            self.found.setdefault(id(t), t)

    def as_value(self, t: Tensor):
        self.note(t)
        return self._as_value(t)

    def same_value(self, new: Tensor, old: Tensor) -> None:
        if self.recorder.value_of(old) is None:
            self.note(old)
            self.stand_ins.add(id(new))
        return self._same_value(new, old)

    def check(self) -> None:
        for t in self.found.values():
            if t._grad_fn is not None:
                raise RuntimeError(
                    "symgrad.compile: the function reads a tensor computed outside it that requires grad (it has "
                    f"grad_fn={type(t._grad_fn).__name__}); a compiled graph would treat it as a constant and drop "
                    "its gradient. Pass it as an argument of the compiled function instead.")
        if self.found:
            raise _NewParameters(list(self.found.values()))


class OptimizedModule(Module):
    """What ``symgrad.compile(module)`` returns: a module whose forward runs the compiled kernels.

    The original module is ``_orig_mod`` (a submodule, so ``parameters()``, ``train()`` and ``eval()``
    act on it, and ``state_dict`` keys carry the ``_orig_mod.`` prefix, as in PyTorch); other
    attributes are read from it.
    """

    def __init__(self, module: Module, **options) -> None:
        super().__init__()
        self._orig_mod = module
        object.__setattr__(self, "compiled", LiftedFunction(module, module=module, **options))

    def forward(self, *args):
        return self.compiled(*args)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["_orig_mod"], name)

    def stats(self) -> dict:
        """The compiled forward's statistics (see :meth:`CompiledFunction.stats`)."""
        return self.compiled.stats()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the Numba kernels built in the background (see :meth:`CompiledFunction.wait`)."""
        return self.compiled.wait(timeout)

    def kernels_ready(self) -> bool:
        """See :meth:`CompiledFunction.kernels_ready`."""
        return self.compiled.kernels_ready()

    def inspect(self, *args):
        """The graphs and generated code a call with these arguments runs; the placeholders are the
        parameters (named after them), then the arguments.

        >>> import symgrad as torch
        >>> fast = torch.compile(torch.nn.Linear(2, 1).double())
        >>> [v.name for v in fast.inspect(torch.ones(3, 2, dtype=torch.float64)).graph.placeholders]
        ['weight', 'bias', 'input']
        """
        return self.compiled.inspect(*args)


def compile_callable(fn: Callable, **options):
    """``symgrad.compile`` for a module (an :class:`OptimizedModule`) or a function (a :class:`LiftedFunction`)."""
    if isinstance(fn, Module):
        return OptimizedModule(fn, **options)
    return LiftedFunction(fn, **options)
