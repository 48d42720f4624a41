"""How long a default bake takes, hooks included (target: under 2 s): the first line of `make bench`.

    .venv/bin/python scripts/bench_bake.py

Each bake runs in a fresh process, as `cookiecutter` on the command line would, so Python's start
and cookiecutter's import are counted.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = 5
TARGET_S = 2.0


def bake_seconds(runs: int = RUNS) -> list[float]:
    """The wall-clock seconds of `runs` default bakes, each by the `cookiecutter` command."""
    cli = Path(sys.executable).parent / "cookiecutter"
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            subprocess.run([str(cli), "--no-input", "-o", out, str(ROOT)], check=True, capture_output=True)
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    times = bake_seconds()
    median = statistics.median(times)
    print(f"default bake with hooks: median {median:.2f} s over {RUNS} runs (min {min(times):.2f}, max {max(times):.2f})")
    print(f"target {TARGET_S:.1f} s: {'met' if median < TARGET_S else 'NOT met'}")


if __name__ == "__main__":
    main()
