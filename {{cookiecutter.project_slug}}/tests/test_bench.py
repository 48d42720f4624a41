"""`bench` runs end to end on a tiny size and prints its table and the ratio line.

Speed itself is not asserted here (a loaded CI machine would make that flaky); the README holds
the measured numbers.
"""

from __future__ import annotations

import re
from pathlib import Path

from conftest import PROJECT

from {{ cookiecutter.module_name }}.__main__ import main


def test_bench_prints_three_methods_and_the_ratio_line(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PROJECT_STORAGE_DIR", str(tmp_path))
    code = main(
        ["bench", "--params", str(PROJECT / "params.yaml"), "--examples", "1200", "--epochs", "2"]
    )
    out = capsys.readouterr().out
    assert code == 0
    for label in ("model.fit on NumPy arrays", "this trainer", "one tf.function per epoch"):
        assert label in out
    last = out.strip().splitlines()[-1]
    match = re.fullmatch(r"ratio_vs_seed=(\d+\.\d+) ratio_vs_limit=(\d+\.\d+)", last)
    assert match, last
    assert float(match.group(1)) > 0 and float(match.group(2)) > 0


def test_bench_needs_two_epochs(capsys) -> None:
    assert main(["bench", "--params", str(PROJECT / "params.yaml"), "--epochs", "1"]) == 2
    assert "--epochs >= 2" in capsys.readouterr().err
