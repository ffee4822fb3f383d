"""SYMGRAD_LOG / symgrad.compiler.logs: a kernel build logged stage by stage through the logging module."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import symgrad
from symgrad.compiler import logs

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def restore_logs():
    yield
    logs.configure("")


def _built():
    cf = symgrad.compile(lambda x: (symgrad.sin(x) * x).sum())
    x = symgrad.tensor(np.linspace(0, 1, 5), dtype=symgrad.float64, requires_grad=True)
    return cf, cf.inspect(x)   # builds the kernels (Numba compiles them on the first call only)


def test_parse():
    assert logs.parse("trace, code") == {"trace", "code"}
    assert logs.parse("all") == set(logs.STAGES)
    assert logs.parse("") == set()
    with pytest.raises(ValueError, match="unknown stage 'kernels'.*trace, graph, rules, code, cache"):
        logs.parse("trace,kernels")


def test_configured_stages_log_and_the_others_stay_quiet(restore_logs):
    stream = io.StringIO()
    assert logs.configure("trace,code", stream=stream) == {"trace", "code"}
    cf, k = _built()
    logs.report_build(cf, k)
    out = stream.getvalue()
    assert "[symgrad.trace] traced _built.<locals>.<lambda>" in out and "inputs (x: f64[5])" in out
    assert "[symgrad.code] forward kernel of _built.<locals>.<lambda>" in out and "def forward(x):" in out
    assert "[symgrad.code] partition of _built.<locals>.<lambda>" in out
    assert "[symgrad.graph]" not in out and "[symgrad.rules]" not in out and "[symgrad.cache]" not in out
    logs.configure("", stream=stream)
    before = stream.getvalue()
    logs.report_build(cf, k)
    assert stream.getvalue() == before


def test_every_stage(restore_logs):
    stream = io.StringIO()
    logs.configure("all", stream=stream)
    cf, k = _built()
    logs.report_build(cf, k)
    out = stream.getvalue()
    for stage in logs.STAGES:
        assert f"[symgrad.{stage}]" in out, stage
    assert "[SinBackward0 of %sin]" in out                      # graph: the joint graph with provenance
    assert "SinBackward0  <- sin" in out and "self: grad * cos(self)" in out   # rules
    assert "module " in out and "symgrad_kernels_" in out       # cache: the kernel module files


def test_plain_logging_configuration_works_without_the_variable(caplog, restore_logs):
    cf, k = _built()
    with caplog.at_level(logging.INFO, logger="symgrad.rules"):
        logs.report_build(cf, k)
    assert [r.name for r in caplog.records] == ["symgrad.rules"]
    assert "MulBackward0" in caplog.records[0].getMessage()


SCRIPT = textwrap.dedent("""
    import numpy as np, symgrad
    from symgrad.compiler import logs
    cf = symgrad.compile(lambda x: (symgrad.exp(x) * x).sum())
    x = symgrad.tensor(np.ones(4), dtype=symgrad.float64, requires_grad=True)
    logs.report_build(cf, cf.inspect(x))
    print("done")
""")


def test_the_environment_variable(tmp_path):
    env = dict(os.environ, SYMGRAD_LOG="trace,rules,bogus", PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "done"
    assert "unknown stage 'bogus'" in r.stderr                   # a typo warns; the valid stages still log
    assert "[symgrad.trace] traced <lambda>" in r.stderr and "[symgrad.rules] rules applied" in r.stderr
    assert "ExpBackward0  <- exp" in r.stderr
    assert "[symgrad.code]" not in r.stderr
