"""Real torch's runs of the tutorial programs, kept as files (tests/tutorials/recorded/<program>.json):
its return code, its printed output and the tensors its random factories returned (replayed to
symgrad).  ``python tests/tutorials/_record.py [PROGRAM.py ...]`` writes them."""

from __future__ import annotations

import importlib.metadata
import json
import pickle
from pathlib import Path

import numpy as np

FOLDER = Path(__file__).parent / "recorded"


def torch_version() -> str | None:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def path_of(program: str) -> Path:
    return FOLDER / (Path(program).stem + ".json")


def load(program: str) -> dict | None:
    path = path_of(program)
    return json.loads(path.read_text()) if path.exists() else None


def save(program: str, returncode: int, stdout: str, stderr: str, draws_file: Path, torch: str) -> None:
    draws = pickle.loads(draws_file.read_bytes()) if draws_file.exists() else []
    record = {"torch": torch, "returncode": returncode, "stdout": stdout, "stderr": stderr[-4000:],
              "draws": [{"dtype": a.dtype.str, "shape": list(a.shape), "data": a.ravel().tolist()} for a in draws]}
    FOLDER.mkdir(exist_ok=True)
    path_of(program).write_text(json.dumps(record, indent=0) + "\n")


def write_draws(record: dict, draws_file: Path) -> None:
    """The recorded draws as the pickle the symgrad run reads (exact: float32 values survive the
    round trip through Python floats)."""
    arrays = [np.array(d["data"], dtype=np.dtype(d["dtype"])).reshape(d["shape"]) for d in record["draws"]]
    draws_file.write_bytes(pickle.dumps(arrays))
