"""`speed` on a user's data (prepared first): one line per measurement, what to try, the verdict
last; a run record of kind "speed" and TensorBoard scalars; no checkpoint or run state touched.
In-process (the logical CPUs of conftest.py): no TensorFlow start of its own."""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import sets, tensorboard_values
from examples import write_images

from {{ cookiecutter.module_name }}.__main__ import main
from {{ cookiecutter.module_name }}.training.run_record import list_runs

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

LAST = re.compile(
    r"bottleneck=(input|compute) input_examples_per_sec=(\S+) "
    r"compute_examples_per_sec=(\S+) together_examples_per_sec=(\S+)"
)


def _csv(path: Path, rows: int = 200) -> None:
    """Two features and a class: small tabular data, held on the replicas' devices."""
    rng = np.random.default_rng(0)
    lines = ["a,b,label"] + [
        f"{a:.3f},{b:.3f},{'yes' if a > b else 'no'}" for a, b in rng.random((rows, 2))
    ]
    path.write_text("\n".join(lines) + "\n")


CASES = {
    # The small image folder, streamed (decoded every step), one replica.
    "images": (write_images, "images", "data.source=images", "data.image_size=[16,16]",
               "data.image_channels=3", "model.architecture=cnn", "model.filters=[8]",
               "distribute.strategy=default"),
    # A CSV held in memory (no per-step iterator) under two logical-CPU replicas.
    "csv": (_csv, "table.csv", "data.source=csv", "data.label=label", "model.hidden_units=[8]",
            "distribute.strategy=mirrored", "distribute.logical_cpus=2"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_speed_names_the_bottleneck_and_records_it(
    tiny_project: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    write, name, *overrides = CASES[case]
    source = tiny_project / name
    write(source)
    overrides += [f"data.path={source}", "train.batch_size=4", "train.steps_per_execution=3"]
    params = ["--params", str(tiny_project / "params.yaml")]
    assert main(["prepare", *params, *sets(overrides)]) == 0
    capsys.readouterr()

    assert main(["speed", "--steps", "5", *params, *sets(overrides)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    verdict = LAST.fullmatch(lines[-1])
    assert verdict, lines[-3:]
    rates = [float(v) for v in verdict.groups()[1:]]
    assert all(r > 0 for r in rates)
    slower = "input" if rates[0] < rates[1] else "compute"
    assert verdict.group(1) == slower
    assert lines[-2].startswith("try: ") and len(lines[-2]) > len("try: ")
    assert "smaller images" not in lines[-2]  # 16x16: an example's fixed cost outweighs its pixels
    for measured in ("input", "compute", "together"):
        assert sum(line.startswith(f"{measured} ") for line in lines) == 1, lines

    # The record (kind "speed") and TensorBoard; no checkpoint, no run of the project.
    (record,) = list_runs(tiny_project)
    assert record["kind"] == "speed" and record["run_name"] == "baseline"
    figures = {k: record["metrics"][f"{k}_examples_per_sec"] for k in ("input", "compute")}
    assert figures == {"input": rates[0], "compute": rates[1]}
    assert record["metrics"]["bottleneck"] == slower
    assert record["reproduce"][-1].endswith(" speed")
    folder = tiny_project / "results/tensorboard/baseline/speed"
    assert len(list(folder.glob("events.out.*"))) == 1 and set(tensorboard_values(folder)) == {
        f"speed/{k}_examples_per_sec" for k in ("input", "compute", "together")
    }
    storage = Path(os.environ["PROJECT_STORAGE_DIR"])
    assert not (storage / "checkpoints").exists()
    assert not (tiny_project / "results/models/model.keras").exists()


def test_a_full_results_disk_is_one_line_and_the_verdict_stays_last(
    tiny_project: Path, small_storage: tuple[Path, bool], monkeypatch, capsys
) -> None:
    """Results on a full disk: the figures and the verdict as ever, one line for the record."""
    write, name, *overrides = CASES["csv"]
    write(tiny_project / name)
    overrides += [f"data.path={tiny_project / name}", "train.batch_size=4"]
    params = ["--params", str(tiny_project / "params.yaml")]
    assert main(["prepare", *params, *sets(overrides)]) == 0
    storage, mounted = small_storage
    if mounted:  # every block taken
        with contextlib.suppress(OSError), open(storage / "fill", "wb") as fill:
            while True:
                fill.write(b"\0" * 65536)
    else:
        full = OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr("os.replace", lambda *a: (_ for _ in ()).throw(full))
    monkeypatch.setenv("PROJECT_RESULTS_DIR", str(storage / "results"))
    capsys.readouterr()
    assert main(["speed", "--steps", "3", *params, *sets(overrides)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert LAST.fullmatch(lines[-1]) and lines[-2].startswith("try: "), lines
    (said,) = [line for line in lines if "speed record" in line]
    assert said.startswith("WARNING: speed record not written (") and "No space left" in said
