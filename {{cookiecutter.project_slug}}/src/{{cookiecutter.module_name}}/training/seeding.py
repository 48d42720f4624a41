"""One seed for every random number generator the project touches."""

from __future__ import annotations

import importlib.util
import os


def seed_everything(seed: int, deterministic: bool) -> list[str]:
    """Seed Python, NumPy, TensorFlow/Keras (and torch if installed); return what was seeded.
    `deterministic` also turns on TensorFlow's op determinism: bit-identical results for the same
    seed on the same hardware and software, at some speed cost (docs/reproducibility.md)."""
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
