"""Hardware discovery and the choice of a tf.distribute strategy.

`choose_plan` (the rules, testable with faked hardware) is applied by `make_strategy`: call it
first, as device settings and MultiWorkerMirroredStrategy must precede any other TensorFlow op."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass

from ..config import DistributeConfig
from ..core.hardware import tpu_present
from ..core.progress import say

# TensorFlow is imported where used: the command line and notebooks' setup import this module.

TF_CONFIG_EXAMPLE = (
    '{"cluster": {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}, "task": {"type": "worker", '
    '"index": 0}}'
)


class StrategyError(RuntimeError):
    """The hardware cannot do what `distribute.*` asks; the message is one line for the user."""


@dataclass(frozen=True)
class Hardware:
    gpus: int = 0
    tpu: bool = False
    tf_config: dict | None = None


@dataclass(frozen=True)
class DevicePlan:
    """What `make_strategy` builds."""

    kind: str  # "tpu" | "multiworker" | "mirrored" | "default"
    gpus: tuple[int, ...] = ()  # physical GPU indices made visible (all when empty)
    logical_cpus: int = 0  # split the CPU into this many devices (mirrored on CPU)
    notes: tuple[str, ...] = ()  # messages to print


@dataclass(frozen=True)
class StrategyInfo:
    """The strategy that was built, for printing and for the trainer."""

    name: str
    replicas: int
    device: str  # "TPU" | "GPU" | "CPU"
    is_chief: bool
    workers: int = 1


def detect_hardware() -> Hardware:
    """GPUs (listing them does not initialise TensorFlow), a TPU, TF_CONFIG."""
    import tensorflow as tf

    tf_config = None
    if os.environ.get("TF_CONFIG"):
        try:
            tf_config = json.loads(os.environ["TF_CONFIG"])
        except json.JSONDecodeError as exc:
            raise StrategyError(
                f"TF_CONFIG: not valid JSON ({exc}) (example: TF_CONFIG='{TF_CONFIG_EXAMPLE}')"
            ) from None
    return Hardware(
        gpus=len(tf.config.list_physical_devices("GPU")), tpu=tpu_present(), tf_config=tf_config
    )


def choose_plan(hw: Hardware, cfg: DistributeConfig) -> DevicePlan:
    """The rules. `auto`: TPU -> TF_CONFIG (multi-worker) -> GPUs -> logical CPUs -> default."""
    bad = [i for i in cfg.gpus if i >= hw.gpus]
    if bad and hw.gpus:
        raise StrategyError(
            f"distribute.gpus: GPU {bad[0]} does not exist ({hw.gpus} found, numbered from 0; "
            f"example: --set distribute.gpus=[0])"
        )
    gpus = tuple(cfg.gpus) if hw.gpus else ()
    kind = cfg.strategy
    if kind == "tpu" and not hw.tpu:
        raise StrategyError(
            "distribute.strategy: tpu, but no TPU was found on this machine "
            "(example: --set distribute.strategy=auto)"
        )
    if kind == "auto":
        if hw.tpu:
            kind = "tpu"
        elif hw.tf_config:
            kind = "multiworker"
        elif hw.gpus or cfg.logical_cpus >= 2:
            kind = "mirrored"
        else:
            kind = "default"
    split = cfg.logical_cpus >= 2 and not hw.gpus and kind == "mirrored"
    notes: tuple[str, ...] = ()
    if cfg.logical_cpus >= 2 and (hw.gpus or kind in ("tpu", "default")):
        notes = ("distribute.logical_cpus is ignored: it only applies to MirroredStrategy on CPU",)
    if cfg.gpus and not hw.gpus:  # the same params.yaml on a CPU machine; else require_accelerator
        notes += (f"distribute.gpus {list(cfg.gpus)} is ignored: no GPU found",)
    return DevicePlan(kind, gpus, cfg.logical_cpus if split else 0, notes)


def mixed_precision_policy(device: str, enabled: bool) -> tuple[str, str | None]:
    """The Keras dtype policy for `train.mixed_precision` on `device`, and a notice if any."""
    if enabled and device == "CPU":
        return "float32", "train.mixed_precision is ignored on CPU (it would only be slower)"
    policy = {"GPU": "mixed_float16", "TPU": "mixed_bfloat16"}.get(device) if enabled else None
    return policy or "float32", None


def make_strategy(cfg: DistributeConfig, hw: Hardware | None = None) -> tuple[object, StrategyInfo]:
    """Choose a plan for `hw` (None: detect it), configure the devices, build the strategy; say
    its line, its notes and warnings."""
    import tensorflow as tf

    hw = hw or detect_hardware()
    plan = choose_plan(hw, cfg)
    for note in plan.notes:
        say(f"Note: {note}")
    strategy, device = None, "GPU" if hw.gpus else "CPU"
    if plan.kind == "tpu":
        try:
            strategy, device = _tpu_strategy(tf), "TPU"
        except StrategyError as exc:
            if cfg.strategy == "tpu":
                raise
            say(f"WARNING: {exc}; continuing without it.")
            plan = choose_plan(Hardware(hw.gpus, False, hw.tf_config), cfg)
    if strategy is None:
        _configure_devices(tf, plan, cfg.memory_growth)
        if plan.kind == "multiworker":
            try:  # TensorFlow reads TF_CONFIG's cluster and task only here
                strategy = tf.distribute.MultiWorkerMirroredStrategy()
            except ValueError as exc:
                example = f"(example: TF_CONFIG='{TF_CONFIG_EXAMPLE}')"
                raise StrategyError(f"TF_CONFIG: {exc} {example}") from None
        elif plan.kind == "mirrored":
            found = tf.config.list_logical_devices(device)
            strategy = _mirrored(
                tf, tuple(d.name for d in found[: None if hw.gpus else max(plan.logical_cpus, 1)])
            )
        else:
            strategy = tf.distribute.get_strategy()
    name, replicas = type(strategy).__name__, strategy.num_replicas_in_sync
    info = StrategyInfo(_NAMES.get(name, name), replicas, device, *cluster_role(strategy))
    where = f"{info.workers} workers, " if info.workers > 1 else ""
    say(
        f"Found {hw.gpus} GPU(s), {'a' if hw.tpu else 'no'} TPU, TF_CONFIG "
        f"{'set' if hw.tf_config else 'not set'} -> {info.name} on {device}: {where}"
        f"{info.replicas} replica{'s' if info.replicas != 1 else ''} "
        f"(distribute.strategy={cfg.strategy})"
    )
    return strategy, info


_NAMES = {
    "CollectiveAllReduceStrategy": "MultiWorkerMirroredStrategy",
    "_DefaultDistributionStrategy": "the default strategy",
}


@functools.cache
def _mirrored(tf, devices: tuple[str, ...]) -> object:
    """One MirroredStrategy per device set and process: a second (a second `train` in a kernel)
    would renumber its all-reduces ("Shape mismatch in the collective instance")."""
    return tf.distribute.MirroredStrategy(list(devices))


# The public name is an alias of the class CollectiveAllReduceStrategy.
_MULTIWORKER_CLASSES = ("MultiWorkerMirroredStrategy", "CollectiveAllReduceStrategy")


def cluster_role(strategy: object) -> tuple[bool, int]:
    """(whether this worker is the chief: `chief`, else worker 0; how many workers train)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if type(strategy).__name__ not in _MULTIWORKER_CLASSES or resolver is None:
        return True, 1
    spec = resolver.cluster_spec().as_dict()
    workers = sum(len(spec.get(job, [])) for job in ("chief", "worker")) or 1
    if resolver.task_type in (None, "", "chief"):
        return True, workers
    first = resolver.task_type == "worker" and resolver.task_id == 0
    return first and "chief" not in spec, workers


def _configure_devices(tf, plan: DevicePlan, memory_growth: bool) -> None:
    """Visible GPUs, memory growth and logical CPUs: possible only before TensorFlow starts."""
    try:
        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            chosen = [gpus[i] for i in plan.gpus] if plan.gpus else gpus
            tf.config.set_visible_devices(chosen, "GPU")
            for gpu in chosen:
                # On demand, not all at start: a notebook kernel and this run share the GPU.
                tf.config.experimental.set_memory_growth(gpu, memory_growth)
        if plan.logical_cpus >= 2:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * plan.logical_cpus
            )
    except RuntimeError:
        # TensorFlow already started (e.g. a second run in one notebook kernel): keep its setup.
        have = len(tf.config.list_logical_devices("CPU"))
        if plan.logical_cpus > have:
            say(
                f"WARNING: TensorFlow was already initialised with {have} CPU device(s); "
                f"restart the runtime to split the CPU into {plan.logical_cpus}."
            )


def _tpu_strategy(tf):
    """TPUStrategy on the TPU of this VM, or StrategyError saying why not."""
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="local")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    except Exception as exc:  # TF raises several kinds here (NotFound, InvalidArgument, ...)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        fix = (  # Colab's TPU runtimes have no TensorFlow, and no tensorflow-tpu works there
            "Colab's TPU runtimes have no TensorFlow; pick a GPU runtime (Runtime > Change "
            "runtime type > T4 GPU)"
            if "COLAB_RELEASE_TAG" in os.environ
            else f"on a Cloud TPU VM, install `tensorflow-tpu=={tf.__version__}` in place of "
            "`tensorflow` (docs/scaling.md, TPU)"
        )
        raise StrategyError(
            f"A TPU was found but this TensorFlow cannot use it: {fix}. TensorFlow said: {first}"
        ) from None
