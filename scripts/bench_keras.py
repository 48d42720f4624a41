"""The plain-Keras side of `make bench`: data makers and the baselines, in one server process.

Run with a baked project's interpreter (its TensorFlow and Keras), never importing the baked
package: the models below are written out as the package's `build_model` builds them (the same
layers), so the baselines stay what a Keras user writes, whatever the package looks like inside.

    python bench_keras.py [--replicas R] [--deterministic] [--xla] [--seed S]

reads one JSON request a line on stdin and answers each with one line `RESULT {json}` on stdout
(TensorFlow's own chatter goes to stderr). TensorFlow starts once per server, so the start-up
is paid once, not once per run; the figures never include it anyway (see `epoch_seconds`).
`--replicas 2` splits the CPU into two logical devices under MirroredStrategy, as the project's
`distribute.logical_cpus=2` does; 1 = no strategy, as a Keras user writes it. Requests:

    {"way": "vectors", "file": F, "examples": N}                  the MLP's source, a TFRecord file
    {"way": "images", "folder": D, "count": N, "side": PX}         JPEGs in 10 class folders
    {"way": "seed", "examples": N, "epochs": E, "batch": B}        model.fit on float64 NumPy arrays
    {"way": "limit", "examples": N, "validation": V, "epochs": E, "batch": B}
    {"way": "fit", "folder": D, "model": "cnn"|"backbone", "side": PX, "steps": S, "epochs": E,
     "batch": B}                                                   image_dataset_from_directory+fit
    {"way": "limit-images", "folder": D, "model": ..., "side": PX, "steps": S, "validation": V,
     "epochs": E, "batch": B}                                      fused loop, images in memory

B is per replica. A timed way answers {"examples": trained per epoch, "epoch_seconds": [...]}:
each epoch's wall-clock seconds, validation included; the first one includes tracing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

CLASSES = 10
FEATURES = 784
LEARNING_RATE = 1e-3


# The models: the same layers as the package's build_model for mlp, cnn and backbone (dropout 0).


def mlp(x_train: np.ndarray) -> keras.Model:
    """784-64-64-10: standardised with the training data's statistics, as the project's mlp."""
    inputs = keras.Input(shape=(FEATURES,), name="inputs")
    norm = keras.layers.Normalization(
        mean=x_train.mean(axis=0), variance=x_train.var(axis=0), name="standardise_features"
    )
    x = norm(inputs)
    for units in (64, 64):
        x = keras.layers.Dense(units, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(CLASSES, dtype="float32", name="logits")(x))


def cnn(side: int, filters: tuple[int, ...] = (16, 32, 64, 128)) -> keras.Model:
    """The project's cnn: per block a 3x3 conv (no bias) + batch norm (momentum 0.9) + ReLU + 2x2
    pooling, one per filters entry and more of the last while the map is wider than 4 px; global
    average pooling."""
    inputs = keras.Input(shape=(side, side, 3), name="inputs")
    x = keras.layers.Rescaling(1.0 / 255, name="scale_pixels")(inputs)
    block = 0
    while block < len(filters) or min(x.shape[1], x.shape[2]) > 4:
        x = keras.layers.Conv2D(filters[min(block, len(filters) - 1)], 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization(momentum=0.9)(x)
        x = keras.layers.Activation("relu")(x)
        if min(x.shape[1], x.shape[2]) >= 2:
            x = keras.layers.MaxPooling2D()(x)
        block += 1
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    return keras.Model(inputs, keras.layers.Dense(CLASSES, dtype="float32", name="logits")(x))


def backbone(side: int) -> keras.Model:
    """MobileNetV3Small without its top (random weights), batch norm in inference mode, its own
    preprocessing (0-255 pixels in), global average pooling, a float32 Dense head."""
    inputs = keras.Input(shape=(side, side, 3), name="inputs")
    net = keras.applications.MobileNetV3Small(
        include_top=False, weights=None, input_shape=(side, side, 3), include_preprocessing=True
    )
    x = keras.layers.GlobalAveragePooling2D(name="pool")(net(inputs, training=False))
    return keras.Model(inputs, keras.layers.Dense(CLASSES, dtype="float32", name="logits")(x))


def image_model(name: str, side: int) -> keras.Model:
    return backbone(side) if name == "backbone" else cnn(side)


# The data.


def make_vectors(file: str, examples: int, seed: int) -> dict[str, Any]:
    """`examples` random 784-float vectors and classes as tf.train.Example records
    (`features`: floats, `label`: int64), the project's `data.source: tfrecord` layout."""
    rng = np.random.default_rng(seed)
    x = rng.random((examples, FEATURES), dtype=np.float32)
    y = rng.integers(0, CLASSES, examples)
    Path(file).parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(file) as writer:
        for xi, yi in zip(x, y, strict=True):
            writer.write(example_bytes(xi, int(yi)))
    return {"bytes": Path(file).stat().st_size}


def example_bytes(x: np.ndarray, label: int) -> bytes:
    """`tf.train.Example(features={"features": FloatList(x), "label": Int64List([label])})`
    serialized, written out in protobuf's wire format: 50x faster than building the message
    (60k examples: 1 s instead of a minute). bench_keras's `check` request compares the two."""
    floats = _field(2, _field(1, x.astype("<f4").tobytes()))  # Feature.float_list.value, packed
    ints = _field(3, _field(1, _varint(label)))  # Feature.int64_list.value, packed
    entries = _field(1, _field(1, b"features") + _field(2, floats))  # Features.feature map
    entries += _field(1, _field(1, b"label") + _field(2, ints))
    return _field(1, entries)  # Example.features


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def check_example_bytes() -> dict[str, Any]:
    """example_bytes against tf.train.Example's own parser."""
    x = np.arange(FEATURES, dtype=np.float32) / 7
    parsed = tf.train.Example.FromString(example_bytes(x, 9)).features.feature
    same = np.array_equal(parsed["features"].float_list.value, x)
    return {"same": bool(same and list(parsed["label"].int64_list.value) == [9])}


def make_images(folder: str, count: int, side: int, seed: int) -> dict[str, Any]:
    """`count` JPEGs of side x side in 10 class folders (smooth colour fields plus noise)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 1, side, dtype=np.float32)[None, :, None]
    total = 0
    for i in range(count):
        colour = rng.random(3, dtype=np.float32) * 200
        pixels = colour * ramp + rng.normal(0, 12, (side, side, 3)) + 28
        path = Path(folder) / f"class{i % CLASSES}" / f"{i:06d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path, quality=90)
        total += path.stat().st_size
    return {"bytes": total}


def decoded_images(folder: str, count: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    """The first `count` JPEGs of `folder`, decoded and resized once (float32 0-255), classes."""
    paths = sorted(Path(folder).glob("*/*.jpg"))[:count]
    classes = sorted({p.parent.name for p in paths})
    x = np.stack([
        tf.image.resize(tf.io.decode_jpeg(tf.io.read_file(str(p)), channels=3), (side, side),
                        antialias=True).numpy()
        for p in paths
    ])  # fmt: skip
    y = np.array([classes.index(p.parent.name) for p in paths], np.int32)
    return x, y


# The timed ways.


class EpochClock(keras.callbacks.Callback):
    """Each epoch's wall-clock seconds (validation included: Keras validates before
    `on_epoch_end`)."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: list[float] = []

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.seconds.append(time.perf_counter() - self._start)


def compile_model(model: keras.Model, xla: bool) -> None:
    """As a Keras user compiles: Adam, sparse cross-entropy on logits, accuracy; XLA as asked
    (explicit: Keras's "auto" differs between CPU and GPU)."""
    model.compile(
        optimizer=keras.optimizers.Adam(LEARNING_RATE),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        jit_compile=xla,
    )


class Server:
    def __init__(self, replicas: int, deterministic: bool, xla: bool, seed: int) -> None:
        self.replicas, self.xla, self.seed = replicas, xla, seed
        if replicas >= 2:  # before TensorFlow initialises, as `distribute.logical_cpus` does
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * replicas
            )
            devices = [d.name for d in tf.config.list_logical_devices("CPU")[:replicas]]
            self.strategy = tf.distribute.MirroredStrategy(devices)
        else:
            self.strategy = tf.distribute.get_strategy()
        if deterministic:
            tf.config.experimental.enable_op_determinism()

    def seed_way(self, examples: int, epochs: int, batch: int) -> dict[str, Any]:
        """`model.fit` on float64 NumPy arrays (what `x / 255.0` gives), no progress bar."""
        rng = np.random.default_rng(self.seed)
        x = rng.random((examples, FEATURES))  # float64
        y = rng.integers(0, CLASSES, examples)
        with self.strategy.scope():
            model = mlp(x)
            compile_model(model, self.xla)
        clock = EpochClock()
        model.fit(x, y, batch_size=batch * self.replicas, epochs=epochs, verbose=0,
                  callbacks=[clock])  # fmt: skip
        return {"examples": examples, "epoch_seconds": clock.seconds}

    def fit_way(
        self, folder: str, model: str, side: int, steps: int, epochs: int, batch: int
    ) -> dict[str, Any]:
        """`image_dataset_from_directory(validation_split=0.2, subset="both")` + prefetch +
        `model.fit(train, validation_data=val)`, `steps` training batches an epoch."""
        global_batch = batch * self.replicas
        train, val = keras.utils.image_dataset_from_directory(
            folder, image_size=(side, side), batch_size=global_batch, seed=self.seed,
            validation_split=0.2, subset="both", verbose=False,
        )  # fmt: skip
        validation = len(val.file_paths)
        train = train.take(steps).prefetch(tf.data.AUTOTUNE)  # the trainer's steps per epoch
        val = val.prefetch(tf.data.AUTOTUNE)
        with self.strategy.scope():
            net = image_model(model, side)
            compile_model(net, self.xla)
        clock = EpochClock()
        net.fit(train, validation_data=val, epochs=epochs, verbose=0, callbacks=[clock])
        return {"examples": steps * global_batch, "validation": validation,
                "epoch_seconds": clock.seconds, "parameters": net.count_params()}  # fmt: skip

    def limit_way(
        self, model: keras.Model, x: np.ndarray, y: np.ndarray, validation: int, epochs: int,
        batch: int, fused: bool,
    ) -> dict[str, Any]:  # fmt: skip
        """One hand-written `tf.function` per epoch over data already in memory (the first
        examples; the last `validation` are validated after each epoch). No input pipeline to
        speak of, no checkpoints, no logging.

        fused: the epoch is shuffled and cut into [steps, replicas, batch] up front and each step
        slices its batch (the fastest loop for the MLP). Otherwise (images) each step takes its
        batch from an iterator that gathers it from memory (same per-epoch shuffle): for a conv
        net, slicing a large captured tensor inside the loop measured slower than that."""
        strategy, replicas = self.strategy, self.replicas
        global_batch = batch * replicas
        n_train = len(x) - validation
        steps = n_train // global_batch
        with strategy.scope():
            optimizer = keras.optimizers.Adam(LEARNING_RATE)
            optimizer.build(model.trainable_variables)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
        with tf.device("/cpu:0"):
            xt, yt = tf.constant(x[:n_train]), tf.constant(y[:n_train])
            xv, yv = tf.constant(x[n_train:]), tf.constant(y[n_train:])

        def orders(epoch: Any) -> tf.Tensor:
            key = tf.stack([tf.constant(self.seed, tf.int64), tf.cast(epoch, tf.int64)])
            order = tf.random.experimental.stateless_shuffle(tf.range(n_train), key)
            return tf.reshape(order[: steps * global_batch], [steps, global_batch])

        def gradients(xb: tf.Tensor, yb: tf.Tensor) -> list[tf.Tensor]:
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(
                    loss_fn(yb, model(xb, training=True)), global_batch_size=global_batch
                )
            return tape.gradient(loss, model.trainable_variables)

        if self.xla:
            gradients = tf.function(gradients, jit_compile=True)

        def apply(xb: tf.Tensor, yb: tf.Tensor) -> None:
            grads = gradients(xb, yb)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

        if fused:
            shape = [steps, replicas, batch, *x.shape[1:]]

            def replica_step(xe: tf.Tensor, ye: tf.Tensor, i: tf.Tensor) -> None:
                rid = tf.distribute.get_replica_context().replica_id_in_sync_group
                apply(xe[i, rid], ye[i, rid])

            @tf.function
            def fused_epoch(order: tf.Tensor) -> None:
                xe = tf.reshape(tf.gather(xt, tf.reshape(order, [-1])), shape)
                ye = tf.reshape(tf.gather(yt, tf.reshape(order, [-1])), shape[:3])
                for i in tf.range(steps):
                    strategy.run(replica_step, args=(xe, ye, i))

            def one_epoch(epoch: int) -> None:
                fused_epoch(orders(epoch))
        else:
            ds = tf.data.Dataset.range(epochs).flat_map(
                lambda e: tf.data.Dataset.from_tensor_slices(orders(e))
            )
            ds = ds.map(lambda i: (tf.gather(xt, i), tf.gather(yt, i)))
            iterator = iter(strategy.experimental_distribute_dataset(ds.prefetch(2)))

            @tf.function
            def iterator_epoch(it: Any) -> None:
                for _ in tf.range(steps):
                    strategy.run(apply, args=next(it))

            def one_epoch(epoch: int) -> None:
                iterator_epoch(iterator)

        # Validation as the trainer runs it: batch by batch from a dataset, one call each.
        val_batch = max(global_batch, 1024) if x.ndim == 2 else global_batch
        val = tf.data.Dataset.from_tensor_slices((xv, yv)).batch(val_batch).prefetch(2)

        @tf.function(reduce_retracing=True)
        def val_step(xb: tf.Tensor, yb: tf.Tensor) -> tf.Tensor:
            return tf.reduce_sum(loss_fn(yb, model(xb, training=False)))

        def validate() -> float:
            return sum(float(val_step(xb, yb)) for xb, yb in val)

        seconds = []
        for epoch in range(epochs):
            start = time.perf_counter()
            one_epoch(epoch)
            if validation:
                validate()
            float(optimizer.iterations.numpy())  # wait for the last step
            seconds.append(time.perf_counter() - start)
        return {"examples": steps * global_batch, "epoch_seconds": seconds}

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        way = req["way"]
        if way == "vectors":
            return make_vectors(req["file"], req["examples"], self.seed)
        if way == "check":
            return check_example_bytes()
        if way == "images":
            return make_images(req["folder"], req["count"], req["side"], self.seed)
        keras.backend.clear_session()
        keras.utils.set_random_seed(self.seed)
        if way == "seed":
            return self.seed_way(req["examples"], req["epochs"], req["batch"])
        if way == "fit":
            return self.fit_way(req["folder"], req["model"], req["side"], req["steps"],
                                req["epochs"], req["batch"])  # fmt: skip
        if way == "limit":
            rng = np.random.default_rng(self.seed)
            n = req["examples"] + req["validation"]
            x = rng.random((n, FEATURES), dtype=np.float32)
            y = rng.integers(0, CLASSES, n).astype(np.int32)
            with self.strategy.scope():
                model = mlp(x)
            return self.limit_way(model, x, y, req["validation"], req["epochs"], req["batch"],
                                  fused=True)  # fmt: skip
        if way == "limit-images":
            global_batch = req["batch"] * self.replicas
            count = req["steps"] * global_batch + req["validation"]
            x, y = decoded_images(req["folder"], count, req["side"])
            with self.strategy.scope():
                model = image_model(req["model"], req["side"])
            return self.limit_way(model, x, y, req["validation"], req["epochs"], req["batch"],
                                  fused=False)  # fmt: skip
        raise ValueError(f"unknown way {way!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument("--xla", action="store_true")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    server = Server(args.replicas, args.deterministic, args.xla, args.seed)
    print("READY", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = server.handle(json.loads(line))
        except Exception as exc:  # the driver shows it and stops
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print("RESULT " + json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
