"""`make bench` (scripts/bench.py) end to end at tiny sizes: the bake line, then one line per
workload with every figure followed by its spread. At these sizes the figures mean nothing; the
lines are the interface. Marked `bench`: part of `make test` (about 4 minutes on 2 idle cores,
most of it TensorFlow starting in each process, plus `make test` of a few tests in the shared used
project and in a fresh one); `pytest -m "not bench"` leaves it out."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import bench

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--examples", "3000", "--epochs", "2", "--images", "200", "--image-epochs", "2",
        "--image-batch", "8", "--backbone-images", "200", "--backbone-epochs", "2",
        "--cnn-per-class", "20", "--cnn-epochs", "2", "--cnn-seeds", "1",
        "--pairs", "1", "--bake-runs", "1"]  # fmt: skip
SPREAD = r"=(\d+\.\d\d) \[(\d+\.\d\d)-(\d+\.\d\d)\]"


# user_tests: one `make test` of a few tests in the shared used project and in a fresh one.
USER_TESTS = ["--user-test-pairs", "1", "--user-tests-select", "test_each_source"]


@pytest.mark.bench
def test_bench_prints_every_line_with_its_spread(tmp_path: Path, used_project: tuple[Path, Path]) -> None:
    used = ["--used-project", str(used_project[0])]
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench.py"), *TINY, *USER_TESTS, *used, "--keep", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=1800,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-4000:]
    lines = run.stdout.splitlines()
    assert re.match(r"bake: median \d+\.\d\d s \[\d+\.\d\d-\d+\.\d\d\] over 1 default bake", lines[0])
    expected = {
        "mlp": ["ratio_vs_seed", "ratio_vs_limit"],
        "images": ["ratio_vs_fit", "pipeline_vs_limit"],
        "backbone": ["ratio_vs_fit"],
        "cnn": ["val_accuracy"],
    }
    assert [line.split(":")[0] for line in lines[1:]] == [*expected, "user_tests"], run.stdout
    for line, (workload, figures) in zip(lines[1:-1], expected.items(), strict=True):
        for name in figures:
            found = re.search(rf"\b{name}{SPREAD}", line)
            assert found, f"{workload}: no {name}=median [min-max] in {line!r}"
            median, low, high = map(float, found.groups())
            assert 0 < low <= median <= high, line
    assert re.search(r"\bpeak_rss_mb_50=\d+ peak_rss_mb_200=\d+\b", lines[2]), lines[2]
    seconds = r"=(\d+) \[(\d+)-(\d+)\]"
    found = re.match(rf"user_tests: used_seconds{seconds} \(target 120 s: (met|missed|straddled)\) "
                     rf"fresh_seconds{seconds} passed=(\d+) pairs=1 ", lines[-1])  # fmt: skip
    assert found, lines[-1]
    assert int(found.group(8)) >= 5, "every source's test ran"


def test_a_figure_says_where_its_goal_stands() -> None:
    assert bench.figure("ratio_vs_fit", [1.2, 0.9, 1.3]) == "ratio_vs_fit=1.20 [0.90-1.30]"
    assert bench.figure("r", [1.2, 0.9, 1.3], 1.1) == "r=1.20 [0.90-1.30] (spread straddles the goal 1.1)"
    assert bench.figure("r", [1.2, 1.1, 1.3], 1.1) == "r=1.20 [1.10-1.30] (goal 1.1 met)"
    assert bench.figure("r", [0.8, 0.9], 1.1) == "r=0.85 [0.80-0.90] (goal 1.1 missed)"
