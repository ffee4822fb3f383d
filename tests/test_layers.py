"""The layers of docs/architecture.md hold: imports only go down, and every module loads alone."""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
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


def test_layers_contract_is_kept():
    pytest.importorskip("importlinter")
    run = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                          "lint_imports_command()"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def _import_alone(name: str) -> str:
    run = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=ROOT, capture_output=True, text=True)
    return "" if run.returncode == 0 else f"{name}: {run.stderr.strip().splitlines()[-1]}"


def test_every_module_imports_alone_in_a_fresh_interpreter():
    # one interpreter per module: a circular import shows only when that module is imported first
    modules = _modules()
    assert len(modules) > 40
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        failures = [msg for msg in pool.map(_import_alone, modules) if msg]
    assert failures == []


def test_importing_codegen_or_the_ir_does_not_load_the_compiler():
    code = ("import sys, codegen.emit, codegen.numba_emit, symgrad.ir; "
            "print(sorted(m for m in sys.modules if m.startswith('symgrad.compiler')))")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
