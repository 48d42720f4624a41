"""`make bench`: the bake time, then a baked project's trainer against plain Keras, one line each.

    make bench                                  # the defaults: real figures, about 25 minutes
    .venv/bin/python scripts/bench.py --help    # sizes: --examples, --images, --pairs, ...

It bakes the default project, installs its lock (scripts/project_env.py) and drives it only
through its command line (`python -m <module> prepare|train --set key=value`) and what `train`
writes (results/metrics/train.json: `global_batch` and the per-epoch `history` with `seconds`).
The other sides are plain Keras (scripts/bench_keras.py, run with the project's interpreter, in
one server process per strategy so TensorFlow starts once). Workloads:

  mlp       784-64-64-10 MLP on synthetic vectors (a TFRecord file that `prepare` splits),
            batch 64 per replica, MirroredStrategy over 2 logical CPUs: the trainer against
            the "seed" (`model.fit` on float64 NumPy arrays, as a notebook writes it) and the
            "limit" (one hand-written tf.function per epoch over tensors already in memory).
  images    JPEGs (160x160) in class folders trained at 64x64 with the project's `cnn`: the
            trainer against `image_dataset_from_directory(validation_split=0.2, subset="both")`
            + `model.fit(train, validation_data=val)` (same layers, same steps per epoch) and
            against the fused loop on the decoded images in memory (`pipeline_vs_limit`); the
            peak RSS of `train` at N/4 and N images (the same number of steps).
  backbone  MobileNetV3Small (random weights, offline) at 96x96 on the same kind of JPEGs: the
            trainer against `image_dataset_from_directory` + `model.fit` with the same model.
  user_tests  `make test` (the tests of the user's loop) in a project its user has already
            worked in (`dvc repro`, `make train`, a sweep: project_env.use) and in a fresh one,
            alternating: seconds, median [min-max]; target: at most 120 s in the used project.

Every side but the MLP's seed (a notebook's bare `model.fit(x, y)`) validates each epoch, and all
run the same deterministic-ops and XLA settings. Speed is the examples trained per second in the
median epoch after the first (TensorFlow's start-up and the tracing epoch are left out on every
side; the MLP's default 5 epochs leave 4 and the backbone's 4 leave 3, so one slow epoch does not
set them). The sides alternate (trainer first, then last) for `--pairs` pairs; each figure is the
median of the pairwise ratios, followed by their spread `[min-max]`; a spread that straddles the
figure's goal says so.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bench_bake
import project_env

HERE = Path(__file__).resolve().parent
GOALS = {  # figure: the least it should be (issue 21)
    "ratio_vs_seed": 4.0,
    "ratio_vs_limit": 0.8,
    "pipeline_vs_limit": 0.9,
    "backbone_ratio_vs_fit": 1.1,
    "cnn_val_accuracy": 0.9,
}
USER_TESTS_LIMIT_S = 120  # `make test` in a used project, on 2 cores: at most this (issue 30)
PHOTO_SIDE = 160  # the JPEGs on disk ...
IMAGE_SIDE = 64  # ... trained at 64x64 (images: prepare resizes once, Keras every epoch)
BACKBONE_SIDE = 96  # ... and at 96x96 (backbone)
DETERMINISTIC = True  # the project's default (repro.deterministic), on every side
VERBOSE = False  # -v: each run's epochs on stderr
LOADS: list[float] = []  # the 1-minute load average after each run of the current workload


@dataclass
class Side:
    """One run of one side: examples trained per epoch and each epoch's seconds."""

    examples: int
    epoch_seconds: list[float]
    peak_rss_mb: float = 0.0

    @property
    def speed(self) -> float:
        """Examples/s of the median epoch after the first (tracing and start-up excluded)."""
        return self.examples / statistics.median(self.epoch_seconds[1:])


class KerasServer:
    """scripts/bench_keras.py in the project's interpreter: one request, one JSON answer."""

    def __init__(self, python: Path, log: Path, replicas: int, xla: bool, seed: int) -> None:
        args = [str(python), str(HERE / "bench_keras.py"), "--replicas", str(replicas),
                "--seed", str(seed)]  # fmt: skip
        args += ["--deterministic"] * DETERMINISTIC + ["--xla"] * xla
        self.log = log
        self._err = open(log, "w")  # noqa: SIM115 - closed in close()
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._err, text=True, env=env)  # fmt: skip
        self._read()

    def _read(self) -> str:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(("READY", "RESULT ")):
                return line
        raise RuntimeError(f"bench_keras.py exited {self.proc.wait()}: {tail(self.log)}")

    def ask(self, **request: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self._read().removeprefix("RESULT "))
        if "error" in answer:
            raise RuntimeError(f"bench_keras.py {request['way']}: {answer['error']}")
        return answer

    def side(self, **request: Any) -> Side:
        answer = self.ask(**request)
        return Side(answer["examples"], answer["epoch_seconds"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=120)
        self._err.close()


class Project:
    """A copy of the baked project for one workload, driven through its command line."""

    def __init__(self, baked: Path, folder: Path, python: Path, module: str, sets: dict) -> None:
        shutil.copytree(baked, folder, symlinks=True)
        self.folder, self.python, self.module = folder, python, module
        self.sets = sets  # --set overrides of every command in this workload
        self.env = {**os.environ, "PROJECT_STORAGE_DIR": str(folder / "storage"),
                    "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(folder / "src")}  # fmt: skip
        self.env.pop("PROJECT_RESULTS_DIR", None)

    def run(self, command: str, *args: str, **sets: Any) -> float:
        """Run `python -m <module> command`; return its peak RSS in MB (VmHWM, read from
        /proc/<pid>/status while it runs: the child's own peak since exec)."""
        overrides = {**self.sets, **sets}
        argv = [str(self.python), "-m", self.module, command, *args]
        argv += [a for key, value in overrides.items() for a in ("--set", f"{key}={value}")]
        log = self.folder / f"{command}.log"
        peak_kb = 0
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, cwd=self.folder, env=self.env, stdout=out,
                                    stderr=subprocess.STDOUT)  # fmt: skip
            status = Path(f"/proc/{proc.pid}/status")
            while proc.poll() is None:
                try:
                    text = status.read_text()
                except OSError:  # not Linux, or it has just exited
                    text = ""
                hwm = [line.split()[1] for line in text.splitlines() if line.startswith("VmHWM")]
                peak_kb = max([peak_kb, *map(int, hwm)])
                time.sleep(0.02)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}:\n{tail(log)}")
        return peak_kb / 1024

    def counts(self) -> dict[str, int]:
        """The split sizes `prepare` recorded in data/manifest.json."""
        return json.loads((self.folder / "data" / "manifest.json").read_text())["counts"]

    def train(self, **sets: Any) -> Side:
        """`train --fresh`; the epochs as results/metrics/train.json's `history` records them
        (`seconds` since the start of fitting, each epoch's validation and checkpoint in)."""
        rss = self.run("train", "--fresh", **sets)
        metrics = json.loads((self.folder / "results/metrics/train.json").read_text())
        history = metrics["history"]
        ends = [h["seconds"] for h in history]
        seconds = [ends[0], *(b - a for a, b in zip(ends, ends[1:], strict=False))]
        steps = history[1]["step"] - history[0]["step"] if len(history) > 1 else history[0]["step"]
        # The global batch is a fact of the run (its run record), not a metric.
        record = sorted((self.folder / "results/runs").glob("*/manifest.json"))[-1]
        return Side(steps * json.loads(record.read_text())["facts"]["global_batch"], seconds, rss)


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """File descriptor 1 to /dev/null for the block (subprocesses included)."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)


def tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def figure(name: str, ratios: list[float], goal: float | None = None) -> str:
    """`name=median [min-max]`, and where the goal stands against the spread."""
    text = f"{name}={statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
    if goal is None:
        return text
    if min(ratios) < goal <= max(ratios):
        return text + f" (spread straddles the goal {goal:g})"
    return text + f" (goal {goal:g} {'met' if min(ratios) >= goal else 'missed'})"


def speeds(name: str, sides: list[Side]) -> str:
    """`name=<median examples/s>/s`: context after the figures."""
    return f"{name}={statistics.median(s.speed for s in sides):.0f}/s"


def alternate(pair: int, *runs: Any) -> dict[int, Side]:
    """Run the sides of one pair, trainer first in even pairs and last in odd ones."""
    order = list(range(len(runs))) if pair % 2 == 0 else list(reversed(range(len(runs))))
    got = {}
    for i in order:
        got[i] = runs[i]()
        LOADS.append(os.getloadavg()[0])
        if VERBOSE:
            seconds = " ".join(f"{s:.2f}" for s in got[i].epoch_seconds)
            print(f"  {runs[i].__name__}: {got[i].examples} examples/epoch, epochs {seconds} s, "
                  f"load {LOADS[-1]:.1f}", file=sys.stderr, flush=True)  # fmt: skip
    return got


def say(text: str) -> None:
    """-v: progress on stderr."""
    if VERBOSE:
        print(f"  {text}", file=sys.stderr, flush=True)


# The workloads.


def mlp(work: Path, baked: Path, python: Path, module: str, args: argparse.Namespace) -> str:
    """mlp: trainer vs seed vs limit under MirroredStrategy over 2 logical CPUs."""
    keras = KerasServer(python, work / "keras-mlp.log", 2, args.xla, args.seed)
    try:
        if not keras.ask(way="check")["same"]:
            raise RuntimeError("bench_keras.example_bytes differs from tf.train.Example")
        source = work / "vectors.tfrecord"
        # Validation and test 5 % each: --examples is the training split's size.
        keras.ask(way="vectors", file=str(source), examples=round(args.examples / 0.9))
        project = Project(baked, work / "mlp", python, module, {
            "seed": args.seed, "run_name": "bench", "data.source": "tfrecord",
            "data.path": source, "data.feature_kind": "vector",
            "data.validation_fraction": 0.05, "data.test_fraction": 0.05,
            "model.architecture": "mlp", "model.hidden_units": "[64,64]", "model.dropout": 0.0,
            "train.epochs": args.epochs, "train.batch_size": 64, "train.mixed_precision": "false",
            "train.xla": str(args.xla).lower(), "repro.deterministic": str(DETERMINISTIC).lower(),
            "distribute.strategy": "mirrored", "distribute.logical_cpus": 2,
        })  # fmt: skip
        project.run("prepare")
        validation = project.counts()["validation"]
        trainer, seed, limit = [], [], []
        per_epoch = 0

        def run_trainer() -> Side:
            nonlocal per_epoch
            side = project.train()
            per_epoch = per_epoch or side.examples
            return side

        def run_seed() -> Side:
            return keras.side(way="seed", examples=per_epoch, epochs=args.epochs, batch=64)

        def run_limit() -> Side:
            return keras.side(way="limit", examples=per_epoch, validation=validation,
                              epochs=args.epochs, batch=64)  # fmt: skip

        for pair in range(args.pairs):  # pair 0 starts with the trainer: it sets per_epoch
            got = alternate(pair, run_trainer, run_seed, run_limit)
            trainer.append(got[0])
            seed.append(got[1])
            limit.append(got[2])
            say(f"mlp pair {pair + 1}: trainer {got[0].speed:,.0f} seed "
                f"{got[1].speed:,.0f} limit {got[2].speed:,.0f} examples/s")  # fmt: skip
    finally:
        keras.close()
    return " ".join([
        "mlp:",
        figure("ratio_vs_seed", [t.speed / s.speed for t, s in zip(trainer, seed, strict=True)],
               GOALS["ratio_vs_seed"]),
        figure("ratio_vs_limit", [t.speed / s.speed for t, s in zip(trainer, limit, strict=True)],
               GOALS["ratio_vs_limit"]),
        speeds("trainer", trainer), speeds("seed", seed), speeds("limit", limit),
        f"examples_per_epoch={per_epoch} epochs={args.epochs} pairs={args.pairs}",
    ])  # fmt: skip


def images(work: Path, baked: Path, python: Path, module: str, args: argparse.Namespace,
           keras: KerasServer) -> str:  # fmt: skip
    """images: the trainer vs image_dataset_from_directory + model.fit vs the fused loop (cnn);
    peak RSS of `train` at N/4 and N images."""
    n, batch, epochs = args.images, args.image_batch, args.image_epochs
    folder = work / f"photos-{n}"
    keras.ask(way="images", folder=str(folder), count=n, side=PHOTO_SIDE)
    project = Project(baked, work / "images", python, module, image_sets(args, folder, "cnn"))
    project.run("prepare")
    validation = project.counts()["validation"]
    trainer: list[Side] = []
    fit: list[Side] = []
    limit: list[Side] = []
    steps = 0

    def run_trainer() -> Side:
        nonlocal steps
        side = project.train()
        steps = steps or side.examples // batch
        return side

    def run_fit() -> Side:
        return keras.side(way="fit", folder=str(folder), model="cnn", side=IMAGE_SIDE,
                          steps=steps, epochs=epochs, batch=batch)  # fmt: skip

    def run_limit() -> Side:
        return keras.side(way="limit-images", folder=str(folder), model="cnn", side=IMAGE_SIDE,
                          steps=steps, validation=validation, epochs=epochs, batch=batch)  # fmt: skip

    for pair in range(args.pairs):
        got = alternate(pair, run_trainer, run_fit, run_limit)
        trainer.append(got[0])
        fit.append(got[1])
        limit.append(got[2])
        say(f"images pair {pair + 1}: trainer {got[0].speed:,.0f} fit "
            f"{got[1].speed:,.0f} limit {got[2].speed:,.0f} examples/s")  # fmt: skip
    # Memory: N/4 images for 4x the epochs (the same steps): peak RSS should not grow with N.
    small = n // 4
    keras.ask(way="images", folder=str(work / f"photos-{small}"), count=small, side=PHOTO_SIDE)
    sets = image_sets(args, work / f"photos-{small}", "cnn")
    smaller = Project(baked, work / "images-small", python, module, sets)
    smaller.run("prepare")
    rss_small = smaller.train(**{"train.epochs": 4 * epochs}).peak_rss_mb
    rss = statistics.median(t.peak_rss_mb for t in trainer)
    return " ".join([
        "images:",
        figure("ratio_vs_fit", [t.speed / f.speed for t, f in zip(trainer, fit, strict=True)]),
        figure("pipeline_vs_limit", [t.speed / x.speed for t, x in zip(trainer, limit, strict=True)],
               GOALS["pipeline_vs_limit"]),
        f"peak_rss_mb_{small}={rss_small:.0f} peak_rss_mb_{n}={rss:.0f}",
        speeds("trainer", trainer), speeds("fit", fit), speeds("limit", limit),
        f"images={n} raw={PHOTO_SIDE}x{PHOTO_SIDE} trained={IMAGE_SIDE}x{IMAGE_SIDE} "
        f"global_batch={batch} steps_per_epoch={steps} validation={validation} epochs={epochs} "
        f"pairs={args.pairs}",
    ])  # fmt: skip


def backbone(work: Path, baked: Path, python: Path, module: str, args: argparse.Namespace,
             keras: KerasServer) -> str:  # fmt: skip
    """backbone: MobileNetV3Small at 96x96, the trainer vs image_dataset_from_directory + fit."""
    n, batch, epochs = args.backbone_images, args.image_batch, args.backbone_epochs
    folder = work / f"photos-{n}"
    if not folder.is_dir():
        keras.ask(way="images", folder=str(folder), count=n, side=PHOTO_SIDE)
    sets = image_sets(args, folder, "backbone")
    sets["train.epochs"] = epochs
    project = Project(baked, work / "backbone", python, module, sets)
    project.run("prepare")
    trainer: list[Side] = []
    fit: list[Side] = []
    steps = 0

    def run_trainer() -> Side:
        nonlocal steps
        side = project.train()
        steps = steps or side.examples // batch
        return side

    def run_fit() -> Side:
        return keras.side(way="fit", folder=str(folder), model="backbone", side=BACKBONE_SIDE,
                          steps=steps, epochs=epochs, batch=batch)  # fmt: skip

    for pair in range(args.pairs):
        got = alternate(pair, run_trainer, run_fit)
        trainer.append(got[0])
        fit.append(got[1])
        say(f"backbone pair {pair + 1}: trainer {got[0].speed:,.0f} fit "
            f"{got[1].speed:,.0f} examples/s")  # fmt: skip
    ratios = [t.speed / f.speed for t, f in zip(trainer, fit, strict=True)]
    return " ".join([
        "backbone:",
        figure("ratio_vs_fit", ratios, GOALS["backbone_ratio_vs_fit"]),
        speeds("trainer", trainer), speeds("fit", fit),
        f"model=MobileNetV3Small weights=null images={n} raw={PHOTO_SIDE}x{PHOTO_SIDE} "
        f"trained={BACKBONE_SIDE}x{BACKBONE_SIDE} global_batch={batch} steps_per_epoch={steps} "
        f"epochs={epochs} pairs={args.pairs}",
    ])  # fmt: skip


def cnn(work: Path, baked: Path, python: Path, module: str, args: argparse.Namespace) -> str:
    """cnn: does the default `cnn` learn? Three shapes (64x64 JPEGs), the project's defaults
    (20 epochs, batch 32), the best val_accuracy of each seed; goal: median >= 0.9."""
    # shapes.py needs numpy and Pillow: the project's Python has them, the template's does not
    folder = work / "shapes"
    draw = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import shapes; "
            f"shapes.write_shapes(__import__('pathlib').Path({str(folder)!r}), per_class={args.cnn_per_class})")
    subprocess.run([str(python), "-c", draw], check=True)
    sets = {"data.source": "images", "data.path": folder, "data.image_size": "[64,64]",
            "data.image_channels": 3, "model.architecture": "cnn", "train.epochs": args.cnn_epochs}
    best = []
    for seed in range(args.cnn_seeds):
        project = Project(baked, work / f"cnn-{seed}", python, module, {**sets, "seed": seed})
        project.run("prepare")
        project.run("train")
        history = json.loads((project.folder / "results/metrics/train.json").read_text())["history"]
        best.append(max(h["val_accuracy"] for h in history))
        say(f"cnn seed {seed}: best val_accuracy {best[-1]:.3f}")
    return " ".join([
        "cnn:", figure("val_accuracy", best, GOALS["cnn_val_accuracy"]),
        f"seeds={args.cnn_seeds} epochs={args.cnn_epochs} images={3 * args.cnn_per_class} shapes=3",
    ])  # fmt: skip


def user_tests(work: Path, baked: Path, python: Path, module: str, args: argparse.Namespace) -> str:
    """user_tests: `make test` in a used project and in a fresh one, the sides alternating."""
    fresh = work / "user-fresh" / baked.name
    shutil.copytree(baked, fresh, symlinks=True)
    used = args.used_project
    if used is None:
        used = work / "user-used" / baked.name
        shutil.copytree(baked, used, symlinks=True)
        project_env.use(used, python, work / "user-used" / "use.log")
    seconds: dict[Path, list[float]] = {used: [], fresh: []}
    passed = 0
    for pair in range(args.user_test_pairs):
        for project in (used, fresh) if pair % 2 == 0 else (fresh, used):
            env = project_env.project_command_env(project, python)
            env["PYTEST_ADDOPTS"] = "-p no:cacheprovider" + (f" -k {args.user_tests_select!r}"
                                                             if args.user_tests_select else "")
            started = time.perf_counter()
            run = subprocess.run(["make", "test"], cwd=project, env=env, capture_output=True, text=True)
            seconds[project].append(time.perf_counter() - started)
            LOADS.append(os.getloadavg()[0])
            if run.returncode != 0:
                raise RuntimeError(f"make test failed in {project}:\n{run.stdout[-3000:]}{run.stderr[-2000:]}")
            passed = int(re.findall(r"(\d+) passed", run.stdout)[-1])
            say(f"make test in the {'used' if project == used else 'fresh'} project: "
                f"{seconds[project][-1]:.0f} s, {passed} passed, load {LOADS[-1]:.1f}")  # fmt: skip

    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.0f} [{min(values):.0f}-{max(values):.0f}]"

    limit, worst = USER_TESTS_LIMIT_S, max(seconds[used])
    verdict = "met" if worst <= limit else "missed" if min(seconds[used]) > limit else "straddled"
    return " ".join([
        f"user_tests: used_seconds={spread(seconds[used])} (target {limit} s: {verdict})",
        f"fresh_seconds={spread(seconds[fresh])} passed={passed} pairs={args.user_test_pairs}",
    ])  # fmt: skip


def image_sets(args: argparse.Namespace, folder: Path, architecture: str) -> dict[str, Any]:
    """The --set overrides of an image workload: the folder, the model, one device."""
    side = BACKBONE_SIDE if architecture == "backbone" else IMAGE_SIDE
    sets: dict[str, Any] = {
        "seed": args.seed, "run_name": "bench", "data.source": "images", "data.path": folder,
        "data.image_size": f"[{side},{side}]", "data.image_channels": 3, "data.augment": "[]",
        "model.architecture": architecture, "model.dropout": 0.0,
        "train.epochs": args.image_epochs, "train.batch_size": args.image_batch,
        "train.mixed_precision": "false", "train.xla": str(args.xla).lower(),
        "repro.deterministic": str(DETERMINISTIC).lower(), "distribute.strategy": "default",
    }  # fmt: skip
    if architecture == "backbone":
        sets.update({"model.backbone": "MobileNetV3Small", "model.weights": "null"})
    return sets


WORKLOADS = ("mlp", "images", "backbone", "cnn", "user_tests")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=60_000, help="mlp: training examples")
    p.add_argument("--epochs", type=int, default=5, help="mlp: epochs per run (>= 2)")
    p.add_argument("--images", type=int, default=3000, help="images: JPEGs (N; RSS also at N/4)")
    p.add_argument("--image-epochs", type=int, default=3, help="images: epochs per run (>= 2)")
    p.add_argument("--image-batch", type=int, default=32, help="images, backbone: batch size")
    p.add_argument("--backbone-images", type=int, default=1500, help="backbone: JPEGs")
    p.add_argument("--backbone-epochs", type=int, default=4, help="backbone: epochs per run")
    p.add_argument("--cnn-per-class", type=int, default=300, help="cnn: images per shape")
    p.add_argument("--cnn-epochs", type=int, default=20, help="cnn: epochs per seed")
    p.add_argument("--cnn-seeds", type=int, default=3, help="cnn: seeds (runs)")
    p.add_argument("--pairs", type=int, default=5, help="runs of each side per workload")
    p.add_argument("--user-test-pairs", type=int, default=2,
                   help="user_tests: `make test` runs in each project (1-2 min each)")
    p.add_argument("--user-tests-select", default="", help="user_tests: only these tests (pytest -k)")
    p.add_argument("--used-project", type=Path, default=None,
                   help="user_tests: a project already used (project_env.use), instead of making one")
    p.add_argument("--bake-runs", type=int, default=5, help="bakes timed")
    p.add_argument("--only", nargs="+", choices=WORKLOADS, default=list(WORKLOADS),
                   help="workloads to run")  # fmt: skip
    p.add_argument("--xla", action="store_true", help="train.xla on every side (jit_compile)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it")
    p.add_argument("-v", "--verbose", action="store_true", help="each pair's speeds on stderr")
    args = p.parse_args(argv)
    if min(args.epochs, args.image_epochs, args.backbone_epochs) < 2 or min(args.pairs, args.user_test_pairs) < 1:
        p.error("epochs must be >= 2 (the first is left out), --pairs and --user-test-pairs >= 1")
    if args.images < 4:
        p.error("--images must be >= 4 (peak RSS is also measured at N/4)")
    return args


def timed(workload: Any, *args: Any) -> str:
    """The workload's line, with its wall-clock seconds and the machine's median load average
    (this benchmark alone keeps it near 2 on two cores; more means other work ran meanwhile)."""
    LOADS.clear()
    started = time.perf_counter()
    line = workload(*args)
    load = statistics.median(LOADS) if LOADS else os.getloadavg()[0]
    return f"{line} seconds={time.perf_counter() - started:.0f} load={load:.1f}"


def main(argv: list[str] | None = None) -> None:
    global VERBOSE
    args = parse_args(argv)
    VERBOSE = args.verbose
    bakes = bench_bake.bake_seconds(args.bake_runs)
    print(f"bake: median {statistics.median(bakes):.2f} s [{min(bakes):.2f}-{max(bakes):.2f}] "
          f"over {len(bakes)} default bakes with hooks (target {bench_bake.TARGET_S:g} s: "
          f"{'met' if statistics.median(bakes) < bench_bake.TARGET_S else 'missed'})",
          flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        with quiet_stdout():  # the post-generation hook's "next steps"
            baked = project_env.bake(work / "baked")
        # The locked environment, the package from each copy's src/ (PYTHONPATH): an editable
        # install here would swap the package under a test suite using the same environment.
        python = project_env.locked_python(baked)
        module = next(p.name for p in (baked / "src").iterdir() if (p / "__main__.py").exists())
        if "mlp" in args.only:
            print(timed(mlp, work, baked, python, module, args), flush=True)
        if {"images", "backbone"} & set(args.only):
            keras = KerasServer(python, work / "keras-images.log", 1, args.xla, args.seed)
            try:
                for name, workload in (("images", images), ("backbone", backbone)):
                    if name in args.only:
                        line = timed(workload, work, baked, python, module, args, keras)
                        print(line, flush=True)
            finally:
                keras.close()
        if "cnn" in args.only:
            print(timed(cnn, work, baked, python, module, args), flush=True)
        if "user_tests" in args.only:
            print(timed(user_tests, work, baked, python, module, args), flush=True)


if __name__ == "__main__":
    main()
