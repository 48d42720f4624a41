"""model.py and architectures/: every architecture from params, raw inputs, float32 logits, its own
arguments (model.args), fine-tuning helpers."""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import PARAMS
from examples import new_project

from {{ cookiecutter.module_name }}.__main__ import main
from {{ cookiecutter.module_name }}.config import (
    ConfigError,
    ModelConfig,
    load_params,
)
from {{ cookiecutter.module_name }}.model import (
    build_model,
    find_backbone,
    fine_tune_variables,
    set_backbone_trainable,
)
from {{ cookiecutter.module_name }}.optim import clip_gradients
from {{ cookiecutter.module_name }}.registry import check, lookup, register
from {{ cookiecutter.module_name }}.spec import DataSpec
from {{ cookiecutter.module_name }}.training import fingerprint

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

IMAGES = DataSpec(
    kind="image", input_shape=(32, 32, 3), task="classification", names=["a", "b", "c"]
)
VECTORS = DataSpec(
    kind="vector",
    input_shape=(3,),
    task="regression",
    feature_mean=[100.0, 0.0, -5.0],
    feature_var=[400.0, 1.0, 4.0],
)
DIGITS = DataSpec(kind="image", input_shape=(8, 8, 1), task="classification")
GRAY = DataSpec(kind="image", input_shape=(32, 32, 1), task="classification")


def cfg(**changes: object) -> ModelConfig:
    base = load_params(PARAMS).model
    return dataclasses.replace(
        base, **{"hidden_units": [8], "filters": [4, 8], "weights": None, **changes}
    )


@register("architecture", "test_widths")
def widths(inputs, spec, cfg, width: int = 8, activation: str = "relu"):  # noqa: ANN001, ANN201
    """An architecture of a user's, with its own arguments after the fixed ones."""
    return keras.layers.Dense(width, activation=activation, name="own")(
        keras.layers.Flatten()(inputs)
    )


def test_an_architecture_takes_its_own_arguments_from_model_args() -> None:
    model = build_model(IMAGES, 3, cfg(architecture="test_widths", args={"width": 24}))
    assert model.get_layer("own").units == 24
    assert build_model(IMAGES, 3, cfg(architecture="test_widths")).get_layer("own").units == 8
    params = load_params(PARAMS, ["model.architecture=test_widths", "model.args.width=24"])
    check(params)  # what every command runs before it writes anything
    assert params.model.args == {"width": 24}
    assert fingerprint.settings(params)["model.args.width"] == 24  # a resume checks it


def test_a_name_registered_twice_is_an_error_naming_both() -> None:
    # A user's copy of a built-in that kept its name: which one trains would depend on the order
    # of the imports (the built-in's, after model.py).
    def cnn(inputs, spec, cfg):  # noqa: ANN001, ANN202
        return inputs

    builtin = lookup("architecture", "cnn")
    # A ConfigError: a command says it in one `error:` line, as any mistake in the settings.
    with pytest.raises(ConfigError, match=r"^register: architecture 'cnn' is registered twice: "):
        register("architecture", "cnn")(cnn)
    assert lookup("architecture", "cnn") is builtin
    # The same function again (its module reloaded, a notebook cell run twice) replaces it.
    assert register("architecture", "test_widths")(widths) is widths


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.args.height=3"], "model.args.height: architecture 'test_widths' has no argument "
         "'height' (its arguments: width, activation) (example: --set model.args.width=8)"),
        (["model.args.width=wide"], "model.args.width: expected int, got 'wide' (example: --set "
         "model.args.width=8)"),
        (["model.args.width=true"], "model.args.width: expected int, got True"),
        (["sweep.space={model.args.width: {choices: [8, wide]}}"],
         "sweep.space.model.args.width: expected int, got 'wide'"),
    ],
)  # fmt: skip
def test_unknown_or_ill_typed_arguments_are_one_line_errors(overrides, message) -> None:
    params = load_params(PARAMS, ["model.architecture=test_widths", *overrides])
    with pytest.raises(ConfigError) as info:
        check(params, space=True)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


@register("architecture", "test_units")
def units(inputs, spec, cfg, units: list[int] = [8, 4], sep: str = ";"):  # noqa: ANN001, ANN201, B006
    return keras.layers.Dense(units[-1], name="own")(keras.layers.Flatten()(inputs))


@pytest.mark.parametrize(
    "overrides",
    [
        ["model.args.height=3"],
        ["model.args.units=wide"],
        ["sweep.space={model.args.units: {low: 8, high: 64}}"],
        ["sweep.space={model.args.height: {choices: [8]}}"],
        ["model.architecture=mlp", "model.args.units=[8]"],  # another model's, left in params
        ["model.args.sep=[1]"],  # its example's `;` would end a shell's command
    ],
)
def test_the_example_of_an_argument_error_is_a_valid_setting(overrides) -> None:
    """Pasted into a shell as shown: one `--set` word, and the command takes it."""
    chosen = "model.architecture=test_units"
    with pytest.raises(ConfigError) as info:
        check(load_params(PARAMS, [chosen, *overrides]), space=True)
    shown = str(info.value).rsplit("(example: ", 1)[1].removesuffix(")")
    words = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {shown}"], capture_output=True, text=True
    )
    example = words.stdout.split("\0")[:-1]  # as bash reads the line
    assert example == shlex.split(shown) and example[0] == "--set" and len(example) == 2, shown
    check(load_params(PARAMS, [chosen, example[1]]), space=True)


def test_only_a_sweep_checks_the_arguments_its_space_searches() -> None:
    """A space that searches one model's argument does not stop `train` of another model."""
    space = "sweep.space={model.args.width: {low: 8, high: 64}}"
    params = load_params(PARAMS, ["model.architecture=mlp", space])
    check(params)
    with pytest.raises(ConfigError, match=r"^sweep.space.model.args.width: architecture 'mlp' "):
        check(params, space=True)


def test_a_sweep_searches_an_architecture_argument() -> None:
    import optuna

    from {{ cookiecutter.module_name }}.config import sweep_space

    space = "sweep.space={model.args.width: {low: 8, high: 64, log: true}}"
    params = load_params(PARAMS, ["model.architecture=test_widths", space])
    check(params, space=True)
    dist = sweep_space(params)["model.args.width"]
    assert dist == optuna.distributions.IntDistribution(8, 64, log=True)


@pytest.mark.parametrize(
    ("spec", "model_cfg"),
    [
        (VECTORS, cfg(architecture="mlp")),
        (DIGITS, cfg(architecture="mlp")),  # images flattened
        (IMAGES, cfg(architecture="cnn")),
        (IMAGES, cfg(architecture="backbone", backbone="MobileNetV3Small")),
        (IMAGES, cfg(architecture="backbone", backbone="ResNet50")),  # preprocess_input layer
        (GRAY, cfg(architecture="backbone", backbone="DenseNet121")),  # gray as RGB
    ],
    ids=["mlp-vectors", "mlp-images", "cnn", "mobilenet", "resnet", "densenet-gray"],
)
def test_each_architecture_gives_float32_logits_from_raw_inputs(spec, model_cfg) -> None:
    model = build_model(spec, 3, model_cfg)
    raw = np.random.default_rng(0).uniform(0, 255, size=(2, *spec.input_shape))
    logits = model(raw.astype("float32"), training=False)
    assert logits.shape == (2, 3) and logits.dtype == "float32"
    assert np.isfinite(np.asarray(logits)).all()


def test_vectors_are_standardised_inside_the_model() -> None:
    model = build_model(VECTORS, 1, cfg(architecture="mlp"))
    scaled = model.get_layer("standardise_features")(np.array([[100.0, 0.0, -5.0]], "float32"))
    np.testing.assert_allclose(np.asarray(scaled), 0.0, atol=1e-6)


@pytest.mark.parametrize(
    ("spec", "model_cfg", "message"),
    [
        (DIGITS, cfg(architecture="backbone"), "model.backbone: MobileNetV3Small cannot take"),
        (
            DataSpec(kind="image", input_shape=(32, 32, 4), task="classification"),
            cfg(architecture="backbone", weights="imagenet"),
            "data.image_channels: a backbone takes 1 (grayscale) or 3 (RGB) channels, got 4",
        ),
        (VECTORS, cfg(architecture="backbone"), "model.architecture: backbone needs images"),
        (VECTORS, cfg(architecture="cnn"), "model.architecture: cnn needs images"),
        (IMAGES, cfg(architecture="backbone", backbone="MobileNetV9"), "model.backbone: 'Mobil"),
    ],
)
def test_inputs_a_model_cannot_take_are_one_line_errors(spec, model_cfg, message) -> None:
    with pytest.raises(ConfigError) as info:
        build_model(spec, 3, model_cfg)
    assert str(info.value).startswith(message)
    assert "(example: --set " in str(info.value) and "\n" not in str(info.value)


def test_fine_tune_unfreezes_the_top_layers_but_never_batch_norm() -> None:
    model = build_model(IMAGES, 3, cfg(architecture="backbone"))
    backbone = find_backbone(model)
    set_backbone_trainable(model, None)
    head_only = {v.path for v in model.trainable_variables}
    assert head_only
    assert not backbone.trainable_variables
    set_backbone_trainable(model, 10)
    unfrozen = [layer for layer in backbone.layers if layer.trainable and layer.weights]
    top = backbone.layers[-10:]
    assert unfrozen and all(layer in top for layer in unfrozen)
    assert not any(isinstance(la, keras.layers.BatchNormalization) for la in unfrozen)
    both = {v.path for v in fine_tune_variables(model, 10)}
    assert head_only < both
    assert not backbone.trainable_variables  # fine_tune_variables leaves phase 1 (frozen)


def test_template_params_build_the_default_model() -> None:
    params = load_params(PARAMS, ["model.hidden_units=[16]"])
    spec = DataSpec(
        kind="vector", input_shape=(64,), task="classification", names=[str(i) for i in range(10)],
        feature_mean=[0.0] * 64, feature_var=[1.0] * 64,
    )  # fmt: skip
    model = build_model(spec, 10, params.model)
    assert model.output_shape == (None, 10)


@pytest.mark.parametrize("architecture", ["cnn", "backbone"])
def test_mixed_bfloat16_step_with_clipping_and_phase_change(architecture: str) -> None:
    """bfloat16 compute on the CPU, float32 logits, a clipped step before and after unfreezing."""
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = build_model(IMAGES, 3, cfg(architecture=architecture))
        assert model.get_layer("logits").compute_dtype == "float32"
        optimizer = keras.optimizers.Adam(1e-3)
        optimizer.build(fine_tune_variables(model, 5))
        x = tf.random.uniform((4, 32, 32, 3), 0, 255)
        y = tf.constant([0, 1, 2, 0])
        for phase in (None, 5):
            set_backbone_trainable(model, phase)
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
            variables = model.trainable_variables
            optimizer.apply(clip_gradients(tape.gradient(loss, variables), 1.0), variables)
            assert logits.dtype == "float32" and np.isfinite(float(tf.reduce_mean(loss)))
        assert int(optimizer.iterations) == 2
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("command", [["evaluate"], ["predict", "new.csv"], ["export"]])
def test_every_command_checks_the_components_arguments(command, tmp_path: Path, capsys) -> None:
    """Not only train and prepare: evaluate, predict and export stop at a bad argument too."""
    project = new_project(tmp_path / "project")
    code = main([*command, "--params", str(project / "params.yaml"), "--set", "model.args.x=3"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: model.args.x: architecture "), err
    assert [p.name for p in project.iterdir()] == ["params.yaml"]  # nothing written
