"""`speed`: is training waiting for its input or for its compute? (docs/training.md)

Times the input path, training steps on a batch already on the devices, and both, as `train`
runs them (its own model and data); the slower of the first two is the bottleneck."""

from __future__ import annotations

import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import tensorflow as tf

from .. import registry
from ..config import COMMAND, Params
from ..core.progress import say
from ..core.storage import results_root
from ..data.feed import make_feed, on_replicas
from ..data.pipeline import Prepared, eval_dataset, for_model
from ..loop import make_chunk_function
from .checkpoints import first_line, is_storage_fault
from .run_record import build_record, list_runs, new_run_id, write_run_record
from .seeding import as_run, seed_everything
from .strategy import StrategyInfo, make_strategy
from .trainer import build_parts, check_data, make_plan, open_data


def speed(params: Params, project_dir: Path, steps: int, command: str = "") -> dict[str, Any]:
    """Measure, print one line each and the verdict, record; return the figures."""
    registry.check(params)
    prepared = check_data(params, project_dir)
    strategy, info = make_strategy(params.distribute)
    seed_everything(params.seed, params.repro.deterministic)
    params, _ = as_run(params)  # its record says whether ops were deterministic, as they were
    started = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="digits-") as tmp:
        # Text: token ids in the input path, as `train` has them.
        data = for_model(open_data(params, project_dir, prepared, Path(tmp)), params.model)
        rates = measure(params, strategy, info, data, steps)
    bottleneck = "input" if rates["input"] < rates["compute"] else "compute"
    figures = {f"{k}_examples_per_sec": round(v, 1) for k, v in rates.items()}
    result = {"bottleneck": bottleneck, **figures}
    if info.is_chief:
        try:
            record(params, project_dir, info, result, started, command)
        except Exception as exc:  # a full or dropped disk: the figures are on screen all the same
            if not is_storage_fault(exc):
                raise
            say(
                f"WARNING: speed record not written ({first_line(exc)}); free some space and "
                "run speed again to record these figures",
            )
    say(f"try: {'; '.join(advice(params, info, data, bottleneck, rates))}")
    print(f"bottleneck={bottleneck} " + " ".join(f"{k}={v:.1f}" for k, v in figures.items()))
    return result


def measure(
    params: Params, strategy: Any, info: StrategyInfo, data: Prepared, steps: int
) -> dict[str, float]:
    """Examples/s of the three ways, printed as they come."""
    cfg = params.train
    plan = make_plan(params, info, data)
    parts = build_parts(params, strategy, info, data, plan)
    shape = "x".join(map(str, data.spec.input_shape))
    phase = " (backbone frozen: the first fine-tune phase)" if plan.phase_step else ""
    say(
        f"speed: {steps} steps per measurement, {data.spec.kind}s {shape}, "
        f"{params.model.architecture}{phase}, steps_per_execution {cfg.steps_per_execution}",
    )

    def feed() -> Any:  # a new one each time: the input path from its start, as `train` has it
        return make_feed(
            strategy, data, plan.global_batch, params.seed, 0, 10**6, params.data.augment
        )

    def drain(x: Any, y: Any) -> None:  # the batch read into the step's sums, nothing trained
        parts.sums.assign_add(tf.stack([tf.reduce_sum(tf.cast(t, tf.float32)) for t in (x, y)]))

    def input_alone() -> tuple[Any, Any]:
        real = feed()

        @tf.function
        def run(feed_args: Any, n: tf.Tensor) -> tf.Tensor:
            for i in tf.range(n):
                strategy.run(drain, args=real.next_batch(feed_args, i))
            return parts.sums.read_value()

        return run, real.args

    def compute_alone() -> tuple[Any, Any]:  # one training batch on every replica, again and again
        size = plan.global_batch // info.replicas
        x, y = next(iter(eval_dataset(data, "train", size).unbatch().repeat().batch(size)))
        batch = on_replicas(strategy, x), on_replicas(strategy, y)
        return make_chunk_function(parts, cfg, lambda fed, i: fed), lambda step: batch

    def together() -> tuple[Any, Any]:
        real = feed()  # a new input path: nothing of the first one's is left in it
        return make_chunk_function(parts, cfg, real.next_batch), real.args

    ways = {
        "input": (input_alone, "the input pipeline alone"),
        "compute": (compute_alone, "training steps on batches on the device"),
        "together": (together, "training on the input pipeline"),
    }
    rates = {}
    for name, (way, label) in ways.items():
        fn, args = way()
        rates[name] = plan.global_batch * _rate(
            fn, args, steps, cfg.steps_per_execution, plan.per_epoch
        )
        say(f"{name:9} {label:42} {rates[name]:>12,.0f} examples/s")
    return rates


def _rate(fn: Any, args: Any, steps: int, per_call: int, per_epoch: int) -> float:
    """Steps/s of `fn(args(step), n)` after a warm-up chunk, in `train`'s chunks."""
    step = 0

    def run(count: int) -> None:
        nonlocal step
        while count > 0:
            n = min(per_call, per_epoch - step % per_epoch, count)
            fn(args(step), tf.constant(n, tf.int64)).numpy()  # waits for the chunk
            step, count = step + n, count - n

    run(min(per_call, steps))
    started = time.perf_counter()
    run(steps)
    return steps / (time.perf_counter() - started)


def advice(
    params: Params, info: StrategyInfo, data: Prepared, bottleneck: str, rates: dict
) -> list[str]:
    """What to try, most likely first."""
    cfg, tips = params.train, []
    if bottleneck == "input":
        if str(data.folder.resolve()).startswith("/content/drive"):
            tips.append(
                f"the data is read through Drive ({data.folder}): keep the project on "
                f"the VM's disk, or copy it there with `{COMMAND} stage`"
            )
        if data.spec.kind == "image":
            height, width = data.spec.input_shape[:2]
            if height * width > 64 * 64:  # below, an example's fixed cost outweighs its pixels
                tips.append(
                    f"smaller images (data.image_size; they are {height}x{width}): decoding "
                    "grows with the pixels"
                )
            if params.data.augment:
                tips.append(f"fewer data.augment ops (now {params.data.augment})")
        tips.append("a runtime with more CPU cores (the input pipeline runs on the CPU)")
    else:
        if info.device == "GPU" and not cfg.mixed_precision:
            tips.append("train.mixed_precision: true (float16 on the GPU)")
        if info.device == "CPU":
            tips.append("a GPU runtime (Colab: Runtime > Change runtime type > T4 GPU)")
        if not cfg.xla:
            tips.append("train.xla: true")
        tips.append(
            "a smaller model or data.image_size" if data.spec.kind == "image" else "a smaller model"
        )
    if rates["together"] < 0.8 * rates[bottleneck] and cfg.steps_per_execution < 50:
        tips.insert(
            0,
            f"a larger train.steps_per_execution (now {cfg.steps_per_execution}): "
            "together is well below the slower part",
        )
    return tips[:3]


def record(
    params: Params, project_dir: Path, info: StrategyInfo, figures: dict, started: Any, command: str
) -> None:
    """A run record of kind "speed" and TensorBoard scalars `speed/*`, one step per record."""
    mine = [r for r in list_runs(project_dir) if r.get("run_name") == params.run_name]
    step = sum(r.get("kind") == "speed" for r in mine)  # its earlier speed records
    logdir = results_root(project_dir) / "tensorboard" / params.run_name / "speed"
    writer = tf.summary.create_file_writer(str(logdir))
    with writer.as_default():
        for key in [k for k in figures if k.endswith("_examples_per_sec")]:
            tf.summary.scalar(f"speed/{key}", figures[key], step=step)
    writer.close()
    metrics = {
        **figures,
        "examples_per_sec": figures["together_examples_per_sec"],
        "global_batch": params.train.batch_size * info.replicas,
        "replicas": info.replicas,
        "strategy": info.name,
        "device": info.device,
    }
    rec = build_record(
        project_dir,
        run_id=new_run_id(f"{params.run_name}-speed", started),
        params=params.to_dict(),
        status="completed",
        metrics=metrics,
        artifacts=[],
        checkpoints=Path("-"),
        started_at=started,
        finished_at=datetime.now(UTC),
        command=command,
        tracking={"tensorboard": str(logdir)},
        kind="speed",
    )
    say(f"Speed record: {write_run_record(project_dir, rec)}; TensorBoard: {logdir}")
