"""A long fuzzing run for one float dtype, under a time budget:

    python tests/long_fuzz.py --dtype float32 --minutes 25 --report fuzz-float32.json

It runs every fuzzer (tests/test_fuzz*.py and the row-kernel fuzzers) in rounds, each a pytest process
with the long profile (``SYMGRAD_FUZZ=long``), a fresh hypothesis seed and ``SYMGRAD_FUZZ_DTYPE`` set, until
the budget is spent; then it writes how many programs each fuzzer ran and every failing round's output.
Fuzzers with float64 programs only (mixed int/bool/float, reductions of one and zero elements) run in the
float64 run.  Exit status 1 if any round failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
FUZZERS = [
    "tests/test_fuzz.py::test_random_programs_{dtype}",
    "tests/test_fuzz_mixed.py::test_random_programs_with_index_and_mask_arguments",
    "tests/test_fuzz_mixed.py::test_random_mixed_expressions_match_torch",
    "tests/test_fuzz_views.py::test_random_inplace_ops_on_views_match_torch",
    "tests/test_fuzz_edges.py::test_reductions_of_one_and_zero_elements_compiled_match_torch",
    "tests/test_fuzz_piecewise.py::test_piecewise_programs_at_special_values",
    "tests/test_fuzz_inspect.py::test_inspect_works_on_random_programs",
    "tests/test_row_kernel.py::test_random_row_losses_match_eager",
    "tests/test_row_kernel.py::test_random_row_vjps_match_eager",
]


def run_round(dtype: str, seed: int, examples: int, report: str, cache_dir: str) -> tuple[int, str]:
    env = dict(os.environ, SYMGRAD_FUZZ="long", SYMGRAD_FUZZ_DTYPE=dtype, SYMGRAD_FUZZ_EXAMPLES=str(examples),
               SYMGRAD_FUZZ_REPORT=report, SYMGRAD_CACHE_DIR=cache_dir, PYTHONHASHSEED=str(seed))
    tests = [t.format(dtype=dtype) for t in FUZZERS]
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", "-x", "-m", "",
           f"--hypothesis-seed={seed}", *tests]
    done = subprocess.run(cmd, cwd=os.path.dirname(HERE), env=env, capture_output=True, text=True)
    return done.returncode, done.stdout[-20000:] + done.stderr[-5000:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", choices=["float64", "float32"], required=True)
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--examples", type=int, default=12, help="programs per fuzzer per round")
    ap.add_argument("--report", required=True)
    args = ap.parse_args(argv)

    totals: dict = defaultdict(int)
    finite_difference_checks = 0
    failures, rounds = [], 0
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="symgrad-long-fuzz-") as tmp:
        while time.time() - start < 60 * args.minutes:
            seed = random.SystemRandom().randrange(2**32)
            round_report = os.path.join(tmp, f"round{rounds}.json")
            code, output = run_round(args.dtype, seed, args.examples, round_report, os.path.join(tmp, "cache"))
            rounds += 1
            if os.path.exists(round_report):
                with open(round_report) as f:
                    got = json.load(f)
                for fuzzer, per_dtype in got["programs"].items():
                    for dtype, n in per_dtype.items():
                        totals[f"{fuzzer} [{dtype}]"] += n
                stats = got.get("random_programs", {}).get(args.dtype)
                finite_difference_checks += stats["gradchecks"] if stats else 0
            if code not in (0, 5):
                failures.append({"seed": seed, "exit": code, "output": output})
            summary = {"dtype": args.dtype, "minutes": round((time.time() - start) / 60, 1), "rounds": rounds,
                       "programs": sum(totals.values()), "per_fuzzer": dict(totals),
                       "finite_difference_checks": finite_difference_checks,
                       "failures": len(failures), "failed_rounds": failures}
            with open(args.report, "w") as f:
                json.dump(summary, f, indent=1)
            print(f"{summary['minutes']:6.1f} min  round {rounds}  programs {summary['programs']}  "
                  f"failures {len(failures)}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
