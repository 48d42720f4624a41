"""`bench` runs end to end on a tiny size and prints its tables and figure lines.

Speed itself is not asserted here (a loaded CI machine would make that flaky); the README holds
the measured numbers. The peak RSS of `train` for N and 4N images is checked with a generous
bound: the input pipeline holds a few batches, not the data set.
"""

from __future__ import annotations

import re
from pathlib import Path

from conftest import PROJECT

from {{ cookiecutter.module_name }}.__main__ import main


def test_bench_prints_the_ratio_lines_and_memory_is_flat(
    capsys, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path))
    args = ["--examples", "1200", "--epochs", "2", "--images", "100", "--image-steps", "10"]
    args += ["--fit-images", "60", "--fit-epochs", "2", "--image-batch-size", "8"]
    code = main(["bench", "--params", str(PROJECT / "params.yaml"), *args])
    out = capsys.readouterr().out
    assert code == 0
    for label in ("model.fit on NumPy arrays", "this trainer", "one tf.function per epoch"):
        assert label in out
    match = re.search(r"(?m)^ratio_vs_seed=(\d+\.\d+) ratio_vs_limit=(\d+\.\d+)$", out)
    assert match, out
    assert float(match.group(1)) > 0 and float(match.group(2)) > 0
    last = out.strip().splitlines()[-1]
    match = re.fullmatch(
        r"pipeline_vs_limit=(\d+\.\d+) peak_rss_mb_100=(\d+) peak_rss_mb_400=(\d+) "
        r"ratio_vs_fit=(\d+\.\d+) images=60 raw=160x160 trained=64x64 global_batch=(\d+) "
        r"parameters=(\d+)",
        last,
    )
    assert match, last
    assert float(match.group(1)) > 0 and float(match.group(4)) > 0
    assert int(match.group(5)) >= 8 and int(match.group(6)) > 0
    assert re.search(r"(?m)^prepare \(one-time\): 60 JPEGs 160x160 .* in \d+\.\d s$", out), out
    for label in ("this trainer on prepare's shards", "image_dataset_from_directory+fit"):
        assert out.count(label) == 3, out  # three alternating runs each
    small, large = int(match.group(2)), int(match.group(3))
    # Generous, so machine noise never fails it: it catches a gross leak (say a per-epoch cache
    # or a copy of the data per chunk), not 300 small images (14 MB as float32). `bench` with its
    # default sizes gives the real figures.
    assert large < small * 1.25 + 50, (small, large)


def test_bench_needs_two_epochs(capsys) -> None:
    assert main(["bench", "--params", str(PROJECT / "params.yaml"), "--epochs", "1"]) == 2
    assert "--epochs >= 2" in capsys.readouterr().err
