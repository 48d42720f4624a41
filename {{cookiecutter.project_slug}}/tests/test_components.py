"""Every registered source, architecture and augmentation, yours included, on small inputs.

`make test` runs this after you change a model, a source or an augmentation. The registry says
what exists (`registry.names(kind)`): a component you add (a file beside model.py with
`@register(...)`) is tested with no edit here. Each goes through the command line (`main` of
`python -m {{ cookiecutter.module_name }}`, in this process) on the inputs of tests/examples.py:
- a source reads its example input (`prepare`);
- an architecture trains one short epoch on each kind of input it takes (vectors, images, text),
  refuses the others in one line (a ConfigError), and takes one kind at least;
- an augmentation trains one short epoch on images.
One component: `pytest tests/test_components.py -k <name>`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from examples import TINY, Inputs, mock_tfds, new_project, refused_in_one_line, run

from {{ cookiecutter.module_name }} import registry


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This module's folder, with its own storage root for the checkpoints."""
    folder = tmp_path_factory.mktemp("components")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROJECT_STORAGE_DIR", str(folder / "storage"))
        yield folder


@pytest.fixture(scope="module")
def inputs(work: Path) -> Inputs:
    return Inputs(work / "inputs")


@pytest.fixture(scope="module")
def prepared(work: Path, inputs: Inputs) -> dict[str, Path]:
    """A project folder per kind of input, its data prepared (classes)."""
    projects = {}
    for kind, data in inputs.by_kind().items():
        projects[kind] = new_project(work / kind)
        code, printed = run("prepare", projects[kind], *TINY, *data)
        assert code == 0, printed
    return projects


@pytest.mark.parametrize("name", registry.names("source"))
def test_each_source_reads_its_example(name: str, work: Path, inputs: Inputs) -> None:
    tried = []
    for i, data in enumerate(inputs.for_source(name)):
        project = new_project(work / f"source-{name}-{i}")
        with mock_tfds() if name == "tfds" else contextlib.nullcontext():
            code, printed = run("prepare", project, *TINY, *data)
        if code == 0:
            assert (project / "data/processed/spec.json").is_file(), printed
            return
        tried.append(f"{' '.join(data)}: exit {code}: {printed.strip()[-1000:]}")
    pytest.fail(
        f"data.source {name} read none of the example inputs (commit a sample it reads as "
        f"tests/inputs/{name}.<ext>: docs/customise.md, A data source). Tried:\n" + "\n".join(tried)
    )


@pytest.mark.parametrize("name", registry.names("architecture"))
def test_each_architecture_trains_on_the_inputs_it_takes(
    name: str, prepared: dict[str, Path]
) -> None:
    trained, broken = [], []
    for kind, project in prepared.items():
        code, printed = run(
            "train", project, *TINY, f"model.architecture={name}", f"run_name={name}-{kind}",
            args=("--fresh",),
        )  # fmt: skip
        if code == 0:
            trained.append(kind)
        elif not refused_in_one_line(code, printed):
            broken.append(f"--- {kind}: exit {code}\n{printed[-3000:]}")
    assert not broken, f"model.architecture={name} failed:\n" + "\n".join(broken)
    assert trained, f"model.architecture={name} refused every kind of input: {', '.join(prepared)}"


@pytest.mark.parametrize("name", registry.names("augmentation"))
def test_each_augmentation_trains_on_images(name: str, prepared: dict[str, Path]) -> None:
    code, printed = run(
        "train", prepared["images"], *TINY, "model.architecture=mlp", f"data.augment=[{name}]",
        f"run_name=augment-{name}", args=("--fresh",),
    )  # fmt: skip
    assert code == 0, printed
