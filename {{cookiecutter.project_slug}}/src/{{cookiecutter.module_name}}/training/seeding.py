"""One seed for every random number generator the project touches."""

from __future__ import annotations

import dataclasses
import importlib.util
import os

from ..config import Params


def seed_everything(seed: int, deterministic: bool) -> list[str]:
    """Seed Python, NumPy, TensorFlow/Keras (and torch if installed); return what was seeded.
    `deterministic` also turns on TensorFlow's op determinism (docs/reproducibility.md)."""
    import keras  # here: a notebook's setup imports this module on runtimes without TensorFlow
    import tensorflow as tf

    # Only child processes see this; the current interpreter's hash seed is fixed at start.
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    keras.utils.set_random_seed(seed)  # Python's, NumPy's global RNG, TensorFlow's and Keras'

    seeded = ["python", "numpy", "tensorflow", "keras"]
    if importlib.util.find_spec("torch") is not None:
        try:
            import torch

            torch.manual_seed(seed)  # also seeds every CUDA device, lazily
            seeded.append("torch")
        except Exception as exc:  # a broken torch install must not stop a TensorFlow run
            print(f"WARNING: could not seed torch: {exc}", flush=True)
    if deterministic:
        tf.config.experimental.enable_op_determinism()
    return seeded


def as_run(params: Params) -> tuple[Params, str]:
    """`params` with `repro.deterministic` as this process runs it, and the words that say so.
    TensorFlow can turn op determinism on and never off: once on (by a run here, or by the user's
    own code), it stays on in this process (a notebook's kernel) until the process ends."""
    # here: TensorFlow is loaded by now. Its flag has no public getter (every TensorFlow that
    # Keras 3 runs on has this one).
    from tensorflow.python.framework.config import is_op_determinism_enabled

    if not is_op_determinism_enabled():
        return params, "off"
    if params.repro.deterministic:
        return params, "on"
    repro = dataclasses.replace(params.repro, deterministic=True)
    return dataclasses.replace(params, repro=repro), (
        "on (turned on earlier in this process, by a run or your own code; TensorFlow cannot turn "
        "them off: restart the kernel, without your enable_op_determinism() call, for a run "
        "without)"
    )
