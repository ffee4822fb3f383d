"""PNG plots of a benchmark-suite result (the JSON document of :mod:`benchmarks.suite`).

    python -m benchmarks.plots RESULTS.json DIR     # re-plot a saved run

Needs matplotlib (``pip install ".[bench]"``).  Files: ``ratios.png`` (every implementation on every
workload, relative to the hand Numba kernel), ``w1_scaling.png`` (time per call and ratio vs N),
``compile_scaling.png`` (first gradient vs chain length), ``latency.png`` (cold and warm first call)
and ``memory.png`` (resident memory of a W1 forward+backward: held between calls, added during one);
a plot whose part was not run is not written.
"""

from __future__ import annotations

import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

BASELINE_STYLE = {"color": "black", "linewidth": 2.5, "marker": "o"}


def _style(k: int) -> dict:
    """A distinct colour, marker and line style for the k-th implementation (more lines than colours)."""
    colours = plt.get_cmap("tab10").colors
    return {"color": colours[k % 10], "linestyle": "-" if k % 20 < 10 else "--",
            "marker": "osD^v<>ph*"[k % 10]}


def _subtitle(doc: dict) -> str:
    cpu = doc["machine"].get("lscpu", {}).get("Model name", doc["machine"].get("machine", ""))
    mode = "quick" if doc["settings"]["quick"] else "full"
    return f"{doc['date'][:10]}, {cpu}, {doc['machine']['logical_cpus']} vCPUs; {mode} run"


def _order(doc: dict) -> list[str]:
    return [i["name"] for i in doc["implementations"]]


def plot_ratios(doc: dict, path: str) -> bool:
    records = doc["workloads"]
    if not records:
        return False
    names = [n for n in _order(doc) if any(r["results"].get(n, {}).get("status") == "ok" for r in records)]
    grid = np.full((len(names), len(records)), np.nan)
    for i, n in enumerate(names):
        for j, r in enumerate(records):
            e = r["results"].get(n)
            if e and e["status"] == "ok" and e.get("ratio_to_baseline"):
                grid[i, j] = e["ratio_to_baseline"]
    fig, ax = plt.subplots(figsize=(1.3 * len(records) + 4, 0.45 * len(names) + 1.8))
    logs = np.log2(grid)
    lim = max(1.0, float(np.nanmax(np.abs(logs)))) if np.isfinite(logs).any() else 1.0
    ax.imshow(logs, cmap="RdYlGn_r", vmin=-lim, vmax=lim, aspect="auto")
    for i in range(len(names)):
        for j in range(len(records)):
            e = records[j]["results"].get(names[i])
            if e is None:
                text = ""
            elif e["status"] != "ok":
                text = {"skipped": "skip", "mismatch": "WRONG", "error": "error"}[e["status"]]
            elif names[i] == doc["baseline"]:
                s = e["timing"]["median_s"]
                text = f"{s * 1e3:.3g} ms" if s >= 1e-3 else f"{s * 1e6:.3g} us"
            else:
                v = grid[i, j]
                text = f"{v:.2f}" if v < 10 else f"{v:.0f}"
            dark = np.isfinite(logs[i, j]) and abs(logs[i, j]) > 0.7 * lim
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="white" if dark else "black")
    ax.set_xticks(range(len(records)), [r["workload"] for r in records])
    ax.set_yticks(range(len(names)), names)
    ax.set_title(f"time per forward+backward / {doc['baseline']} (1 thread); lower is faster\n{_subtitle(doc)}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_w1_scaling(doc: dict, path: str) -> bool:
    sc = doc.get("scaling")
    if not sc or not sc["points"]:
        return False
    pts = sorted(sc["points"], key=lambda p: p["n"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 5))
    for k, name in enumerate(_order(doc)):
        xs, ts, rs = [], [], []
        for p in pts:
            e = p["results"].get(name)
            if e and e["status"] == "ok":
                xs.append(p["n"])
                ts.append(e["timing"]["median_s"] / p["n"] * 1e9)
                rs.append(e.get("ratio_to_baseline") or math.nan)
        if not xs:
            continue
        style = dict(BASELINE_STYLE) if name == doc["baseline"] else _style(k)
        style.setdefault("marker", "o")
        ax1.plot(xs, ts, label=name, **style)
        ax2.plot(xs, rs, label=name, **style)
    ax1.set(xscale="log", yscale="log", xlabel="N (elements of x)", ylabel="ns per element (forward+backward)",
            title="W1: time per element")
    ax2.set(xscale="log", yscale="log", xlabel="N (elements of x)", ylabel=f"time / {doc['baseline']}",
            title="W1: ratio to the hand Numba kernel")
    ax2.axhline(1.0, color="grey", linewidth=0.8)
    ax1.legend(fontsize=7)
    fig.suptitle(_subtitle(doc), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_compile(doc: dict, path: str) -> bool:
    rows = [r for r in doc.get("compile_scaling") or [] if r["chains"]]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for r in rows:
        ok = [c for c in r["chains"] if c["seconds"] is not None]
        failed = [c["ops"] for c in r["chains"] if c["seconds"] is None]
        label = r["name"] + (f" (failed at {', '.join(map(str, failed))} ops)" if failed else "")
        ax.plot([c["ops"] for c in ok], [c["seconds"] for c in ok], marker="o", label=label)
    ax.set(xscale="log", yscale="log", xlabel="ops in the chain", ylabel="seconds to the first gradient",
           title="compile time vs graph size (empty caches)")
    ax.legend(fontsize=8)
    fig.suptitle(_subtitle(doc), fontsize=8, y=0.02, va="bottom")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_latency(doc: dict, path: str) -> bool:
    rows = [r for r in doc.get("latency") or [] if not r.get("error")]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(rows) + 1.8))
    y = np.arange(len(rows))
    ax.barh(y - 0.2, [r["cold_s"] for r in rows], height=0.4, label="cold (empty caches)")
    ax.barh(y + 0.2, [r["warm_s"] for r in rows], height=0.4, label="warm (second process)")
    ax.set_yticks(y, [r["name"] for r in rows])
    ax.invert_yaxis()
    ax.set(xscale="log", xlabel="seconds from after the imports to the first W1 gradient",
           title=f"first-call latency\n{_subtitle(doc)}")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_memory(doc: dict, path: str) -> bool:
    mem = doc.get("memory")
    rows = [r for r in (mem or {}).get("rows", []) if "call_peak_mib" in r]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(rows) + 1.8))
    y = np.arange(len(rows))
    held = [r["retained_by_first_call_mib"] for r in rows]
    ax.barh(y, held, color="tab:grey", label="held between calls (code, caches, buffer pools)")
    ax.barh(y, [r["call_peak_mib"] for r in rows], left=held, color="tab:blue",
            label="added during one call (gradient included)")
    ax.axvline(rows[0]["input_mib"], color="black", linestyle="--", linewidth=0.8, label="size of x (= the gradient)")
    ax.set_yticks(y, [r["name"] for r in rows])
    ax.invert_yaxis()
    ax.set(xlabel="MiB of resident memory above the inputs, at the peak of a call",
           title=f"memory of a W1 forward+backward, x[{mem['n']}]\n{_subtitle(doc)}")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


PLOTS = {"ratios.png": plot_ratios, "w1_scaling.png": plot_w1_scaling, "compile_scaling.png": plot_compile,
         "latency.png": plot_latency, "memory.png": plot_memory}


def write_all(doc: dict, directory: str) -> list[str]:
    """Write every plot the document has data for; returns the paths written."""
    os.makedirs(directory, exist_ok=True)
    written = []
    for fname, fn in PLOTS.items():
        path = os.path.join(directory, fname)
        if fn(doc, path):
            written.append(path)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m benchmarks.plots RESULTS.json DIR")
    with open(sys.argv[1]) as fh:
        print("\n".join(write_all(json.load(fh), sys.argv[2])))
