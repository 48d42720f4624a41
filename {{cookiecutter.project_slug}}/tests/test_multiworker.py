"""Two workers on 127.0.0.1 train together under MultiWorkerMirroredStrategy (from TF_CONFIG).

The chief/worker form{% if cookiecutter.vertex_ai %} (Vertex AI's){% endif %} is exercised in test_chief_worker.py.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
from pathlib import Path

import pytest
from conftest import PARAMS, TINY, cli, cli_env, sets

from {{ cookiecutter.module_name }}.training.checkpoints import list_checkpoints
from {{ cookiecutter.module_name }}.training.policy import EXIT_BUDGET
from {{ cookiecutter.module_name }}.training.run_record import find_run

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _run_cluster(
    tmp_path: Path, storage: Path, extra: list[list[str]]
) -> list[tuple[Path, int, str]]:
    """Start worker 0 and worker 1 (worker 0 is the chief), each in its own project copy (as on
    separate machines) with the shared `storage`; return (project, exit code, output) for each."""
    a, b = (f"127.0.0.1:{p}" for p in _free_ports(2))
    procs = []
    for index in (0, 1):
        project = tmp_path / f"worker{index}"
        project.mkdir(exist_ok=True)
        shutil.copy(PARAMS, project)
        tf_config = json.dumps(
            {"cluster": {"worker": [a, b]}, "task": {"type": "worker", "index": index}}
        )
        args = ["train", *sets([*TINY, "train.batch_size=16", "run_name=mw", *extra[index]])]
        procs.append((project, cli(args, project, cli_env(storage, TF_CONFIG=tf_config))))
    results = []
    try:
        for project, proc in procs:
            out = proc.communicate(timeout=300)[0]
            results.append((project, proc.returncode, out))
    finally:
        for _, proc in procs:
            if proc.poll() is None:
                proc.kill()
    return results


@pytest.mark.slow
def test_two_workers_stop_together_resume_and_end_with_the_same_weights(tmp_path: Path) -> None:
    storage = tmp_path / "shared-storage"  # like a bucket both machines mount
    # 1. Only worker 1 has a (tiny) time budget: both must stop at the same step, or worker 0
    #    would wait forever in the next all-reduce.
    first = _run_cluster(tmp_path, storage, [[], ["train.time_budget_minutes=0.00005"]])
    stops = []
    for _, code, out in first:
        assert "MultiWorkerMirroredStrategy on CPU: 2 workers, 2 replicas" in out, out
        assert "Global batch 32 = 16 per replica x 2 replicas" in out
        assert code == EXIT_BUDGET, out
        stops.append(int(re.search(r"Stopped at step (\d+) of 88", out).group(1)))
    assert stops[0] == stops[1] and 0 < stops[0] < 88
    assert "another worker stopped" in first[0][2]
    assert list_checkpoints(storage / "checkpoints" / "mw")[-1][0] == stops[0]

    # 2. Both resume from the chief's checkpoint and finish with identical weights.
    second = _run_cluster(tmp_path, storage, [[], []])
    digests = []
    for _, code, out in second:
        assert code == 0, out
        assert f"from its checkpoint at step {stops[0]}" in out
        digests.append(re.search(r"final weights sha256 (\w+)", out).group(1))
    assert digests[0] == digests[1]

    chief_project, worker_project = second[0][0], second[1][0]
    record = find_run(chief_project / "results")  # train.json's run: its facts and numbers
    facts, metrics = record["facts"], record["metrics"]
    assert facts["workers"] == 2 and facts["weights_sha256"] == digests[0]
    assert metrics["steps"] == 2 * (1438 // 32)
    assert (chief_project / "results/models/model.keras").is_file()
    assert not (worker_project / "results").exists()  # the other worker keeps nothing
    assert list_checkpoints(storage / "checkpoints" / "mw")[-1][0] == metrics["steps"]

    # 3. The finished run trained again: the chief keeps its results as recorded while the other
    #    worker saves into its scratch folder: Keras' save must wait for no other worker (a
    #    collective op there would hang it until _run_cluster's timeout).
    before = _files(chief_project / "results")
    third = _run_cluster(tmp_path, storage, [[], []])
    for _, code, out in third:
        assert code == 0, out
        assert "is already complete (88 steps)" in out, out
    assert "its results are there already" in third[0][2]
    # the other worker's save goes to its scratch folder, deleted at the end: it says so
    assert "this worker leaves its results to the chief" in third[1][2]
    assert "writing its results" not in third[0][2] + third[1][2]
    assert _files(chief_project / "results") == before
    assert not (worker_project / "results").exists()


@pytest.mark.slow
def test_early_stopping_on_one_worker_stops_both_at_the_same_step(tmp_path: Path) -> None:
    # Only worker 1 has patience: its verdict is agreed across workers (the lockstep rule), so
    # worker 0 stops at the same epoch end instead of waiting in the next all-reduce forever.
    # A learning rate of 1e-9 leaves val_accuracy where it was: no improvement after epoch 1.
    common = ["train.epochs=4", "train.learning_rate=1e-9", "train.monitor=val_accuracy"]
    runs = _run_cluster(
        tmp_path, tmp_path / "storage", [common, [*common, "train.early_stopping_patience=1"]]
    )
    for _, code, out in runs:
        assert code == 0, out
        assert re.search(r"Done: step 88\b", out), out
    assert "another worker stopped early" in runs[0][2]
    assert "has not improved for 1 epochs" in runs[1][2]


@pytest.mark.slow
def test_workers_started_with_other_settings_stop_at_once_in_one_line(tmp_path: Path) -> None:
    # Worker 1's params.yaml was edited, worker 0's not: they would run a different number of
    # steps, and the one that ends first leaves the other in an all-reduce with no partner.
    runs = _run_cluster(tmp_path, tmp_path / "storage", [[], ["train.epochs=3"]])
    for _, code, out in runs:
        assert code == 1, out
        assert "error: the workers were started with other settings" in out, out
        assert "Traceback" not in out and "Starting run" not in out
    assert not (tmp_path / "storage" / "checkpoints" / "mw").exists()
