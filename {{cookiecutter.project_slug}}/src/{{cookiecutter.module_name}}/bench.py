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
The image workload (`run_fit_bench`): `--fit-images` JPEGs of 160x160 in 10 class folders, trained
at 64x64 with the same small CNN (`model.architecture: cnn`) and global batch for all three:

  (a) trainer this project's `fit` on the TFRecord shards `prepare` wrote (prepare's one-time
              cost is printed on its own line), checkpoints and logging on;
  (b) keras   `keras.utils.image_dataset_from_directory(folder, image_size=(64, 64),
              validation_split=0.2, subset="both")` + `.prefetch(tf.data.AUTOTUNE)` +
              `model.fit(train, validation_data=val)`, as a Keras user writes it, for the same
              steps per epoch and number of validation images as (a);
  (c) limit   the fused loop above, on the decoded training images already in memory.

(a) and (b) alternate three times; `ratio_vs_fit` is the median of the three (a)/(b) ratios.

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
from .strategy import StrategyInfo, make_strategy
from .trainer import fit

IMAGE_SIDE = 96  # the image workload: 96x96 RGB JPEGs, as in issue 10's measurements
PHOTO_SIDE = 160  # the fit comparison: 160x160 JPEGs ...
TRAIN_SIDE = 64  # ... trained at 64x64 (prepare resizes once; Keras resizes every epoch)

# A method under test: returns the examples of one epoch and the time each epoch ended.
Run = Callable[[], tuple[int, list[float]]]


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


def bench_strategy(params: Params) -> tuple[Any, StrategyInfo]:
    """MirroredStrategy for every method, as in the seed document; distribute.logical_cpus and
    distribute.gpus still choose its devices. Made once: TensorFlow fixes its devices then."""
    return make_strategy(dataclasses.replace(params.distribute, strategy="mirrored"))


def run_bench(
    params: Params, strategy: Any, info: StrategyInfo, examples: int, epochs: int, batch_size: int
) -> dict[str, float]:
    """Run (a), (b), (c); print a table and `ratio_vs_seed=B/A ratio_vs_limit=B/C`."""
    seed_everything(params.seed, params.repro.deterministic)
    rng = np.random.default_rng(params.seed)
    x_all = rng.random((examples, 784), dtype=np.float32)
    y_all = rng.integers(0, 10, examples).astype(np.int32)
    model_cfg = ModelConfig(hidden_units=[64, 64], dropout=0.0)
    params = _with_training(params, model_cfg, epochs, batch_size)
    tmp = tempfile.TemporaryDirectory(prefix="bench-data-")
    data, idx = _vector_shards(x_all, y_all, Path(tmp.name), params)
    x_train, y_train = x_all[idx], y_all[idx]
    print(
        f"bench: {len(x_train)} examples x {epochs} epochs, batch {batch_size} per replica x "
        f"{info.replicas} replicas, 784-64-64-10 MLP, {info.name} on {info.device}; "
        f"trainer: steps_per_execution={params.train.steps_per_execution}, "
        f"checkpoint_every_steps={params.train.checkpoint_every_steps}",
        flush=True,
    )
    seed = _seed_way(params, strategy, data, x_train, y_train)
    limit = _limit_way(params, strategy, info, data, x_train, y_train)
    rows = [
        ("a", "model.fit on NumPy arrays (seed)", seed),
        ("b", "this trainer, checkpoints + logging", _trainer_way(params, strategy, info, data)),
        ("c", "one tf.function per epoch (limit)", limit),
    ]
    speeds = _print_table(rows, info.device)
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


def _with_training(params: Params, model_cfg: ModelConfig, epochs: int, batch_size: int) -> Params:
    """`params` with the bench's model, epochs and batch size, in float32."""
    return dataclasses.replace(
        params,
        model=model_cfg,
        train=dataclasses.replace(
            params.train, epochs=epochs, batch_size=batch_size, mixed_precision=False
        ),
    )


def _print_table(rows: list[tuple[str, str, Run]], device: str) -> dict[str, float]:
    """Measure each method in turn, print one row each; return its examples/s by key."""
    import tensorflow as tf

    speeds: dict[str, float] = {}
    print(
        f"{'':3}{'method':38}{'examples/s':>11}{'(whole call)':>13}{'seconds':>9}"
        f"{'peak RSS +MB':>14}"
    )
    for key, label, run in rows:
        steady, whole, seconds, mem = _measure(run, tf, device)
        speeds[key] = steady
        print(f"{key:3}{label:38}{steady:11,.0f}{whole:13,.0f}{seconds:9.2f}{mem:>14}", flush=True)
    return speeds


def _seed_way(
    params: Params, strategy: Any, data: Prepared, x_train: np.ndarray, y_train: np.ndarray
) -> Run:
    """`model.fit` on float64 NumPy arrays, as the seed document writes it."""
    global_batch = params.train.batch_size * strategy.num_replicas_in_sync
    # The seed document scales pixels with `x / 255.0`, which gives float64 arrays.
    x_seed = x_train.astype("float64")

    def run() -> tuple[int, list[float]]:
        with strategy.scope():
            model = build_model(data.spec, 10, params.model)
            _compile(model, params.train.learning_rate)
        ends: list[float] = []
        # verbose=0: the seed's default progress bar would only add printing time to (a).
        model.fit(
            x_seed,
            y_train,
            batch_size=global_batch,
            epochs=params.train.epochs,
            verbose=0,
            callbacks=[_epoch_stamps(ends)],
        )
        return len(x_train), ends  # fit also trains the last, partial batch

    return run


def _compile(model: Any, lr: float) -> None:
    """Compile as a Keras user would: Adam, sparse cross-entropy on logits, accuracy."""
    import keras

    model.compile(
        optimizer=keras.optimizers.Adam(lr),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )


def _epoch_stamps(ends: list[float]) -> Any:
    """A Keras callback appending the wall-clock time at each epoch's end to `ends`."""
    import keras

    return keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: ends.append(time.perf_counter())
    )


def _trainer_way(params: Params, strategy: Any, info: StrategyInfo, data: Prepared) -> Run:
    """This project's `fit` on `data` (shards as `prepare` writes them), checkpoints + logging."""
    global_batch = params.train.batch_size * info.replicas
    steps = data.count("train") // global_batch

    def run() -> tuple[int, list[float]]:
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

    return run


def _limit_way(
    params: Params,
    strategy: Any,
    info: StrategyInfo,
    data: Prepared,
    x_train: np.ndarray,
    y_train: np.ndarray,
) -> Run:
    """One hand-written `tf.function` per epoch over data already in memory (decoded)."""
    import keras
    import tensorflow as tf

    batch_size, epochs = params.train.batch_size, params.train.epochs
    global_batch = batch_size * info.replicas
    steps = len(x_train) // global_batch
    shape = [steps, info.replicas, batch_size, *x_train.shape[1:]]

    def run() -> tuple[int, list[float]]:
        with strategy.scope():
            model = build_model(data.spec, 10, params.model)
            optimizer = keras.optimizers.Adam(params.train.learning_rate)
            optimizer.build(model.trainable_variables)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
        with tf.device("/cpu:0"):
            x, y = tf.constant(x_train), tf.constant(y_train)

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
            xe = tf.reshape(tf.gather(x, order), shape)
            ye = tf.reshape(tf.gather(y, order), shape[:3])
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

    return run


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
    seed_everything(params.seed, params.repro.deterministic)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-images-") as tmp:
        root = Path(tmp)
        for n, epochs in ((images, 4), (4 * images, 1)):
            raw = make_images(root / f"images-{n}", n, (IMAGE_SIDE, IMAGE_SIDE), params.seed)
            project = root / f"project-{n}"
            data = _prepared_images(params, root / f"images-{n}", project, IMAGE_SIDE)
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
    return out


def _prepared_images(params: Params, raw: Path, project: Path, side: int) -> Prepared:
    """Run `prepare` on the JPEG folder `raw` in `project` at side x side, RGB, no augmentation."""
    from .prepare import prepare

    project.mkdir(parents=True, exist_ok=True)
    (project / "params.yaml").write_text("{}\n")
    data_cfg = dataclasses.replace(
        params.data, source="images", path=str(raw), image_size=[side, side],
        image_channels=3, augment=[],
    )  # fmt: skip
    prepare(dataclasses.replace(params, data=data_cfg), project)
    return load_prepared(project / "data/processed")


def run_fit_bench(
    params: Params, strategy: Any, info: StrategyInfo, images: int, epochs: int, batch_size: int
) -> dict[str, float]:
    """The image workload against `model.fit`: `images` JPEGs of PHOTO_SIDE trained at
    TRAIN_SIDE, (a) this trainer on what `prepare` wrote, (b) `image_dataset_from_directory` +
    `model.fit`, (c) the fused limit; (a) and (b) alternate three times."""
    seed_everything(params.seed, params.repro.deterministic)
    params = _with_training(
        params, ModelConfig(architecture="cnn", dropout=0.0), epochs, batch_size
    )
    global_batch = batch_size * info.replicas
    with tempfile.TemporaryDirectory(prefix="bench-fit-") as tmp:
        raw = Path(tmp) / "photos"
        make_images(raw, images, (PHOTO_SIDE, PHOTO_SIDE), params.seed)
        started = time.perf_counter()
        data = _prepared_images(params, raw, Path(tmp) / "project", TRAIN_SIDE)
        seconds = time.perf_counter() - started
        print(f"prepare (one-time): {images} JPEGs {PHOTO_SIDE}x{PHOTO_SIDE} -> TFRecord shards "
              f"at {TRAIN_SIDE}x{TRAIN_SIDE} in {seconds:.1f} s", flush=True)  # fmt: skip
        steps = data.count("train") // global_batch
        x_train, y_train = _decoded(data)
        parameters = build_model(data.spec, 10, params.model).count_params()
        print(f"fit bench: {data.count('train')} training images, {steps} steps x {epochs} epochs, "
              f"global batch {global_batch}, CNN {params.model.filters} ({parameters:,} "
              f"parameters)", flush=True)  # fmt: skip
        ours = _trainer_way(params, strategy, info, data)
        keras_way = _keras_fit_way(params, strategy, raw, steps, data.count("validation"))
        rows = [(f"{key}{i}", label, way) for i in (1, 2, 3) for key, label, way in (
            ("a", "this trainer on prepare's shards", ours),
            ("b", "image_dataset_from_directory+fit", keras_way),
        )]  # fmt: skip
        rows.append(("c", "one tf.function per epoch (limit)",
                     _limit_way(params, strategy, info, data, x_train, y_train)))  # fmt: skip
        speeds = _print_table(rows, info.device)
    ratio = statistics.median(speeds[f"a{i}"] / speeds[f"b{i}"] for i in (1, 2, 3))
    a = statistics.median(speeds[f"a{i}"] for i in (1, 2, 3))
    b = statistics.median(speeds[f"b{i}"] for i in (1, 2, 3))
    print(f"fit bench examples/s (median epoch after the first; median of 3 runs): trainer "
          f"{a:,.0f}, keras fit {b:,.0f}, limit {speeds['c']:,.0f}", flush=True)  # fmt: skip
    return {"ratio_vs_fit": ratio, "fit_images": images, "fit_batch": global_batch,
            "fit_params": parameters}  # fmt: skip


def _decoded(data: Prepared) -> tuple[np.ndarray, np.ndarray]:
    """The training split decoded into memory (float32 pixels, int32 classes), for the limit."""
    import tensorflow as tf

    from .pipeline import decoder

    ds = tf.data.TFRecordDataset(data.shards("train")).map(decoder(data.spec))
    pairs = list(ds.batch(256).as_numpy_iterator())
    return np.concatenate([x for x, _ in pairs]), np.concatenate([y for _, y in pairs])


def _keras_fit_way(params: Params, strategy: Any, folder: Path, steps: int, validation: int) -> Run:
    """What a Keras user writes for a folder of JPEGs: `image_dataset_from_directory`
    (decode + resize every epoch) for a training and a validation subset, `.prefetch`, and
    `model.fit(..., validation_data=...)`: the same CNN, global batch, steps per epoch and number
    of validation images as the trainer (which validates every epoch too)."""
    import keras
    import tensorflow as tf

    from .dataspec import DataSpec

    global_batch = params.train.batch_size * strategy.num_replicas_in_sync
    spec = DataSpec(kind="image", input_shape=(TRAIN_SIDE, TRAIN_SIDE, 3))

    def run() -> tuple[int, list[float]]:
        train, val = keras.utils.image_dataset_from_directory(
            folder, image_size=(TRAIN_SIDE, TRAIN_SIDE), batch_size=global_batch,
            seed=params.seed, validation_split=0.2, subset="both", verbose=False,
        )  # fmt: skip
        train = train.take(steps).prefetch(tf.data.AUTOTUNE)  # the trainer's number of steps
        count = min(validation, len(val.file_paths))
        val = val.unbatch().take(count).batch(global_batch).prefetch(tf.data.AUTOTUNE)
        # Known length: Keras warns "ran out of data" on a dataset of unknown length.
        val = val.apply(tf.data.experimental.assert_cardinality(-(-count // global_batch)))
        with strategy.scope():
            model = build_model(spec, 10, params.model)
            _compile(model, params.train.learning_rate)
        ends: list[float] = []
        model.fit(train, validation_data=val, epochs=params.train.epochs, verbose=0,
                  callbacks=[_epoch_stamps(ends)])  # fmt: skip
        return steps * global_batch, ends

    return run


def bench_all(
    params: Params, *, examples: int, epochs: int, batch_size: int, images: int,
    image_steps: int, image_batch_size: int, fit_images: int, fit_epochs: int,
) -> None:  # fmt: skip
    """Every part of `bench`; the image figures end on one line (0 images = part skipped)."""
    strategy, info = bench_strategy(params)
    run_bench(params, strategy, info, examples=examples, epochs=epochs, batch_size=batch_size)
    figures: list[str] = []
    if images:
        out = run_image_bench(params, images, image_batch_size, image_steps)
        figures += [f"pipeline_vs_limit={out['pipeline_vs_limit']:.2f}",
                    f"peak_rss_mb_{images}={out[f'rss_{images}']:.0f}",
                    f"peak_rss_mb_{4 * images}={out[f'rss_{4 * images}']:.0f}"]  # fmt: skip
    if fit_images:
        fit_out = run_fit_bench(params, strategy, info, fit_images, fit_epochs, image_batch_size)
        figures += [f"ratio_vs_fit={fit_out['ratio_vs_fit']:.2f}",
                    f"images={fit_images}", f"raw={PHOTO_SIDE}x{PHOTO_SIDE}",
                    f"trained={TRAIN_SIDE}x{TRAIN_SIDE}", f"global_batch={fit_out['fit_batch']}",
                    f"parameters={fit_out['fit_params']}"]  # fmt: skip
    if figures:
        print(" ".join(figures), flush=True)
