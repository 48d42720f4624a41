"""`python -m <module> bench`: how fast is the trainer, against `model.fit` and against a limit?

Same process, same MirroredStrategy, same 784-64-64-10 MLP, same synthetic data, batch size and
epochs for all three:

  (a) seed    `model.fit` on float64 NumPy arrays, as in the seed document (the usual notebook
              way), without its progress bar;
  (b) trainer this project's `fit`, with checkpoints and TensorBoard logging on;
  (c) limit   one hand-written `tf.function` per epoch, data already in memory: no input
              pipeline, no checkpoints, no logging. Nothing practical is faster on this model.

Speed is examples trained per wall-clock second in the median epoch after the first (one-time
tracing is left out; for (b) the checkpoints, logging and validation of that epoch are in; the
median keeps one epoch slowed by another process from deciding the result); the speed over the
whole call, tracing and setup included, is shown next to it.
Memory is the peak resident set size (RSS) of the process during the call minus the RSS at its
start, sampled every 5 ms: it counts TensorFlow's C++ allocations (tracemalloc would not), but
also anything else the process does meanwhile, and memory freed and reused is not counted twice.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .config import ModelConfig, Params
from .model import build_model
from .pipeline import Prepared, load_prepared, train_dataset
from .prepare import split_indices, write_processed
from .seeding import seed_everything
from .sources import Source
from .storage import RunPaths
from .strategy import make_strategy
from .trainer import fit

IMAGE_SIDE = 96  # the image workload: 96x96 RGB JPEGs, as in issue 10's measurements


class RssPeak:
    """Peak RSS above the starting RSS while the `with` block runs (Linux: /proc/self/statm)."""

    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self.page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self.start = self.peak = 0
        self._stop = threading.Event()

    def _rss(self) -> int:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * self.page
        except OSError:  # not Linux: fall back to the lifetime peak (KiB on Linux, bytes on macOS)
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak = max(self.peak, self._rss())

    def __enter__(self) -> RssPeak:
        self.start = self.peak = self._rss()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())

    @property
    def extra_mb(self) -> float:
        return (self.peak - self.start) / 2**20


def run_bench(params: Params, examples: int, epochs: int, batch_size: int) -> dict[str, float]:
    """Run (a), (b), (c); print a table and `ratio_vs_seed=B/A ratio_vs_limit=B/C`."""
    # MirroredStrategy for all three, as in the seed document; distribute.logical_cpus and
    # distribute.gpus still choose its devices.
    strategy, info = make_strategy(dataclasses.replace(params.distribute, strategy="mirrored"))
    seed_everything(params.seed, params.repro.deterministic)
    import keras
    import tensorflow as tf

    rng = np.random.default_rng(params.seed)
    x_all = rng.random((examples, 784), dtype=np.float32)
    y_all = rng.integers(0, 10, examples).astype(np.int32)
    model_cfg = ModelConfig(hidden_units=[64, 64], dropout=0.0)
    params = dataclasses.replace(
        params,
        model=model_cfg,
        train=dataclasses.replace(
            params.train, epochs=epochs, batch_size=batch_size, mixed_precision=False
        ),
    )
    global_batch = batch_size * info.replicas
    tmp = tempfile.TemporaryDirectory(prefix="bench-data-")
    data, idx = _vector_shards(x_all, y_all, Path(tmp.name), params)
    x_train, y_train = x_all[idx], y_all[idx]
    steps = len(x_train) // global_batch
    print(
        f"bench: {len(x_train)} examples x {epochs} epochs, batch {batch_size} per replica x "
        f"{info.replicas} replicas, 784-64-64-10 MLP, {info.name} on {info.device}; "
        f"trainer: steps_per_execution={params.train.steps_per_execution}, "
        f"checkpoint_every_steps={params.train.checkpoint_every_steps}",
        flush=True,
    )
    lr = params.train.learning_rate

    # The seed document scales pixels with `x / 255.0`, which gives float64 arrays.
    x_seed = x_train.astype("float64")

    def seed_way() -> tuple[int, list[float]]:
        with strategy.scope():
            model = build_model(data.spec, 10, model_cfg)
            model.compile(
                optimizer=keras.optimizers.Adam(lr),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"],
            )
        ends: list[float] = []
        stamp = keras.callbacks.LambdaCallback(
            on_epoch_end=lambda epoch, logs: ends.append(time.perf_counter())
        )
        # verbose=0: the seed's default progress bar would only add printing time to (a).
        model.fit(
            x_seed,
            y_train,
            batch_size=global_batch,
            epochs=epochs,
            verbose=0,
            callbacks=[stamp],
        )
        return len(x_train), ends  # fit also trains the last, partial batch

    def trainer_way() -> tuple[int, list[float]]:
        with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
            root = Path(tmp)
            paths = RunPaths(
                checkpoints=root / "checkpoints",
                restore_from=root / "checkpoints",
                tensorboard=root / "tensorboard",
                model_file=root / "model.keras",
                metrics_file=root / "train.json",
            )
            started = time.perf_counter()
            result = fit(params, strategy, info, data, paths, fresh=True, progress=False)
        # Epoch ends as the trainer recorded them (validation and checkpoints included).
        ends = [started + h["seconds"] for h in result.metrics["history"]]
        return steps * global_batch, ends

    def limit_way() -> tuple[int, list[float]]:
        with strategy.scope():
            model = build_model(data.spec, 10, model_cfg)
            optimizer = keras.optimizers.Adam(lr)
            optimizer.build(model.trainable_variables)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
        with tf.device("/cpu:0"):
            x = tf.constant(x_train)
            y = tf.constant(y_train)

        def replica_step(xe: tf.Tensor, ye: tf.Tensor, i: tf.Tensor) -> None:
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            xb, yb = xe[i, rid], ye[i, rid]
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(
                    loss_fn(yb, model(xb, training=True)), global_batch_size=global_batch
                )
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

        @tf.function
        def one_epoch(order: tf.Tensor) -> None:
            # The whole epoch, shuffled and cut into batches up front: [steps, replicas, batch].
            xe = tf.reshape(tf.gather(x, order), [steps, info.replicas, batch_size, -1])
            ye = tf.reshape(tf.gather(y, order), [steps, info.replicas, batch_size])
            for i in tf.range(steps):
                strategy.run(replica_step, args=(xe, ye, i))

        n = steps * global_batch
        ends = []
        for epoch in range(epochs):
            key = tf.constant([params.seed, epoch], tf.int64)
            one_epoch(tf.random.experimental.stateless_shuffle(tf.range(len(x_train)), key)[:n])
            float(optimizer.iterations.numpy())  # wait for the last step
            ends.append(time.perf_counter())
        return n, ends

    rows = [
        ("a", "model.fit on NumPy arrays (seed)", seed_way),
        ("b", "this trainer, checkpoints + logging", trainer_way),
        ("c", "one tf.function per epoch (limit)", limit_way),
    ]
    speeds: dict[str, float] = {}
    print(
        f"{'':3}{'method':38}{'examples/s':>11}{'(whole call)':>13}{'seconds':>9}"
        f"{'peak RSS +MB':>14}"
    )
    for key, label, run in rows:
        steady, whole, seconds, mem = _measure(run, tf, info.device)
        speeds[key] = steady
        print(f"{key:3}{label:38}{steady:11,.0f}{whole:13,.0f}{seconds:9.2f}{mem:>14}", flush=True)
    print(
        "examples/s: median epoch after the first (tracing excluded; checkpoints, logging and "
        "validation included for b); whole call: every epoch, tracing and setup included",
        flush=True,
    )
    tmp.cleanup()
    ratio_seed = speeds["b"] / speeds["a"]
    ratio_limit = speeds["b"] / speeds["c"]
    print(f"ratio_vs_seed={ratio_seed:.2f} ratio_vs_limit={ratio_limit:.2f}", flush=True)
    return {**speeds, "ratio_vs_seed": ratio_seed, "ratio_vs_limit": ratio_limit}


def _measure(
    run: Callable[[], tuple[int, list[float]]], tf: Any, device: str
) -> tuple[float, float, float, str]:
    """(median examples/s of epochs 2+, whole-call examples/s, seconds, memory) of one method.

    `run` returns the examples of one epoch and the times at which each epoch ended."""
    if device == "GPU":
        tf.config.experimental.reset_memory_stats("GPU:0")
    with RssPeak() as rss:
        started = time.perf_counter()
        per_epoch, ends = run()
        seconds = time.perf_counter() - started
    # The median epoch after the first: robust to one slow epoch (another process on the machine).
    steady = per_epoch / statistics.median(b - a for a, b in itertools.pairwise(ends))
    mem = f"{rss.extra_mb:.0f}"
    if device == "GPU":
        mem += f" (GPU {tf.config.experimental.get_memory_info('GPU:0')['peak'] / 2**20:.0f})"
    return steady, per_epoch * len(ends) / seconds, seconds, mem


def _vector_shards(
    x: np.ndarray, y: np.ndarray, folder: Path, params: Params
) -> tuple[Prepared, np.ndarray]:
    """Synthetic vectors written as `prepare` writes them (95 % train, 5 % validation)."""
    source = Source("vector", y, [str(i) for i in range(10)], x.__getitem__, str, x.shape[1:])
    idx = split_indices(y, 0.05, 0.0, params.seed)
    return Prepared(write_processed(source, idx, folder, params), folder), idx["train"]


def make_images(folder: Path, count: int, size: tuple[int, int], seed: int) -> int:
    """`count` JPEGs in 10 class folders (smooth colour fields plus noise); return their bytes."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    h, w = size
    ramp = np.linspace(0, 1, w, dtype=np.float32)[None, :, None]
    total = 0
    for i in range(count):
        colour = rng.random(3, dtype=np.float32) * 200
        pixels = colour * ramp + rng.normal(0, 12, (h, w, 3)) + 28
        path = folder / f"class{i % 10}" / f"{i:06d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path, quality=90)
        total += path.stat().st_size
    return total


def pipeline_vs_limit(data: Prepared, global_batch: int, steps: int, seed: int) -> float:
    """Examples/s of the training pipeline (no augmentation) over a bare read+decode map."""
    import tensorflow as tf

    from .pipeline import decoder

    def rate(ds: Any) -> float:
        it = iter(ds)
        for _ in range(5):  # warm-up: threads, autotuning, file opening
            next(it)
        started = time.perf_counter()
        for _ in range(steps):
            next(it)
        return steps * global_batch / (time.perf_counter() - started)

    ours = train_dataset(tf.distribute.InputContext(), data, global_batch, seed, 0, 10**6, [])
    bare = tf.data.TFRecordDataset(data.shards("train")).repeat()
    bare = bare.map(decoder(data.spec), num_parallel_calls=tf.data.AUTOTUNE)
    bare = bare.batch(global_batch).prefetch(tf.data.AUTOTUNE)
    limit = rate(bare)
    return rate(ours) / limit


def train_peak_rss_mb(project: Path, overrides: list[str], storage: Path) -> float:
    """Peak RSS (MB) of `python -m <module> train` in `project`, in its own process.

    Read from the child's /proc/<pid>/status `VmHWM` (its peak since exec) while it runs: the
    child's `ru_maxrss` would also count this process's memory, copied at fork."""
    env = dict(os.environ, PROJECT_STORAGE_DIR=str(storage), TF_CPP_MIN_LOG_LEVEL="2")
    package_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    args = [sys.executable, "-m", __package__ or "", "train", "--fresh"]
    peak_kb = 0
    with open(project / "train.log", "wb") as log:
        proc = subprocess.Popen(
            args + [p for o in overrides for p in ("--set", o)],
            cwd=project,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        status = Path(f"/proc/{proc.pid}/status")
        while proc.poll() is None:
            try:
                text = status.read_text()
            except OSError:  # not Linux, or it just exited
                break
            hwm = next(
                (line.split()[1] for line in text.splitlines() if line.startswith("VmHWM")), 0
            )
            peak_kb = max(peak_kb, int(hwm))
            time.sleep(0.02)
        proc.wait()
    if proc.returncode != 0:
        tail = (project / "train.log").read_text()[-2000:]
        raise RuntimeError(f"bench: train exited {proc.returncode}:\n{tail}")
    return peak_kb / 1024


def run_image_bench(params: Params, images: int, batch_size: int, steps: int) -> dict[str, float]:
    """The image workload: `pipeline_vs_limit`, and the peak RSS of `train` for N and 4N images
    (the same number of steps each: 4 epochs of N, 1 of 4N). Prints one line per figure."""
    from .prepare import prepare

    seed_everything(params.seed, params.repro.deterministic)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-images-") as tmp:
        root = Path(tmp)
        for n, epochs in ((images, 4), (4 * images, 1)):
            raw = make_images(root / f"images-{n}", n, (IMAGE_SIDE, IMAGE_SIDE), params.seed)
            project = root / f"project-{n}"
            project.mkdir()
            (project / "params.yaml").write_text("{}\n")
            data_cfg = dataclasses.replace(
                params.data, source="images", path=str(root / f"images-{n}"),
                image_size=[IMAGE_SIDE, IMAGE_SIDE], image_channels=3, augment=[],
            )  # fmt: skip
            prepare(dataclasses.replace(params, data=data_cfg), project)
            data = load_prepared(project / "data/processed")
            shards = sum(Path(p).stat().st_size for s in ("train", "validation", "test")
                         for p in data.shards(s))  # fmt: skip
            print(f"images {n}: raw JPEGs {raw / 2**20:.1f} MB, processed {shards / 2**20:.1f} MB "
                  f"(processed_vs_raw={shards / raw:.2f})", flush=True)  # fmt: skip
            overrides = [
                "data.source=images", f"data.path={root / f'images-{n}'}",
                f"data.image_size=[{IMAGE_SIDE},{IMAGE_SIDE}]", "data.image_channels=3",
                f"train.epochs={epochs}",
                f"train.batch_size={batch_size}", "distribute.strategy=default",
                "model.architecture=cnn", "train.steps_per_execution=10",
            ]  # fmt: skip
            steps_run = epochs * (data.count("train") // batch_size)
            out[f"rss_{n}"] = train_peak_rss_mb(project, overrides, root / "storage")
            print(f"train on {n} images ({steps_run} steps): peak RSS {out[f'rss_{n}']:.0f} MB",
                  flush=True)  # fmt: skip
        out["pipeline_vs_limit"] = pipeline_vs_limit(data, batch_size, steps, params.seed)
    n = images
    print(
        f"pipeline_vs_limit={out['pipeline_vs_limit']:.2f} peak_rss_mb_{n}={out[f'rss_{n}']:.0f} "
        f"peak_rss_mb_{4 * n}={out[f'rss_{4 * n}']:.0f}",
        flush=True,
    )
    return out
