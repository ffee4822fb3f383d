"""codegen/jit.py: the kernel disk cache.

A second process loads kernels from Numba's cache; nothing in the cache is trusted: module files
are checked against the hash in their name, damaged or foreign modules and damaged Numba
index/data files are rebuilt, unsafe directories are refused and read-only ones fall back to
memory; two processes filling an empty cache at once both succeed; ``symgrad cache info|clear``.

Cross-process behaviour runs in other processes (``PROBE``: one tiny kernel through
``codegen.jit`` directly), forked by a server that has imported the library; the rest runs in
this process on kernels that are loaded but never called (no Numba compilation).
"""

import hashlib
import os
import pickle
import shutil
import stat
import subprocess
import textwrap
import warnings
from pathlib import Path

import numba
import numpy as np
import pytest
from forkserver import ForkServer

import symgrad
from codegen import jit

# its tests share the warm kernel cache and the damaged-cache processes (module-scoped fixtures,
# built once per worker): one xdist worker runs them all
pytestmark = pytest.mark.xdist_group("test_jit")

REPO = Path(__file__).resolve().parents[1]

# One kernel through the cache; prints "<cache loads> <compiles> <value>".
PROBE = textwrap.dedent("""
    import sys, warnings
    import numpy as np
    from codegen import jit
    warnings.simplefilter("error")            # a refused cache would be a failure here
    src = '''@njit(error_model='numpy')
    def group_0(x, n0, k0):
        acc = 0.0
        for i0 in range(n0):
            acc += math.sin(x[i0]) * k0
        return acc'''
    kernels = jit.load_kernels([src])
    k = kernels["group_0"]
    value = k(np.linspace(-1, 1, 50), 50, 0.5)
    print(sum(k.stats.cache_hits.values()), sum(k.stats.cache_misses.values()), repr(value))
""")
PROBE_VALUE = float(np.sum(np.sin(np.linspace(-1, 1, 50)) * 0.5))

W1_PROBE = textwrap.dedent("""
    import numpy as np, symgrad
    def w1(x):
        return (symgrad.sin(x) * symgrad.exp(-x * x) + symgrad.log1p(x * x) * symgrad.tanh(x)).sum()
    vg = symgrad.value_and_grad(w1)
    v, g = vg(np.linspace(-1, 1, 64))
    vg(np.linspace(-1, 1, 100))                 # another size: the same kernel
    s = vg.compiled.stats()
    print(s["kernel_cache_loads"], s["kernel_compiles"], repr(v))
""")


# The processes are forked by one server that has imported numpy, Numba and symgrad (most of a
# probe's time; tests/forkserver.py); a child sets its own $SYMGRAD_CACHE_DIR, read at each use.
# Forked children share the server's hash seed: that kernel names do not depend on it is checked by
# fresh interpreters (tests/test_build_cache.py's warm second process, tests/test_kernel_keys.py's RNNs).
_SETUP = "import numpy, numba, symgrad\nfrom codegen import jit"
_server: list = []


def _processes() -> ForkServer:
    if not _server:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        env.pop("SYMGRAD_CACHE_DIR", None)
        env.pop("NUMBA_CACHE_DIR", None)   # Numba's files beside the modules, where the tests look
        _server.append(ForkServer(_SETUP, cwd=REPO, env=env, allowed_env={"SYMGRAD_CACHE_DIR"}))
    return _server[0]


@pytest.fixture(scope="module", autouse=True)
def _stop_the_server():
    yield
    while _server:
        _server.pop().close()


def _start(cache: Path, code: str = PROBE) -> dict:
    return _processes().start("-c", code, cwd=REPO, env={"SYMGRAD_CACHE_DIR": str(cache)})


def _finish(child: dict) -> tuple[int, int, float]:
    done = _processes().wait(child, timeout=120)
    assert done.returncode == 0, f"probe failed:\n{done.stderr}"
    hits, misses, value = done.stdout.split()
    return int(hits), int(misses), float(value)


def _run(cache: Path, code: str = PROBE) -> tuple[int, int, float]:
    return _finish(_start(cache, code))


def _modules(cache: Path) -> list[Path]:
    return sorted(cache.glob("symgrad_kernels_*.py"))


def _numba_files(cache: Path, suffix: str) -> list[Path]:
    return sorted((cache / "__pycache__").glob(f"symgrad_kernels_*{suffix}"))


# --- across processes ----------------------------------------------------------------------------

@pytest.mark.heavy
def test_second_process_loads_kernels_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    hits, misses, v1 = _run(cache, W1_PROBE)
    assert (hits, misses) == (0, 1)              # first process compiles
    hits, misses, v2 = _run(cache, W1_PROBE)
    assert (hits, misses) == (1, 0)              # second process: no Numba compilation of the kernel
    assert v1 == v2
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    assert _modules(cache)


@pytest.fixture(scope="module")
def warm_template(tmp_path_factory) -> Path:
    """A cache filled by one process (the probe kernel compiled and saved by Numba)."""
    cache = tmp_path_factory.mktemp("warm") / "cache"
    assert _run(cache) == (0, 1, pytest.approx(PROBE_VALUE, rel=1e-15))
    assert len(_modules(cache)) == 1 and _numba_files(cache, ".nbi") and _numba_files(cache, ".nbc")
    return cache


def _copy_of(template: Path, target: Path) -> Path:
    shutil.copytree(template, target)   # Numba keys its cache by the source's content, not its path
    return target


@pytest.fixture
def warm_cache(warm_template, tmp_path) -> Path:
    return _copy_of(warm_template, tmp_path / "cache")


def _corrupt_module_truncated(cache):
    for f in _modules(cache):
        f.write_bytes(f.read_bytes()[:40])


def _corrupt_module_edited(cache):
    for f in _modules(cache):   # valid Python, another meaning: must not run
        f.write_text(f.read_text().replace("acc += ", "acc -= "))


def _corrupt_module_other_version(cache):
    for f in _modules(cache):
        f.write_text(f.read_text().replace(f"numba {numba.__version__}", "numba 0.1.0"))


def _corrupt_index_garbage(cache):
    for f in _numba_files(cache, ".nbi"):
        f.write_bytes(b"\x00garbage" * 7)


def _corrupt_index_body(cache):
    for f in _numba_files(cache, ".nbi"):   # right Numba version header, damaged pickle after it
        f.write_bytes(pickle.dumps(numba.__version__) + b"\x80\x05garbage")


def _corrupt_data_flipped(cache):
    for f in _numba_files(cache, ".nbc"):   # machine code with flipped bits: never loaded
        data = bytearray(f.read_bytes())
        for i in range(len(data) // 2, len(data) // 2 + 64):
            data[i] ^= 0xFF
        f.write_bytes(bytes(data))


def _corrupt_data_truncated(cache):
    for f in _numba_files(cache, ".nbc"):
        f.write_bytes(f.read_bytes()[:100])


def _corrupt_data_missing(cache):
    for f in _numba_files(cache, ".nbc"):
        f.unlink()


def _corrupt_everything_empty(cache):
    for f in _modules(cache) + _numba_files(cache, ""):
        f.write_bytes(b"")


FAULTS = {
    "module truncated": _corrupt_module_truncated,
    "module edited": _corrupt_module_edited,
    "module from other versions": _corrupt_module_other_version,
    "numba index garbage": _corrupt_index_garbage,
    "numba index pickle damaged": _corrupt_index_body,
    "numba data bits flipped": _corrupt_data_flipped,
    "numba data truncated": _corrupt_data_truncated,
    "numba data missing": _corrupt_data_missing,
    "all files empty": _corrupt_everything_empty,
}


# Each fault costs two fresh processes: the CI profile damages the cache in four representative
# ways (a module file, Numba's index, its machine code, everything); SYMGRAD_FUZZ=long in all of them.
CI_FAULTS = ("module truncated", "numba index garbage", "numba data bits flipped", "all files empty")
CHECKED_FAULTS = list(FAULTS) if os.environ.get("SYMGRAD_FUZZ") == "long" else list(CI_FAULTS)


@pytest.fixture(scope="module")
def fault_runs(warm_template, tmp_path_factory) -> dict:
    """Per fault: a copy of the warm cache damaged that way, then one process run on it, then
    another (the processes of all faults run side by side)."""
    caches = {}
    for k, fault in enumerate(CHECKED_FAULTS):
        caches[fault] = _copy_of(warm_template, tmp_path_factory.mktemp(f"fault{k}") / "cache")
        FAULTS[fault](caches[fault])
    first = {f: _start(c) for f, c in caches.items()}
    first = {f: _finish(p) for f, p in first.items()}
    modules_ok = {f: all(jit.module_name(m.read_text()) == m.stem for m in _modules(c)) and len(_modules(c)) == 1
                  for f, c in caches.items()}
    second = {f: _start(c) for f, c in caches.items()}
    second = {f: _finish(p) for f, p in second.items()}
    return {f: (first[f], modules_ok[f], second[f]) for f in CHECKED_FAULTS}


@pytest.mark.parametrize("fault", CHECKED_FAULTS)
@pytest.mark.heavy
def test_damaged_cache_entries_are_rebuilt(fault_runs, fault):
    """Each fault: the next process computes the right value, and the one after it loads from the
    repaired cache."""
    (hits, misses, value), module_ok, again = fault_runs[fault]
    assert value == pytest.approx(PROBE_VALUE, rel=1e-15)
    if fault.startswith("module"):
        # the module is rewritten byte for byte; Numba keys its cache by the source's hash, so the
        # machine code compiled from that same text stays valid and is loaded
        assert (hits, misses) == (1, 0)
    else:
        assert (hits, misses) == (0, 1)                  # damaged machine code: compiled again
    assert module_ok, "the module file was not rewritten whole"
    assert again == (1, 0, pytest.approx(PROBE_VALUE, rel=1e-15))


def test_two_processes_filling_an_empty_cache_at_once_both_succeed(tmp_path):
    cache = tmp_path / "cache"
    procs = [_start(cache) for _ in range(3)]
    results = [_finish(p) for p in procs]
    assert all(v == pytest.approx(PROBE_VALUE, rel=1e-15) for _, _, v in results)
    assert len(_modules(cache)) == 1
    assert not list(cache.glob(".symgrad_kernels_tmp-*")), "a temporary file was left behind"
    hits, misses, value = _run(cache)
    assert value == pytest.approx(PROBE_VALUE, rel=1e-15)


# --- in this process: directory checks, hash verification ----------------------------------------

def _unique_kernels(tag: str) -> list[str]:
    """A kernel whose canonical text (and so module name) is unique to ``tag``; loaded, never called.
    (A comment would not do: the canonical form drops comments.)"""
    return [f"@njit(error_model='numpy')\ndef group_0(x, n0):\n    {tag!r}\n    return x[0] * 2.0"]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "kc"
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(path))
    return path


def _load_fresh(tag: str):
    kernels = _unique_kernels(f"{tag} {os.getpid()} {id(object())}")
    name = jit.module_name(jit.module_text(kernels))
    return kernels, name


def test_cache_dir_is_created_private(cache):
    kernels, name = _load_fresh("private")
    jit.load_kernels(kernels)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    f = cache / f"{name}.py"
    assert f.exists() and stat.S_IMODE(f.stat().st_mode) & 0o077 == 0
    assert hashlib.sha256(f.read_bytes()).hexdigest()[:24] == name.removeprefix("symgrad_kernels_")
    assert f"numba {numba.__version__}" in f.read_text() and f"numpy {np.__version__}" in f.read_text()


def test_a_foreign_module_under_the_right_name_never_runs(cache, tmp_path):
    """The file is verified against its name before use, and the verified text is what runs."""
    kernels, name = _load_fresh("foreign")
    cache.mkdir(mode=0o700)
    marker = tmp_path / "pwned"
    (cache / f"{name}.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    found = jit.load_kernels(kernels)
    assert "group_0" in found and not marker.exists()
    assert jit.module_name((cache / f"{name}.py").read_text()) == name     # rewritten


def test_the_module_name_follows_every_version_that_shapes_the_code(monkeypatch):
    kernels = _unique_kernels("versions")
    text = jit.module_text(kernels)
    fast = [k.replace("@njit(", "@njit(fastmath=True, ") for k in kernels]
    assert jit.module_name(jit.module_text(fast)) != jit.module_name(text)
    for module, attr in ((numba, "__version__"), (np, "__version__")):
        with monkeypatch.context() as m:
            m.setattr(module, attr, "0.0.1")
            assert jit.module_name(jit.module_text(kernels)) != jit.module_name(text)


def test_a_cache_writable_by_others_is_refused(cache):
    cache.mkdir()
    cache.chmod(0o777)
    kernels, name = _load_fresh("open")
    with pytest.warns(UserWarning, match="refusing kernel cache .*writable by others"):
        found = jit.load_kernels(kernels)
    assert "group_0" in found and not _modules(cache)


def test_compile_works_with_a_refused_cache(cache):
    cache.mkdir()
    cache.chmod(0o777)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = symgrad.compile(lambda x: (symgrad.exp(x) * x).sum())
        x = symgrad.tensor(np.ones(3), dtype=symgrad.float64, requires_grad=True)
        f(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.e)
    assert not _modules(cache)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown needs root")
def test_a_cache_owned_by_another_user_is_refused(cache):
    cache.mkdir(mode=0o700)
    os.chown(cache, 65534, 65534)
    kernels, _ = _load_fresh("owner")
    with pytest.warns(UserWarning, match="refusing kernel cache .*owned by another user"):
        found = jit.load_kernels(kernels)
    assert "group_0" in found and not _modules(cache)


def test_a_read_only_cache_falls_back_to_memory(cache, monkeypatch):
    cache.mkdir(mode=0o700)
    cache.chmod(0o500)
    if os.access(cache, os.W_OK):     # root ignores the mode bits: make the check see read-only
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, m, **kw: False if Path(p) == cache else real(p, m, **kw))
    try:
        kernels, _ = _load_fresh("readonly")
        with pytest.warns(UserWarning, match="refusing kernel cache .*read-only"):
            found = jit.load_kernels(kernels)
        assert found["group_0"](np.array([1.5]), 1) == 3.0   # compiled in memory
        assert not _modules(cache)
    finally:
        cache.chmod(0o700)


def test_an_unusable_cache_location_falls_back_to_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(blocker / "cache"))
    kernels, _ = _load_fresh("unusable")
    with pytest.warns(UserWarning, match="unusable"):
        assert "group_0" in jit.load_kernels(kernels)


def test_symgrad_cache_dir_relocates_the_cache(cache):
    kernels, name = _load_fresh("relocated")
    jit.load_kernels(kernels)
    assert jit.cache_path() == cache and (cache / f"{name}.py").exists()


# --- symgrad cache info|clear ----------------------------------------------------------------------

def _cli(cache: Path, *args) -> subprocess.CompletedProcess:
    return _processes().run("-m", "symgrad", ["cache", *args], cwd=REPO, env={"SYMGRAD_CACHE_DIR": str(cache)},
                            timeout=120)


def test_cache_info_and_clear(warm_cache):
    keep = warm_cache / "notes.txt"
    keep.write_text("not ours")
    (warm_cache / "__pycache__" / "other.cpython-311.pyc").write_bytes(b"not ours either")
    ours = _modules(warm_cache) + _numba_files(warm_cache, "")
    size = sum(p.stat().st_size for p in ours)
    info = _cli(warm_cache, "info")
    assert info.returncode == 0, info.stderr
    assert str(warm_cache) in info.stdout and "status:  usable" in info.stdout
    assert "modules: 1\n" in info.stdout and f"files:   {len(ours)} ({size} bytes" in info.stdout
    cleared = _cli(warm_cache, "clear")
    assert cleared.returncode == 0, cleared.stderr
    assert f"removed {len(ours)} files ({size} bytes)" in cleared.stdout
    assert not _modules(warm_cache) and not _numba_files(warm_cache, "")
    assert keep.exists() and (warm_cache / "__pycache__" / "other.cpython-311.pyc").exists()
    info = _cli(warm_cache, "info")
    assert "modules: 0\n" in info.stdout and "(0 bytes" in info.stdout
    assert _run(warm_cache) == (0, 1, pytest.approx(PROBE_VALUE, rel=1e-15))


def test_cache_info_reports_a_refused_directory(tmp_path):
    cache = tmp_path / "open"
    cache.mkdir()
    cache.chmod(0o777)
    info = _cli(cache, "info")
    assert info.returncode == 0 and "refused" in info.stdout and "writable by others" in info.stdout


def test_cache_info_of_a_missing_directory_creates_nothing(tmp_path):
    cache = tmp_path / "nowhere"
    info = _cli(cache, "info")
    assert info.returncode == 0 and "does not exist" in info.stdout
    assert not cache.exists()
    assert _cli(cache, "clear").returncode == 0 and not cache.exists()
