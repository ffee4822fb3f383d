"""Record real torch's run of each tutorial program (or of the ones named) for tests/test_tutorials.py:
``python tests/tutorials/_record.py [PROGRAM.py ...]``; needs torch installed."""

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import _recording  # noqa: E402
import test_tutorials  # noqa: E402


def main(programs: list[str]) -> None:
    version = _recording.torch_version()
    if version is None:
        raise SystemExit("torch is not installed")
    for program in programs or test_tutorials.PROGRAMS:
        with tempfile.TemporaryDirectory() as tmp:
            draws = Path(tmp) / "draws.pkl"
            run = test_tutorials._run("torch", program, draws)
            _recording.save(program, run.returncode, run.stdout, run.stderr, draws, version)
        print(f"{program}: return code {run.returncode}, {len(run.stdout.splitlines())} lines")


if __name__ == "__main__":
    main(sys.argv[1:])
