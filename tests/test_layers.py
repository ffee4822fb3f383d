"""The layers of docs/architecture.md hold: imports only go down, and every module loads alone."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _modules() -> list[str]:
    names = []
    for package in ("symgrad", "codegen"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__main__":
                continue
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


# Optional dependencies (the extras of pyproject.toml) a module may import at its top.
OPTIONAL = ("torch", "dask", "distributed", "cloudpickle", "graphviz", "jax", "matplotlib")


def _optional_dependency(module: str) -> str | None:
    """The optional package ``module`` imports at its top level, if any (it then loads only with it)."""
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = ROOT / module.replace(".", "/") / "__init__.py"
    for node in ast.parse(path.read_text()).body:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
        for name in names:
            if name.split(".")[0] in OPTIONAL:
                return name.split(".")[0]
    return None


def _modules_needing(dependency: str | None) -> list[str]:
    return [m for m in _modules() if _optional_dependency(m) == dependency]


def test_layers_contract_is_kept():
    pytest.importorskip("importlinter")
    run = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                          "lint_imports_command()"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


# Run in a new interpreter that has imported third-party libraries and `symgrad`: it forks once per
# module, and the child imports that module alone (a circular import shows only when its module comes
# first). Importing symgrad.X runs symgrad/__init__ to the end before X, and `import symgrad` loads no
# codegen module (checked here), so a child starting with symgrad imported imports X, or a codegen
# module, as a fresh interpreter would; `import symgrad` itself runs fresh in _loaded_by_import_symgrad.
_FORK_EACH = """
import importlib, os, sys, traceback
import numpy, sympy, yaml, numba  # noqa: F401 - shared by the children, imported once
for optional in ("torch", "torch._dynamo", "torch._functorch.partitioners", "dask.array", "distributed",
                 "cloudpickle", "graphviz"):
    try:
        importlib.import_module(optional)
    except ImportError:
        pass
import symgrad  # noqa: F401
loaded = sorted(m for m in sys.modules if m == "codegen" or m.startswith("codegen."))
assert not loaded, f"import symgrad loads {loaded}: the children must start without symgrad"
failed = []
for name in sys.argv[1:]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            __import__(name)
            os._exit(0)
        except BaseException:
            os.write(write, traceback.format_exc().strip().splitlines()[-1].encode())
            os._exit(1)
    os.close(write)
    message = os.read(read, 4096).decode()
    os.close(read)
    _, status = os.waitpid(pid, 0)
    if status:
        failed.append(f"{name}: {message}")
print("\\n".join(failed))
"""


def _loaded_by_import_symgrad() -> set[str]:
    code = "import sys, symgrad; print(' '.join(m for m in sys.modules if m.startswith('symgrad.')))"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    return set(run.stdout.split())


@pytest.mark.parametrize("dependency", [None, *sorted({_optional_dependency(m) for m in _modules()} - {None})],
                         ids=lambda d: d or "core")
def test_every_module_imports_alone_in_a_fresh_interpreter(dependency):
    """Every module loads alone; those that import an optional dependency at their top are checked
    with it installed and skip without it (their own parameter of this test)."""
    if dependency is not None:
        pytest.importorskip(dependency)
    modules = _modules_needing(dependency)
    assert modules
    if dependency is None:
        assert len(modules) > 40
    # importing symgrad.X runs symgrad/__init__ to the end before X: for an X that `import symgrad`
    # loads, that is exactly the child importing `symgrad`, so one child covers them all
    covered = _loaded_by_import_symgrad()
    assert "symgrad" in _modules() and len(covered) > 20
    alone = [m for m in modules if m not in covered and m != "symgrad"]
    run = subprocess.run([sys.executable, "-c", _FORK_EACH, *alone], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "", run.stdout


def test_importing_codegen_or_the_ir_does_not_load_the_compiler():
    code = ("import sys, codegen.emit, codegen.numba_emit, symgrad.ir; "
            "print(sorted(m for m in sys.modules if m.startswith('symgrad.compiler')))")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
