"""The public PyTorch parity corpus (``../shared/parity`` beside the repository), one test per case.

Each case is a small program whose output real PyTorch recorded in ``<case>.expected``.  It runs
as ``python <case>.py`` with ``PARITY_MODULE=symgrad`` (so the corpus's ``from harness import
torch`` binds symgrad), ``PYTHONPATH=<parity dir>:<repo root>`` and the repository root as working
directory, exactly as ``shared/parity/run.py`` runs it, and its stdout must equal the expected
text after the runner's normalisation (trailing whitespace of each line and trailing blank lines
ignored).

All selected cases run once, in parallel, in a module-scoped fixture; the tests only look up
their result.  Cases listed in ``KNOWN_FAILING`` are expected failures (``xfail``, not strict):
the suite reports them (and reports an XPASS once one starts to pass, the cue to drop it from
the set); every other case must pass.

The corpus is optional: without the folder the module is skipped.
``SYMGRAD_PARITY_MODULE=torch`` runs the corpus against real PyTorch instead (a check of the
corpus itself).
"""

import concurrent.futures
import difflib
import os
import subprocess
import sys
from pathlib import Path

import pytest

# its tests share the parity programs' results (module-scoped fixtures, built once per worker): one
# xdist worker runs them all
pytestmark = pytest.mark.xdist_group("test_parity")

REPO_ROOT = Path(__file__).resolve().parents[1]
PARITY_DIR = REPO_ROOT.parent / "shared" / "parity"
CASES_DIR = PARITY_DIR / "cases"
MODULE = os.environ.get("SYMGRAD_PARITY_MODULE", "symgrad")
TIMEOUT_S = 120.0
MAX_DIFF_LINES = 40
STDERR_TAIL_LINES = 20

# Cases symgrad is known not to match yet.  Keep this small and say why next to each name.
KNOWN_FAILING: set = set()

if not CASES_DIR.is_dir():
    pytest.skip(f"parity corpus not found at {PARITY_DIR}", allow_module_level=True)


def case_names():
    """Case names (file stems), as run.py finds them: *.py files not starting with '_'."""
    return sorted(p.stem for p in CASES_DIR.glob("*.py") if not p.name.startswith("_"))


CASES = case_names()


def normalise(text):
    """The comparison rule of shared/parity/run.py."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and lines[-1] == "":
        lines.pop()
    return lines


def case_env():
    env = dict(os.environ)
    env["PARITY_MODULE"] = MODULE
    paths = [str(PARITY_DIR), str(REPO_ROOT)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the shared folder may be read-only
    env["PYTHONHASHSEED"] = "0"
    env["PYTHONIOENCODING"] = "utf-8"
    return env


def run_case(name, env):
    """Run one case; return (returncode or None on timeout, stdout, stderr)."""
    try:
        proc = subprocess.run(
            [sys.executable, str(CASES_DIR / (name + ".py"))],
            env=env,
            cwd=str(REPO_ROOT),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode("utf-8", "replace") if exc.stdout else ""
        err = exc.stderr.decode("utf-8", "replace") if exc.stderr else ""
        return None, out, err
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def parity_results(request):
    """Run every case selected in this session, in parallel; map name -> (rc, stdout, stderr)."""
    this_file = Path(__file__).resolve()
    wanted = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or "case" not in callspec.params:
            continue
        if Path(str(item.fspath)).resolve() == this_file:
            wanted.append(callspec.params["case"])
    wanted = sorted(set(wanted)) or CASES
    env = case_env()
    workers = max(2, os.cpu_count() or 2)
    if hasattr(os, "fork"):
        # a fork server per worker imports the library once (a fresh interpreter per case spent most of
        # its time importing); each case still runs in its own process
        shares = [wanted[k::workers] for k in range(workers)]
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(lambda share: run_cases_forked(share, env), shares))
        return {name: result for part in parts for name, result in part.items()}
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {name: pool.submit(run_case, name, env) for name in wanted}
        return {name: future.result() for name, future in futures.items()}


def run_cases_forked(names, env):
    """Run cases through tests/parity_forkserver.py; map name -> (rc, stdout, stderr)."""
    if not names:
        return {}
    server = Path(__file__).resolve().parent / "parity_forkserver.py"
    paths = "".join(f"{CASES_DIR / (name + '.py')}\n" for name in names)
    proc = subprocess.run([sys.executable, str(server)], env=env, cwd=str(REPO_ROOT), input=paths.encode(),
                          capture_output=True, timeout=TIMEOUT_S * len(names))
    lines = proc.stdout.decode("utf-8", "replace").splitlines()
    if proc.returncode != 0 or len(lines) != len(names):
        raise RuntimeError(f"the parity fork server failed (exit {proc.returncode}):\n"
                           f"{proc.stderr.decode('utf-8', 'replace')[-3000:]}")
    results = {}
    for name, line in zip(names, lines):
        rc, out_path, err_path = line.split("\t")
        with open(out_path, encoding="utf-8", errors="replace") as out, \
                open(err_path, encoding="utf-8", errors="replace") as err:
            results[name] = (int(rc), out.read(), err.read())
    return results


def _param(name):
    if name in KNOWN_FAILING:
        return pytest.param(name, id=name, marks=pytest.mark.xfail(strict=False, reason="in KNOWN_FAILING"))
    return pytest.param(name, id=name)


def test_known_failing_names_exist():
    assert KNOWN_FAILING <= set(CASES), sorted(KNOWN_FAILING - set(CASES))


def test_corpus_is_not_empty():
    assert CASES, f"no parity cases found in {CASES_DIR}"
    for name in CASES:
        assert (CASES_DIR / (name + ".expected")).is_file(), f"{name} has no .expected file"


@pytest.mark.parametrize("case", [_param(n) for n in CASES])
def test_parity_case(case, parity_results):
    rc, out, err = parity_results[case]
    expected_path = CASES_DIR / (case + ".expected")
    expected = normalise(expected_path.read_text(encoding="utf-8"))
    actual = normalise(out)
    if rc is None:
        pytest.fail(f"{case} timed out after {TIMEOUT_S:.0f} s", pytrace=False)
    if rc != 0:
        same = 0
        while same < min(len(expected), len(actual)) and expected[same] == actual[same]:
            same += 1
        tail = "\n".join("    " + line for line in normalise(err)[-STDERR_TAIL_LINES:])
        pytest.fail(
            f"{case} crashed (exit status {rc}) after {same} of {len(expected)} expected lines matched; "
            f"stderr:\n{tail}",
            pytrace=False,
        )
    if actual != expected:
        diff = list(difflib.unified_diff(expected, actual, "expected (torch)", f"actual ({MODULE})",
                                         lineterm="", n=1))
        if len(diff) > MAX_DIFF_LINES:
            diff = diff[:MAX_DIFF_LINES] + [f"... ({len(diff) - MAX_DIFF_LINES} more diff lines)"]
        text = "\n".join(diff)
        pytest.fail(f"{case} output differs from PyTorch:\n{text}", pytrace=False)
