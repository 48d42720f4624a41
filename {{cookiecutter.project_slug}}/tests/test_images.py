"""One image path (data/images.py): the pixels `prepare` stores are the pixels `predict` feeds
the model, for every format and oddity prepare accepts (EXIF orientation, transparency, WebP,
16-bit grey, a large photo shrunk); `evaluate`'s per-example predictions match `predict` on the
test split's source files; notebook 03's worst examples."""

from __future__ import annotations

import csv
import errno
import io
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import PARAMS, PROJECT, drop, main_in_fresh_process, sets
from PIL import Image

from {{ cookiecutter.module_name }}.__main__ import main
from {{ cookiecutter.module_name }}.config import load_params
from {{ cookiecutter.module_name }}.data.pipeline import (
    X,
    decoder,
    example_ids,
    load_prepared,
)
from {{ cookiecutter.module_name }}.data.prepare import SPLITS, prepare
from {{ cookiecutter.module_name }}.evaluation import report

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

SIZE = (24, 32)  # data.image_size: height, width
ORIENTATION = 0x0112


def _jpeg(image: Image.Image, path: Path, orientation: int = 1) -> None:
    exif = Image.Exif()
    if orientation != 1:
        exif[ORIENTATION] = orientation
    image.save(path, format="JPEG", quality=95, exif=exif.tobytes())


def _pattern(width: int, height: int) -> Image.Image:
    """Smooth colours, darker at the top-left: a turn or a flip shows."""
    yy, xx = np.mgrid[0:height, 0:width]
    rgb = np.stack([xx * 255 // width, yy * 255 // height, 255 - xx * 200 // width], -1)
    return Image.fromarray(rgb.astype(np.uint8))


def _transparent_right(width: int, height: int) -> Image.Image:
    """Opaque red on the left half, fully transparent (black underneath) on the right half."""
    rgba = np.zeros((height, width, 4), np.uint8)
    rgba[:, : width // 2] = (255, 0, 0, 255)
    return Image.fromarray(rgba, "RGBA")


def write_odd_images(folder: Path) -> dict[str, np.ndarray]:
    """Class folders of images prepare must turn upright, flatten, convert and shrink; returns
    what each should look like once prepared (upright, white behind), by id."""
    (folder / "jpegs").mkdir(parents=True)
    (folder / "others").mkdir()
    h, w = SIZE
    pattern = _pattern(w, h)
    expect = {}
    _jpeg(pattern.rotate(180), folder / "jpegs/turned-180.jpg", orientation=3)  # at size
    expect["jpegs/turned-180.jpg"] = np.asarray(pattern)
    _jpeg(pattern.transpose(Image.Transpose.ROTATE_90), folder / "jpegs/sideways.jpg", 6)
    expect["jpegs/sideways.jpg"] = np.asarray(pattern)
    _jpeg(pattern, folder / "jpegs/plain.jpg")  # kept byte for byte
    expect["jpegs/plain.jpg"] = np.asarray(pattern)
    noise = np.random.default_rng(0).integers(0, 256, (600, 800, 3), dtype=np.uint8)
    Image.fromarray(noise).save(folder / "jpegs/large.jpg", quality=95)  # shrunk: its mean
    expect["jpegs/large.jpg"] = np.full((h, w, 3), 127.5)
    _jpeg(pattern.resize((64, 48)), folder / "jpegs/double.jpg")
    expect["jpegs/double.jpg"] = np.asarray(pattern)
    flat = np.zeros((h, w, 3))
    flat[:, : w // 2] = (255, 0, 0)
    flat[:, w // 2 :] = 255  # transparency over white
    _transparent_right(w, h).save(folder / "others/rgba.png")
    _transparent_right(w, h).save(folder / "others/alpha.webp", lossless=True)
    palette = _transparent_right(w, h).convert("RGB").quantize(2)  # red and black
    black = [i for i, c in enumerate(np.reshape(palette.getpalette()[:6], (2, 3))) if c[0] < 128]
    palette.save(folder / "others/palette.png", transparency=black[0])
    for name in ("rgba.png", "alpha.webp", "palette.png"):
        expect[f"others/{name}"] = flat
    grey = (np.arange(w)[None, :] * 2000 + np.zeros((h, 1))).astype(np.uint16)
    Image.fromarray(grey).save(folder / "others/grey16.png")
    expect["others/grey16.png"] = np.repeat((grey / 257.0)[..., None], 3, -1)
    return expect


def _probe(models: Path, shape: tuple[int, int, int], encoding: str) -> None:
    """A saved "model" whose outputs are its input pixels / 255, as multilabel probabilities:
    `predict`'s CSV then shows exactly the pixels it fed the model."""
    inputs = keras.Input(shape=shape)
    outputs = keras.layers.Flatten()(keras.layers.Rescaling(1 / 255)(inputs))
    models.mkdir(parents=True)
    keras.Model(inputs, outputs).save(models / "model.keras")
    names = [f"p{i}" for i in range(int(np.prod(shape)))]
    sidecar = {"task": "multilabel", "names": names, "input_kind": "image",
               "input_shape": list(shape), "feature_names": [], "threshold": 0.5,
               "image_encoding": encoding}  # fmt: skip
    (models / "model.json").write_text(json.dumps(sidecar))


def stored(project: Path) -> tuple[dict[str, np.ndarray], dict[str, bytes]]:
    """Every prepared example, by id: the pixels the input pipeline decodes, the stored bytes."""
    data = load_prepared(project / "data/processed")
    decode = decoder(data.spec)
    pixels, raw = {}, {}
    for split in SPLITS:
        records = list(tf.data.TFRecordDataset(data.shards(split)).as_numpy_iterator())
        for example_id, record in zip(example_ids(data, split), records, strict=True):
            pixels[example_id] = decode(record)[0].numpy()
            feature = tf.train.Example.FromString(record).features.feature
            raw[example_id] = feature[X].bytes_list.value[0]
    return pixels, raw


def fed(predictions: Path, folder: Path, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """The pixels `predict` fed the probe, by file relative to `folder`."""
    with predictions.open() as handle:
        rows = list(csv.DictReader(handle))
    out = {}
    for row in rows:
        probs = [float(row[f"prob_p{i}"]) for i in range(int(np.prod(shape)))]
        key = Path(row["id"]).relative_to(folder).as_posix()
        out[key] = np.rint(np.array(probs) * 255).reshape(shape)
    return out


def test_prepare_stores_the_pixels_predict_feeds(tmp_path: Path) -> None:
    """Real command line, one fresh process: `prepare` on a folder of odd images, then `predict`
    on the same folder; the pixels are equal, file by file, in RGB (JPEG shards) and in grey
    (PNG shards)."""
    photos = tmp_path / "photos"
    expect = write_odd_images(photos)
    greys = tmp_path / "greys"  # PNG and WebP only: PNG shards, one channel
    for name in ("a", "b"):
        shutil.copytree(photos / "others", greys / name)
    Image.fromarray(np.full((SIZE[0], SIZE[1]), 90, np.uint8)).save(greys / "a/plain.png")
    Image.fromarray(np.full((SIZE[0], SIZE[1], 2), 200, np.uint8), "LA").save(greys / "b/la.png")
    cases = {"rgb": (photos, 3, "jpeg"), "grey": (greys, 1, "png")}
    calls = []
    for name, (folder, channels, encoding) in cases.items():
        project = tmp_path / name
        project.mkdir()
        shutil.copy(PARAMS, project / "params.yaml")
        _probe(project / "results/models", (*SIZE, channels), encoding)
        params = ["--params", str(project / "params.yaml")]
        overrides = sets([
            "data.source=images", f"data.path={folder}", f"data.image_size=[{SIZE[0]},{SIZE[1]}]",
            f"data.image_channels={channels}", "data.test_fraction=0.25",
        ])  # fmt: skip
        calls += [["prepare", *params, *overrides], ["predict", str(folder), *params]]
    proc = main_in_fresh_process(calls, tmp_path, tmp_path / "storage")
    assert proc.returncode == 0, proc.stdout + proc.stderr

    for name, (folder, channels, encoding) in cases.items():
        project = tmp_path / name
        assert load_prepared(project / "data/processed").spec.extra["encoding"] == encoding
        pixels, raw = stored(project)
        served = fed(project / "results/predictions.csv", folder, (*SIZE, channels))
        files = {p.relative_to(folder).as_posix() for p in folder.rglob("*.*")}
        assert set(pixels) == set(served) == files  # ids: the files relative to data.path
        for key in files:
            np.testing.assert_array_equal(pixels[key], served[key], err_msg=key)
    pixels, raw = stored(tmp_path / "rgb")
    assert raw["jpegs/plain.jpg"] == (photos / "jpegs/plain.jpg").read_bytes()
    for key, want in expect.items():  # upright, flattened onto white, shrunk with antialiasing
        error = np.abs(pixels[key] - want).mean()
        assert error < 6, (key, error)
    turned = np.abs(pixels["jpegs/turned-180.jpg"] - np.asarray(_pattern(32, 24).rotate(180)))
    assert turned.mean() > 40  # as stored, it would look turned
    # Without antialiasing (how the pixels were served before) a few source pixels make each.
    shrunk = tf.image.resize(np.asarray(Image.open(photos / "jpegs/large.jpg")), SIZE).numpy()
    assert np.abs(shrunk - 127.5).mean() > 20
    grey, _ = stored(tmp_path / "grey")
    alpha = 200 / 255  # grey 200 at this opacity, over white
    np.testing.assert_allclose(grey["b/la.png"], 200 * alpha + 255 * (1 - alpha), atol=0.51)
    np.testing.assert_allclose(grey["a/grey16.png"][..., 0], expect["others/grey16.png"][..., 0],
                               atol=0.51)  # fmt: skip


def test_the_docs_make_an_image_of_the_bundled_digits_to_predict_on(tiny_project: Path) -> None:
    """A default project has no image files; docs/customise.md's command makes one from the
    first row of data/raw/digits.csv, and `predict` feeds it as `prepare` stored that row."""
    docs = (PROJECT / "docs/customise.md").read_text(encoding="utf-8")
    (command,) = re.findall(r"^python -c .+$", docs, flags=re.M)
    prepare(load_params(tiny_project / "params.yaml"), tiny_project)
    made = subprocess.run(
        [sys.executable, *shlex.split(command)[1:]],
        cwd=tiny_project,
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0 and made.stdout == "label 0\n", made.stderr
    _probe(tiny_project / "results/models", (8, 8, 1), "png")
    at = ["--params", str(tiny_project / "params.yaml")]
    assert main(["predict", str(tiny_project / "digit.png"), *at]) == 0
    served = fed(tiny_project / "results/predictions.csv", tiny_project, (8, 8, 1))
    np.testing.assert_array_equal(served["digit.png"], stored(tiny_project)[0]["1"])


def _shapes(folder: Path, n: int = 24) -> None:
    """Dark squares and bright circles on grey, of several sizes and formats."""
    rng = np.random.default_rng(0)
    for i in range(n):
        side = int(rng.integers(20, 60))
        yy, xx = np.mgrid[0:side, 0:side] / side - 0.5
        circle = i % 2 == 1
        mask = (xx**2 + yy**2 < 0.1) if circle else (np.abs(xx) < 0.3) & (np.abs(yy) < 0.3)
        image = np.full((side, side, 3), 128, np.uint8)
        image[mask] = 230 if circle else 20
        cls = folder / ("circle" if circle else "square")
        cls.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(cls / f"{i}.{('png', 'jpg', 'webp')[i % 3]}")


def test_predict_on_the_test_sources_gives_evaluates_rows(tmp_path: Path) -> None:
    """Real command line, one fresh process: prepare, train, evaluate, then predict on the
    sources (an image folder, a CSV); the rows of results/predictions/test.csv come back."""
    _shapes(tmp_path / "shapes")
    rng = np.random.default_rng(1)
    lines = ["size,weight,kind"] + [
        f"{1000 + 3000 * (i % 2) + rng.normal(0, 200):.1f},{rng.random():.3f},{'ab'[i % 2]}"
        for i in range(60)
    ]
    (tmp_path / "animals.csv").write_text("\n".join(lines) + "\n")
    cases = {
        "images": (tmp_path / "shapes", ["data.source=images", "data.image_size=[16,16]",
                   "data.image_channels=3", "model.architecture=cnn", "model.filters=[4]"]),
        "csv": (tmp_path / "animals.csv", ["data.source=csv", "data.label=kind",
                "model.hidden_units=[4]"]),
    }  # fmt: skip
    calls = []
    for name, (source, overrides) in cases.items():
        project = tmp_path / name
        project.mkdir()
        shutil.copy(PARAMS, project / "params.yaml")
        args = ["--params", str(project / "params.yaml"), *sets([
            f"data.path={source}", "data.test_fraction=0.25", "train.epochs=1",
            "train.batch_size=8", f"run_name={name}", *overrides,
        ])]  # fmt: skip
        calls += [["prepare", *args], ["train", *args], ["evaluate", *args]]
        calls += [["predict", str(source), *args]]
    proc = main_in_fresh_process(calls, tmp_path, tmp_path / "storage")
    assert proc.returncode == 0, proc.stdout + proc.stderr

    for name, (source, _) in cases.items():
        results = tmp_path / name / "results"
        with (results / "predictions/test.csv").open() as handle:
            tested = list(csv.DictReader(handle))
        with (results / "predictions.csv").open() as handle:
            predicted = list(csv.DictReader(handle))
        spec = load_prepared(tmp_path / name / "data/processed").spec
        probs = [f"prob_{n}" for n in spec.names]
        assert list(tested[0]) == ["id", "target", "prediction", *probs, "loss"]
        assert len(tested) == spec.counts["test"] > 0
        if name == "images":  # predict names a file by its path: as evaluate, relative
            for row in predicted:
                row["id"] = Path(row["id"]).relative_to(source).as_posix()
        by_id = {row["id"]: row for row in predicted}
        for row in tested:
            served = by_id[row["id"]]
            assert row["target"] in spec.names
            assert row["prediction"] == served["prediction"]
            for column in probs:
                assert float(row[column]) == pytest.approx(float(served[column]), abs=1e-5)
        if name == "csv":  # the truth: the CSV's label on that row (row 1 = the first data row)
            for row in tested:
                assert row["target"] == lines[int(row["id"])].split(",")[2]


def test_worst_examples_table_and_pictures(tmp_path: Path, monkeypatch) -> None:
    """Notebook 03's call: the highest-loss rows of results/predictions/test.csv first, and
    for an image folder a figure of the files from data.path, under the results root."""
    monkeypatch.setenv("PROJECT_RESULTS_DIR", str(tmp_path / "kept"))  # e.g. on Drive
    _shapes(tmp_path / "shapes", 4)
    rows = [  # evaluate writes each example's loss: the task's own (cross-entropy here)
        "id,target,prediction,prob_circle,prob_square,loss",
        "circle/1.jpg,circle,circle,0.9,0.1,0.1054",
        "square/0.png,square,circle,0.99,0.01,4.60517",  # the most confident mistake
        "square/2.webp,square,circle,0.6,0.4,0.9163",
        "circle/3.png,circle,circle,0.7,0.3,0.3567",
    ]
    (tmp_path / "kept/predictions").mkdir(parents=True)
    (tmp_path / "kept/predictions/test.csv").write_text("\n".join(rows) + "\n")
    worst = report.worst_predictions(tmp_path, n=3)
    assert list(worst["id"]) == ["square/0.png", "square/2.webp", "circle/3.png"]
    (tmp_path / "data/processed").mkdir(parents=True)
    spec = {"kind": "image", "input_shape": [16, 16, 3], "task": "classification",
            "names": ["circle", "square"]}  # fmt: skip
    (tmp_path / "data/processed/spec.json").write_text(json.dumps(spec))
    (tmp_path / "params.yaml").write_text((PARAMS).read_text())
    params = load_params(tmp_path / "params.yaml", ["data.source=images", "data.path=shapes"])
    text = report.worst_examples(tmp_path, params, n=2)
    squeezed = [" ".join(line.split()) for line in text.splitlines()]  # tabulate pads cells
    assert "| square/0.png | square | circle | 4.6052 |" in squeezed
    figure = tmp_path / "kept/figures/03_worst_examples.png"
    assert not (tmp_path / "results").exists()
    assert figure.is_file() and Image.open(io.BytesIO(figure.read_bytes())).width > 100


def test_worst_examples_on_a_dropped_drive_are_drawn_from_the_test_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Notebook 03's figure with data.path on a Drive whose mount dropped: the test shards'
    pictures, as when the files are gone, not the mount's error."""
    _shapes(tmp_path / "drive/shapes", 4)
    drop(tmp_path / "drive", errno.ENOTCONN, monkeypatch)
    (tmp_path / "results/predictions").mkdir(parents=True)
    rows = "id,target,prediction,loss\nsquare/0.png,square,circle,4.605\n"
    (tmp_path / "results/predictions/test.csv").write_text(rows)
    (tmp_path / "data/processed").mkdir(parents=True)
    spec = {"kind": "image", "input_shape": [16, 16, 3], "task": "classification",
            "names": ["circle", "square"]}  # fmt: skip
    (tmp_path / "data/processed/spec.json").write_text(json.dumps(spec))
    asked = []

    def shards(project_dir: Path, ids: set[str]) -> dict[str, np.ndarray]:
        asked.extend(ids)
        return {i: np.zeros((16, 16, 3), np.uint8) for i in ids}

    monkeypatch.setattr(report, "_test_examples", shards)
    path = tmp_path / "drive/shapes"
    params = load_params(PARAMS, ["data.source=images", f"data.path={path}"])
    report.worst_examples(tmp_path, params)
    assert asked == ["square/0.png"]
    assert (tmp_path / "results/figures/03_worst_examples.png").is_file()
