"""Bake the template with every choice of every option and check what comes out."""

from __future__ import annotations

import ast
import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml
from cookiecutter.exceptions import FailedHookException

import project_env

import tomllib

ROOT = Path(__file__).resolve().parent.parent
# Together these use every choice of every option at least once.
ANSWER_SETS = [
    {},
    {"dvc_remote": "gcs", "tracking": "mlflow", "open_source_license": "BSD-3-Clause", "python_version": "3.11"},
    {"dvc_remote": "gdrive", "tracking": "wandb", "open_source_license": "Apache-2.0", "python_version": "3.12"},
    {"dvc_remote": "local", "open_source_license": "none", "python_version": "3.13", "vertex_ai": False},
    {"dvc_remote": "none", "project_name": "Digit Classifier", "github_owner": "ada-lab"},
]
DEFAULTS = json.loads((ROOT / "cookiecutter.json").read_text())

# The files every project has, by path relative to the project folder (module: colab_project).
COMMON_FILES = {
    ".dvc/.gitignore",
    ".dvc/config",
    ".dvcignore",
    ".gitattributes",
    ".github/workflows/ci.yml",
    ".gitignore",
    ".pre-commit-config.yaml",
    "Makefile",
    "README.md",
    "data/external/.gitkeep",
    "data/interim/.gitkeep",
    "docs/customise.md",
    "docs/data.md",
    "docs/reproducibility.md",
    "docs/scaling.md",
    "docs/training-faults.md",
    "docs/training.md",
    "docs/troubleshooting.md",
    "dvc.yaml",
    "params.yaml",
    "pyproject.toml",
    "requirements-dev.in",
    "requirements-dev.txt",
    "requirements.in",
    "requirements.txt",
    "requirements/colab-constraints.txt",
    "results/figures/.gitkeep",
    "results/metrics/.gitkeep",
    "results/models/.gitkeep",
    "results/reports/.gitkeep",
    "results/runs/.gitkeep",
    "tools/check_python.py",
    "tools/lock.py",
}


def answers_of(overrides: dict[str, str | bool]) -> dict[str, str | bool]:
    """The full set of answers a bake with these overrides gets."""
    answers = {k: v[0] if isinstance(v, list) else v for k, v in DEFAULTS.items() if not k.startswith("_")}
    answers.update(overrides)
    return answers


# The package and its tests, the same for every answer (the tracker is chosen inside tracking.py).
# One name per line, sorted: branches that add files merge without conflicts.
PACKAGE_FILES = {
    "__init__.py",
    "__main__.py",
    "architectures/__init__.py",
    "architectures/backbone.py",
    "architectures/cnn.py",
    "architectures/text.py",
    "augment.py",
    "augmentations/__init__.py",
    "augmentations/affine.py",
    "augmentations/contrast.py",
    "colab/__init__.py",
    "colab/githooks.py",
    "colab/notebooks.py",
    "colab/restore.py",
    "colab/runtime_check.py",
    "config.py",
    "core/__init__.py",
    "core/environment.py",
    "core/files.py",
    "core/hardware.py",
    "core/locations.py",
    "core/progress.py",
    "core/storage.py",
    "data/__init__.py",
    "data/feed.py",
    "data/images.py",
    "data/manifest.py",
    "data/pipeline.py",
    "data/prepare.py",
    "data/split.py",
    "data/staging.py",
    "data/text.py",
    "evaluation/__init__.py",
    "evaluation/evaluate.py",
    "evaluation/export.py",
    "evaluation/model_card.py",
    "evaluation/predict.py",
    "evaluation/report.py",
    "loop.py",
    "model.py",
    "optim.py",
    "readers/__init__.py",
    "readers/csv_rows.py",
    "readers/digits.py",
    "readers/text_files.py",
    "readers/tfds.py",
    "readers/tfrecord.py",
    "registry.py",
    "sources.py",
    "spec.py",
    "task.py",
    "tasks/__init__.py",
    "tasks/base.py",
    "tasks/classes.py",
    "tasks/multilabel.py",
    "tasks/regression.py",
    "training/__init__.py",
    "training/checkpoints.py",
    "training/fingerprint.py",
    "training/lease.py",
    "training/policy.py",
    "training/preflight.py",
    "training/run_record.py",
    "training/saved_model.py",
    "training/seeding.py",
    "training/speed.py",
    "training/strategy.py",
    "training/sweep.py",
    "training/sweep_results.py",
    "training/sweep_study.py",
    "training/tracking.py",
    "training/trainer.py",
}
TEST_FILES = {
    "conftest.py",
    "examples.py",
    "test_bad_input.py",
    "test_checkpoints.py",
    "test_components.py",
    "test_chief_worker.py",
    "test_config.py",
    "test_docs.py",
    "test_drive_mount.py",
    "test_end_to_end.py",
    "test_environment.py",
    "test_export.py",
    "test_files.py",
    "test_fine_tune.py",
    "test_fingerprint.py",
    "test_hygiene.py",
    "test_images.py",
    "test_input_pipeline.py",
    "test_lease.py",
    "test_manifest.py",
    "test_model_card.py",
    "test_models.py",
    "test_multiworker.py",
    "test_notebooks.py",
    "test_optim.py",
    "test_ordinal_kind.py",
    "test_pipeline.py",
    "test_policy.py",
    "test_precommit.py",
    "test_predict.py",
    "test_preflight.py",
    "test_prepare.py",
    "test_resume.py",
    "test_run_record.py",
    "test_runtime_check.py",
    "test_seeding.py",
    "test_speed.py",
    "test_splits.py",
    "test_staging.py",
    "test_stop.py",
    "test_storage_faults.py",
    "test_strategy.py",
    "test_sweep.py",
    "test_sweep_database.py",
    "test_task.py",
    "test_tasks_end_to_end.py",
    "test_text.py",
    "test_tracking.py",
}
NOTEBOOKS = {"01_setup_and_data.ipynb", "02_train.ipynb", "03_evaluate.ipynb", "04_sweep.ipynb"}
# vertex_ai=yes only: the Vertex AI job writer, its training image and their tests.
VERTEX_FILES = {
    ".dockerignore",
    "Dockerfile",
    "src/{module}/cloud/__init__.py",
    "src/{module}/cloud/tuning.py",
    "src/{module}/cloud/vertex.py",
    "tests/test_dockerfile.py",
    "tests/test_vertex.py",
}
# What vertex_ai=no must leave out of the shared files too; a file that mentions Vertex AI anyway
# is named here with the reason.
VERTEX_MENTION_ALLOWED: set[str] = set()


def expected_files(answers: dict[str, str | bool], module: str) -> set[str]:
    """Exactly the files a project with these answers must have."""
    files = set(COMMON_FILES)
    files |= {f"src/{module}/{name}" for name in PACKAGE_FILES}
    files |= {f"tests/{name}" for name in TEST_FILES}
    files |= {f"notebooks/{name}" for name in NOTEBOOKS}
    if answers["open_source_license"] != "none":
        files.add("LICENSE")
    if answers["vertex_ai"]:
        files |= {name.format(module=module) for name in VERTEX_FILES}
    return files


def project_files(project: Path) -> set[str]:
    """Every file in a baked project, outside .git."""
    return {
        p.relative_to(project).as_posix()
        for p in project.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(project).parts
    }


@pytest.fixture(scope="module", params=range(len(ANSWER_SETS)), ids=lambda i: "-".join(map(str, ANSWER_SETS[i].values())) or "defaults")
def baked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    overrides = ANSWER_SETS[request.param]
    return answers_of(overrides), project_env.bake(tmp_path_factory.mktemp("bake"), **overrides)


def test_file_lists_name_each_file_once() -> None:
    # The lists above are set literals: a name written twice collapses silently, and the copy
    # may stand where a file that was meant is missing. Read them as written.
    written = {
        node.targets[0].id: [ast.literal_eval(name) for name in node.value.elts]
        for node in ast.parse(Path(__file__).read_text()).body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Set)
    }
    assert {"COMMON_FILES", "PACKAGE_FILES", "TEST_FILES", "VERTEX_FILES"} <= written.keys()
    repeated = {list_name: sorted({n for n in names if names.count(n) > 1}) for list_name, names in written.items()}
    assert {list_name: names for list_name, names in repeated.items() if names} == {}


def test_file_set_is_exact(baked: tuple[dict, Path]) -> None:
    answers, project = baked
    found = project_files(project)
    expected = expected_files(answers, project.name.replace("-", "_"))
    assert found - expected == set(), "unexpected files"
    assert expected - found == set(), "missing files"


def test_nothing_left_unrendered(baked: tuple[dict, Path]) -> None:
    _, project = baked
    for name in project_files(project):
        text = (project / name).read_text(errors="replace")
        if name.startswith(".github/workflows/"):
            text = re.sub(r"\$\{\{[^}]*\}\}", "", text)  # GitHub's own expressions, ${{ github.ref }}
        for marker in ("{{", "{%", "{#"):
            assert marker not in text, f"{name} still holds {marker!r}"
        assert not re.search(r"cookiecutter\.[a-z_]+", text), f"{name} names a template variable"


def test_every_file_parses(baked: tuple[dict, Path]) -> None:
    _, project = baked
    for name in project_files(project):
        path = project / name
        if path.suffix == ".py":
            compile(path.read_text(), name, "exec")
        elif path.suffix in (".yaml", ".yml"):
            yaml.safe_load(path.read_text())
        elif path.suffix == ".toml":
            tomllib.loads(path.read_text())
        elif path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".ipynb":
            nbformat.validate(nbformat.read(path, as_version=4))
    configparser.ConfigParser().read_string((project / ".dvc" / "config").read_text())


def test_answers_reach_the_project(baked: tuple[dict, Path]) -> None:
    answers, project = baked
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    assert pyproject["name"] == project.name
    assert pyproject["requires-python"] == f">={answers['python_version']}"
    assert pyproject["authors"] == [{"name": answers["author_name"], "email": answers["author_email"]}]
    assert f"github.com/{answers['github_owner']}/{project.name}" in pyproject["urls"]["Repository"]
    if answers["open_source_license"] == "none":
        assert "license" not in pyproject
    else:
        assert pyproject["license"] == answers["open_source_license"]
        assert answers["author_name"] in (project / "LICENSE").read_text() or answers["open_source_license"] == "Apache-2.0"
    dvc = configparser.ConfigParser()
    dvc.read_string((project / ".dvc" / "config").read_text())
    remote = "'remote \"storage\"'"  # DVC writes the section as ['remote "storage"']
    if answers["dvc_remote"] == "none":
        assert remote not in dvc.sections() and "remote" not in dvc["core"]
    else:
        assert dvc["core"]["remote"] == "storage"
        url = dvc[remote]["url"]
        prefix = {"drive": "/content/drive/MyDrive/", "gcs": "gs://", "gdrive": "gdrive://", "local": "../"}
        assert url.startswith(prefix[answers["dvc_remote"]])


def test_readme_shows_the_dvc_remote_where_dvc_config_has_it(baked: tuple[dict, Path]) -> None:
    """The README's storage diagram and its Drive line: the DVC remote on Drive only for
    dvc_remote=drive, the other remotes outside it, and no push or pull arrow without one. Without
    one its "On Colab" bullet said teammates get the model with `git pull && dvc pull` ("no remote
    specified"): a teammate's `dvc repro` trains it again."""
    answers, project = baked
    readme = (project / "README.md").read_text()
    drive = readme.split('subgraph Drive["', 1)[1].split("\n    end\n", 1)[0]
    on_drive = answers["dvc_remote"] == "drive"
    assert ("(the DVC remote)" in drive, "and the DVC remote" in readme) == (on_drive, on_drive)
    has_remote = answers["dvc_remote"] != "none"
    assert ("(the DVC remote)" in readme, "--> remote" in readme) == (has_remote, has_remote)
    teammates = ("`git pull && dvc pull`" in readme, "`git pull && dvc repro`" in readme)
    assert teammates == (has_remote, not has_remote)
    # Without a remote every `dvc push` and `dvc pull` stops ("no remote specified"): the README
    # named them in its table, its daily loop's step 5 and the baker's steps, which had none.
    assert ("dvc push" in readme, "dvc pull" in readme) == (has_remote, has_remote)
    # The baker's steps stand for the Local start's lines up to the one this sentence names.
    named = readme.split("whoever baked the project ran the bake's steps instead, to `", 1)[1].split("`", 1)[0]
    local_start = readme.split("## Local start", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert f"\n{named} " in f"\n{local_start}", (named, local_start)


# What the template's README says a Colab user does with each dvc_remote, as the baked data.md says it.
ON_COLAB = {"drive": "mount Drive first", "gcs": "authenticate_user()", "gdrive": "use the service account",
            "local": "gone with the VM", "none": "no DVC remote"}  # fmt: skip


def test_the_template_readme_says_what_each_dvc_remote_takes_on_colab(baked: tuple[dict, Path]) -> None:
    """The front door's promise per answer, not "works from Colab" for all: its `dvc_remote` row
    says, for every choice, what the baked project's docs/data.md has a Colab user do."""
    answers, project = baked
    assert set(ON_COLAB) == set(DEFAULTS["dvc_remote"])
    row = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `dvc_remote` |"))
    on_colab = row.partition("on Colab, ")[2].rstrip(" |").split("; ")
    said = dict(part.partition(": ")[::2] for part in on_colab if ": " in part)
    assert said.keys() == ON_COLAB.keys() and all(ON_COLAB[a] in said[a] for a in said), row
    remote = (project / "docs" / "data.md").read_text().split("\n## Remote storage for data and models\n")[1]
    assert [answer for answer, says in ON_COLAB.items() if says in remote] == [answers["dvc_remote"]]


def test_readme_says_where_the_chosen_tracker_shows_the_runs(baked: tuple[dict, Path]) -> None:
    """tracking=mlflow or wandb: the README says where those runs are, as reproducibility.md does."""
    answers, project = baked
    readme = (project / "README.md").read_text()
    shows = {"mlflow": "mlflow ui --backend-store-uri sqlite:///results/mlruns/mlflow.db",
             "wandb": "offline in `results/wandb/`"}  # fmt: skip
    assert [name for name, line in shows.items() if line in readme] == [
        name for name in shows if name == answers["tracking"]
    ]


def test_git_repository_on_main(baked: tuple[dict, Path]) -> None:
    _, project = baked
    head = subprocess.run(["git", "symbolic-ref", "HEAD"], cwd=project, capture_output=True, text=True)
    assert head.stdout.strip() == "refs/heads/main"


def test_make_lists_every_target(baked: tuple[dict, Path]) -> None:
    answers, project = baked
    out = subprocess.run(["make"], cwd=project, capture_output=True, text=True, check=True).stdout
    targets = ["setup", "hooks", "data", "train", "speed", "evaluate", "repro", "test", "lint",
               "notebooks", "lock", "clean"]
    vertex = ["image", "vertex"]
    for target in targets + vertex:
        listed = re.search(rf"^  make {target} +\S", out, flags=re.M) is not None
        expected = target in targets or answers["vertex_ai"]
        assert listed == expected, f"`make` {'does not list' if expected else 'lists'} {target}:\n{out}"
    makefile = (project / "Makefile").read_text()
    declared = set(re.findall(r"^([a-z][a-z-]*):", makefile, flags=re.M))
    listed = set(re.findall(r"^  make ([a-z][a-z-]*) ", out, flags=re.M))
    assert listed == declared, "`make` must list exactly the Makefile's targets"


def test_make_clean_removes_only_the_caches_of_the_tools_and_the_code(baked: tuple[dict, Path], tmp_path: Path) -> None:
    """Never a venv's compiled files (the README makes .venv in the project), nor a folder the
    project does not write (`build/`, anything under data/)."""
    _, baked_project = baked
    project = tmp_path / "p"
    shutil.copytree(baked_project, project, ignore=shutil.ignore_patterns(".git"))
    mine = [".venv/lib/x/__pycache__/a.pyc", "build/notes.txt", "dist/mine.tar.gz", "data/external/__pycache__/keep.txt"]
    written = [".pytest_cache/v", ".ruff_cache/v", f"src/{baked[0]['module_name']}/__pycache__/config.pyc", "tests/__pycache__/x.pyc"]
    for name in mine + written:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text("x")
    subprocess.run(["make", "-s", "--no-print-directory", "clean"], cwd=project, check=True, capture_output=True)
    assert [name for name in mine if not (project / name).exists()] == []
    assert [name for name in written if (project / name).exists()] == []


def test_make_image_without_docker_says_what_it_needs(baked: tuple[dict, Path], tmp_path: Path) -> None:
    answers, project = baked
    if not answers["vertex_ai"]:
        pytest.skip("no `make image` without vertex_ai")
    (tmp_path / "docker").write_text("#!/bin/sh\nexit 1\n")  # a client with no daemon
    (tmp_path / "docker").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    run = subprocess.run(["make", "-s", "--no-print-directory", "image"], cwd=project, capture_output=True, text=True, env=env)
    assert run.returncode != 0 and run.stdout == "make image: needs Docker, installed and running (docs/scaling.md)\n"


def test_make_passes_args_to_every_command_that_takes_them(baked: tuple[dict, Path]) -> None:
    _, project = baked
    for target in ("train", "sweep", "speed", "evaluate", "notebooks"):
        shown = subprocess.run(["make", "--no-print-directory", "-n", target, "ARGS=--x"], cwd=project, capture_output=True, text=True).stdout
        assert shown.rstrip().endswith(f"{target} --x"), (target, shown)


def test_vertex_ai_only_when_chosen(baked: tuple[dict, Path]) -> None:
    answers, project = baked
    params = yaml.safe_load((project / "params.yaml").read_text())
    module = project / "src" / project.name.replace("-", "_")
    assert ("vertex" in params) == answers["vertex_ai"]
    assert (module / "cloud").is_dir() == answers["vertex_ai"]
    if answers["vertex_ai"]:
        return
    mentions = [
        name for name in sorted(project_files(project))
        if name not in VERTEX_MENTION_ALLOWED
        and re.search(r"(?i:vertex)|Dockerfile|dockerignore|make image", (project / name).read_text(errors="replace"))
    ]
    assert mentions == [], "vertex_ai=no, and these files still mention Vertex AI or its image"


BAD_ANSWERS = [
    ({"project_name": "   "}, "project_name"),
    ({"project_slug": "../escape"}, "project_slug"),
    ({"project_slug": "My Project"}, "project_slug"),
    ({"project_slug": "9lives"}, "project_slug"),
    ({"project_slug": "trailing-"}, "project_slug"),
    ({"project_slug": ""}, "project_slug"),
    ({"module_name": "my-module"}, "module_name"),
    ({"module_name": "class"}, "module_name"),
    ({"module_name": "json"}, "module_name"),
    ({"module_name": "os"}, "module_name"),
    ({"module_name": "tensorflow"}, "module_name"),
    ({"module_name": "keras"}, "module_name"),
    ({"module_name": "dvc"}, "module_name"),
    ({"module_name": "optuna"}, "module_name"),
    ({"author_email": "not-an-email"}, "author_email"),
    ({"author_email": "a@b"}, "author_email"),
    ({"python_version": "3.9"}, "python_version"),
    ({"python_version": "3.10"}, "python_version"),
    ({"python_version": "3.14"}, "python_version"),
    ({"github_owner": "-leading-hyphen"}, "github_owner"),
    ({"github_owner": "double--hyphen"}, "github_owner"),
    ({"github_owner": "x" * 40}, "github_owner"),
    ({"github_owner": "under_score"}, "github_owner"),
    ({"description": "two\nlines"}, "description"),
    ({"author_name": False}, "author_name"),  # `author_name: No` in a YAML config, unquoted
]


def test_module_name_refuses_every_module_the_project_imports(tmp_path: Path) -> None:
    """A module_name that is the name of a module the project imports would shadow it (they
    said optuna was accepted, and `python -m optuna` then ran the library)."""
    from local_extensions import DEPENDENCY_MODULES

    project = project_env.bake(tmp_path, **{**ANSWER_SETS[2], "vertex_ai": True})
    local = {p.stem for p in project.rglob("*.py")} | {"colab_project"}
    imported = set()
    for path in project.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    assert imported - local - sys.stdlib_module_names - DEPENDENCY_MODULES == set()


@pytest.mark.parametrize(("answers", "field"), BAD_ANSWERS, ids=[f"{f}={list(a.values())[0]!r}"[:40] for a, f in BAD_ANSWERS])
def test_bad_answer_refused_leaving_nothing(answers: dict, field: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(FailedHookException) as refused:
        project_env.bake(out, **answers)
    message = str(refused.value)
    assert message.startswith(f"{field}: ") and "\n" not in message and "example: " in message
    assert list(out.iterdir()) == []
    assert not (tmp_path / "escape").exists()


def test_bad_answer_on_the_command_line_is_one_line(tmp_path: Path) -> None:
    cli = Path(sys.executable).parent / "cookiecutter"
    run = subprocess.run([str(cli), "--no-input", "-o", str(tmp_path), str(ROOT), "project_slug=../x"],
                         capture_output=True, text=True)
    assert run.returncode == 1
    lines = (run.stdout + run.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("project_slug: "), lines
    assert list(tmp_path.iterdir()) == []


# A bad slug, and vertex_ai as a string: a replay written by an older version of the template.
@pytest.mark.parametrize("bad", [{"project_slug": "bad slug"}, {"vertex_ai": "no"}], ids=lambda bad: next(iter(bad)))
def test_replay_with_bad_answers_is_refused_by_the_hook(bad: dict, tmp_path: Path) -> None:
    # --replay skips the questions (and their checks): the pre-generation hook refuses instead.
    from cookiecutter.main import cookiecutter

    # As cookiecutter writes it: every answer and the private variables (each check's "ok").
    checks = {name: "ok" for name in DEFAULTS if name.startswith("__check_")}
    answers = answers_of({"project_slug": "colab-project", "module_name": "colab_project", **bad})
    context = {"cookiecutter": {**answers, **checks, "_extensions": DEFAULTS["_extensions"],
                                "_copy_without_render": DEFAULTS["_copy_without_render"]}}
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps(context))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(FailedHookException, match=f"^{next(iter(bad))}: "):
        cookiecutter(str(ROOT), replay=str(replay), output_dir=str(out))
    assert list(out.iterdir()) == []


def cookiecutter_cli(folder: Path, *args: str, default_context: str = "") -> subprocess.CompletedProcess:
    """`cookiecutter --no-input` as a user types it, with a config file of their own in `folder`."""
    config = folder / "config.yaml"
    config.write_text(f"cookiecutters_dir: {folder / 'cc'}\nreplay_dir: {folder / 'replay'}\n{default_context}")
    (folder / "out").mkdir()
    command = [str(Path(sys.executable).parent / "cookiecutter"), "--no-input", "--config-file", str(config),
               "-o", str(folder / "out"), str(ROOT), *args]
    return subprocess.run(command, capture_output=True, text=True, check=True)


def test_vertex_ai_no_on_the_command_line(tmp_path: Path) -> None:
    # cookiecutter turns the `no` (or false, n, 0) of a boolean variable into False.
    run = cookiecutter_cli(tmp_path, "vertex_ai=no")
    answers = answers_of({"vertex_ai": False})
    assert project_files(tmp_path / "out" / "colab-project") == expected_files(answers, "colab_project")
    # The next steps the hook prints say so too: no Vertex AI line for the files it removed.
    assert "Next steps:" in run.stdout and "Vertex" not in run.stdout, run.stdout


# A user's config file (`--config-file`, ~/.cookiecutterrc) with every answer changed, typed as a
# user types YAML: `no` and `3.13` unquoted, which YAML reads as False and a number. vertex_ai
# comes first: cookiecutter drops what follows an answer it refuses in default_context.
USER_CONFIG = """\
default_context:
  vertex_ai: no
  project_name: Crop Yield
  project_slug: crop-yield-model
  module_name: crop_yield
  author_name: Ada Lovelace
  author_email: ada@example.org
  description: Forecasts crop yield from field records.
  github_owner: ada-lab
  python_version: 3.13
  dvc_remote: local
  tracking: mlflow
  open_source_license: Apache-2.0
"""


def test_a_yaml_config_file_sets_every_answer(tmp_path: Path) -> None:
    given = yaml.safe_load(USER_CONFIG)["default_context"]
    assert given["vertex_ai"] is False and given["python_version"] == 3.13
    expected = {**given, "python_version": "3.13"}
    defaults = answers_of({})
    assert sorted(expected) == sorted(defaults) and [k for k in expected if expected[k] == defaults[k]] == []
    run = cookiecutter_cli(tmp_path, default_context=USER_CONFIG)
    assert "Invalid default" not in run.stderr, run.stderr
    replay = json.loads(next((tmp_path / "replay").glob("*.json")).read_text())["cookiecutter"]
    assert {name: replay[name] for name in expected} == expected
    project = tmp_path / "out" / "crop-yield-model"
    assert project_files(project) == expected_files(expected, "crop_yield")
    assert tomllib.loads((project / "pyproject.toml").read_text())["project"]["requires-python"] == ">=3.13"


@pytest.fixture(scope="module")
def needs_313(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project that needs Python 3.13 (its pyproject.toml's requires-python)."""
    return project_env.bake(tmp_path_factory.mktemp("bake"), python_version="3.13")


def setup_check(project: Path, python: str) -> subprocess.CompletedProcess:
    """Run what `make setup` runs first, with this Python, and nothing after it."""
    # --no-print-directory: under another make (CI's `make test`) the first line is make's own
    dry = subprocess.run(["make", "-n", "--no-print-directory", "setup", f"PYTHON={python}"], cwd=project,
                         capture_output=True, text=True, check=True)  # fmt: skip
    first = dry.stdout.splitlines()[0]
    assert "pip install" not in first, f"`make setup` installs before it checks the Python: {first}"
    return subprocess.run(first, shell=True, cwd=project, capture_output=True, text=True)


def test_make_setup_refuses_an_older_python_before_installing(needs_313: Path) -> None:
    """pip installed the whole lock (about a thousand packages) before it refused the package for
    its requires-python; `make setup` now stops first, in one line that says what to do."""
    run = setup_check(needs_313, sys.executable)
    found = sys.version.split()[0]
    assert run.returncode != 0 and run.stdout == ""
    assert run.stderr == (
        f"make setup: {sys.executable} is Python {found}; pyproject.toml requires-python >=3.13. "
        "Make the venv with that Python: python3.13 -m venv --clear .venv\n"
    )


def python_313() -> str:
    """A Python 3.13 of this machine (pyenv's, or the CI runner's tool cache); the test skips without one."""
    found = sorted(Path.home().glob(".pyenv/versions/3.13*/bin/python3.13"))
    found += sorted(Path("/opt/hostedtoolcache/Python").glob("3.13*/x64/bin/python3.13"))
    if not found:
        pytest.skip("no Python 3.13 on this machine")
    return str(found[0])


def test_make_setup_goes_on_with_the_python_the_project_needs(needs_313: Path) -> None:
    run = setup_check(needs_313, python_313())
    assert (run.returncode, run.stdout, run.stderr) == (0, "", "")


def test_local_start_makes_the_venv_with_the_python_the_project_needs(needs_313: Path, tmp_path: Path) -> None:
    """The README's Local start and the hook's next steps said `python3 -m venv .venv`: where python3
    is older than requires-python, `make setup` then stopped. They name the answer's Python, and the
    venv that command makes passes setup's check."""
    local_start = (needs_313 / "README.md").read_text().split("## Local start", 1)[1]
    make_venv = next(line for line in local_start.splitlines() if " -m venv " in line).split(" && ")[0]
    command = shlex.split(make_venv)
    assert command[0] == "python3.13", make_venv
    assert f"\n  {make_venv} && " in cookiecutter_cli(tmp_path, "python_version=3.13").stdout
    subprocess.run([python_313(), *command[1:]], cwd=needs_313, check=True)  # python3.13 on PATH
    run = setup_check(needs_313, str(needs_313 / ".venv" / "bin" / "python"))
    assert (run.returncode, run.stdout, run.stderr) == (0, "", "")


def test_the_local_start_opens_the_notebooks_with_an_installed_jupyter(default_project: Path, project_python: Path) -> None:
    """The Local start said `jupyter lab`, which the lock never had: its Jupyter command runs in
    the environment `make setup` makes, at Colab's version of it."""
    readme = (default_project / "README.md").read_text()
    line = next(line for line in readme.split("## Local start", 1)[1].splitlines() if line.startswith("jupyter "))
    command = shlex.split(line.split("#")[0]) + ["--version"]
    env = project_env.project_command_env(default_project, project_python)
    run = subprocess.run(command, cwd=default_project, env=env, capture_output=True, text=True)
    colab = (default_project / "requirements/colab-constraints.txt").read_text()
    assert run.returncode == 0 and f"\n{command[1]}=={run.stdout.strip()}\n" in colab, run.stdout + run.stderr


def test_a_teammate_joins_by_the_readme_after_the_bakers_steps(tmp_path: Path, project_python: Path) -> None:
    """A newcomer's walk: the README's Local start had no `git clone` and no `dvc pull`, and the
    bake's next steps committed no dvc.lock, so a teammate's `dvc pull` stopped ("Checkout failed
    ... Is your cache up to date?"); off Colab `dvc push` wrote to /content/drive on this disk.
    The baker's printed steps, then the README's joining lines, run as written (GitHub a local bare
    repository, Drive for desktop a folder in HOME): the teammate has the data set. A commit with
    no dvc.lock fails in the words the README quotes, beside what to do then. Later the baker trains
    and commits but does not `dvc push`: a teammate's data-only pulls still work, and the README's
    `dvc pull` of the data and the model says what to do."""
    home, origin = tmp_path / "home", tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", str(origin)], check=True)
    subprocess.run(["git", "symbolic-ref", "HEAD", "refs/heads/main"], cwd=origin, check=True)  # as GitHub's
    home.mkdir()
    repo = f"github.com/{DEFAULTS['github_owner']}/colab-project.git"
    (home / ".gitconfig").write_text(
        f'[user]\n name = t\n email = t@example.org\n[url "{origin}"]\n'
        f" insteadOf = https://{repo}\n insteadOf = git@{repo.replace('/', ':', 1)}\n"
    )
    printed = cookiecutter_cli(tmp_path).stdout
    steps = printed.split("Next steps:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    skipped = (" -m venv ", "make setup", "make test")  # the interpreter: the fixture's
    baker = [line.strip() for line in steps if not any(s in line for s in skipped)]
    local_start = (tmp_path / "out" / "colab-project" / "README.md").read_text().split("## Local start", 1)[1]
    block = local_start.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    pull = next(line for line in block if line.startswith("dvc pull"))
    joiner = [line for line in block[: block.index(pull) + 1] if not any(s in line for s in skipped)]

    def run(lines: list[str], cwd: Path, project: Path) -> subprocess.CompletedProcess:
        """The lines as one shell script in `cwd`, with `project`'s package and HOME's git config."""
        env = {**project_env.project_command_env(project, project_python), "HOME": str(home)}
        env["GIT_CONFIG_GLOBAL"] = str(home / ".gitconfig")
        script = "set -e\n" + "\n".join(lines)
        return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)

    drive = home / "Library" / "CloudStorage" / "GoogleDrive-you@gmail.com" / "My Drive"  # macOS's
    drive.mkdir(parents=True)
    done = run(baker, tmp_path / "out", tmp_path / "out" / "colab-project")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (drive / "colab-project" / "dvc-storage" / "files").is_dir()
    clone = tmp_path / "mate" / "colab-project"
    clone.parent.mkdir()
    done = run(joiner, clone.parent, clone)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (clone / "data" / "processed" / "spec.json").is_file()
    subprocess.run(["git", "rm", "-q", "dvc.lock"], cwd=clone, check=True)  # a commit nobody pushed data for
    done = run(joiner[1:], clone, clone)
    quoted = re.search(r'"([^"]+)": that data was never pushed \(or no dvc.lock yet\), so `([^`]+)`', pull)
    assert quoted and done.returncode != 0 and quoted.group(1) in done.stderr + done.stdout, done.stderr

    # Later the baker trains by the README's daily loop (on main: no branch of its own) and pushes
    # the commit, but forgets step 5's `dvc push`: dvc.lock names a model the remote never got.
    # A teammate's commands for the data alone still work (they said `dvc pull`, which stopped at
    # that model: "Checkout failed ... results/models/model.keras"); the README's `dvc pull` for the
    # data and the model fails in the words it quotes, beside what to do then.
    baker_dir = tmp_path / "out" / "colab-project"
    readme = (baker_dir / "README.md").read_text()
    loop = readme.split("## The daily loop", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    trained = [line for line in loop if line.startswith(("dvc repro", "git add -A", "git push"))]
    done = run(trained, baker_dir, baker_dir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    later = tmp_path / "later" / "colab-project"
    later.parent.mkdir()
    done = run(joiner[:-1], later.parent, later)  # clone, reach the remote: nothing pulled yet
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = (later / "docs" / "reproducibility.md").read_text().split("## Reproducing a run", 1)[1]
    (record,) = [json.loads(path.read_text()) for path in baker_dir.glob("results/runs/*/manifest.json")]
    data_only = [
        next(line for line in doc.splitlines() if line.startswith("dvc pull")),  # after `git checkout`
        next(line for line in record["reproduce"] if line.startswith("dvc pull")),  # as for a run made at HEAD
        re.search(r"a teammate gets exactly that version with\s+`([^`]+)`", (later / "docs" / "data.md").read_text())[1],
    ]
    for line in data_only:
        done = run([line], later, later)
        assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        assert (later / "data" / "processed" / "spec.json").is_file(), line
    # A data file then changes in that clone: `make evaluate` refuses with one line, and each
    # command it gives to restore the data runs as written (they said `dvc checkout` / `dvc pull`:
    # "Can't remove the following unsaved files without confirmation", and past that the model
    # never pushed), after which the package's check passes.
    shard = later / "data" / "processed" / "train-00000.tfrecord"
    versioned = shard.read_bytes()
    flipped = versioned[:-1] + bytes([versioned[-1] ^ 0xFF])
    shard.write_bytes(flipped)
    done = run(["make evaluate"], later, later)
    refusal = next(line for line in done.stderr.splitlines() if line.startswith("error: data/processed/"))
    restore = re.search(r"restore the versioned data[^`]*`([^`]+)` \(or `([^`]+)`\)", refusal)
    assert done.returncode != 0 and "changed since prepare" in refusal and restore, done.stderr[-3000:]
    check = "python -c 'from pathlib import Path; from colab_project.data import manifest; manifest.check(Path.cwd())'"
    for command in restore.groups():
        shard.write_bytes(flipped)
        done = run([command, check], later, later)
        assert done.returncode == 0, f"{refusal}\n{command}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        assert shard.read_bytes() == versioned, command
    data_md = (later / "docs" / "data.md").read_text()
    assert re.search(rf"Fix: `{re.escape(restore[1])}`\s+\(or `{re.escape(restore[2])}`\)", data_md), "docs/data.md quotes other commands"
    # Without data/manifest.json (git's, not in DVC's cache) the check's other commands make it
    # (it said `dvc pull` too, which brings it back from nowhere: still "not found").
    (later / "data" / "manifest.json").unlink()
    done = run([check], later, later)
    missing = re.search(r"not found; prepare the data first: `[^`]+` \(or (.+)\)$", done.stderr.strip())
    assert done.returncode != 0 and missing, done.stderr[-3000:]
    for command in re.findall(r"`([^`]+)`", missing[1]):
        (later / "data" / "manifest.json").unlink(missing_ok=True)
        done = run([command, check], later, later)
        assert done.returncode == 0, f"{missing[0]}\n{command}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    both = re.search(r'teammates get that data and model with `([^`]+)`\s+\("([^"]+)" naming `([^`]+)`', readme)
    assert both, "the README's `dvc pull` of a data set and a model says nothing of a model never pushed"
    shutil.rmtree(later / "data" / "processed")
    done = run([both[1]], later, later)
    said = done.stdout + done.stderr
    assert done.returncode != 0 and both[2] in said and f"{both[3]}/model.keras" in said, said
    assert (later / "data" / "processed" / "spec.json").is_file(), "no data for the README's `dvc repro`"

    # Then the baker changes the data (params.yaml), `make data`, commits and pushes, again without
    # `dvc push`: the Local start's `dvc pull prepare` fails, with a dvc.lock, in the words the README
    # quotes (they said "with no dvc.lock"), and what it says to do then works.
    params = baker_dir / "params.yaml"
    text = params.read_text()
    changed = re.sub(r"(\n  validation_fraction: )[0-9.]+", r"\g<1>0.25", text, count=1)
    assert changed != text, "params.yaml has no data.validation_fraction line"
    params.write_text(changed)
    done = run(["make data", *trained[1:]], baker_dir, baker_dir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    done = run(["git pull -q", pull], later, later)
    said = done.stdout + done.stderr
    assert done.returncode != 0 and quoted.group(1) in said and "data/processed" in said, said
    done = run([quoted.group(2)], later, later)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
