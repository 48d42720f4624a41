"""The same template through cookiecutter's prompts, cruft and copier."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import copier_yml
import cruft
import pexpect
import project_env
import pytest
import yaml
from copier import run_copy, run_update

from local_extensions import BOOLEANS, CHOICES  # the template's root: copier_yml puts it on sys.path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
DEFAULTS = json.loads((ROOT / "cookiecutter.json").read_text())
DEFAULT_ANSWERS = {name: value[0] if isinstance(value, list) else value for name, value in DEFAULTS.items()}
# The default bake, then each other choice of each option, one option changed at a time.
ONE_CHANGE = [{}] + [
    {name: value} for name, allowed in CHOICES.items() for value in allowed if value != DEFAULT_ANSWERS[name]
] + [{name: not DEFAULT_ANSWERS[name]} for name in BOOLEANS] + [{"project_name": "Ada's Café Classifier"}]  # the slug and module derived by both tools' slugify
GIT = ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com"]
# A later template change that both update tools must bring into a project.
TEMPLATE_CHANGE = "# A later template change.\n"


def tree(project: Path) -> dict[str, tuple[bytes, bool]]:
    """Every file outside .git: content and whether it is executable."""
    return {
        path.relative_to(project).as_posix(): (path.read_bytes(), os.access(path, os.X_OK))
        for path in project.rglob("*")
        if path.is_file() and ".git" not in path.relative_to(project).parts
    }


def commit_all(repo: Path, message: str) -> None:
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "--quiet", "--no-verify", "-m", message], cwd=repo, check=True)


def template_repo(folder: Path) -> Path:
    """A git repository holding this template's files (what a `git clone` of it would give)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / name)
    subprocess.run(["git", "init", "--quiet", "-b", "main"], cwd=folder, check=True)
    commit_all(folder, "template, first version")
    return folder


def change_template(repo: Path) -> None:
    """The template's second commit: a line added to the generated Makefile."""
    makefile = repo / "{{cookiecutter.project_slug}}" / "Makefile"
    makefile.write_text(makefile.read_text() + TEMPLATE_CHANGE)
    commit_all(repo, "template, second version")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git copy of the template, for the copier bakes (copier clones a git template)."""
    return template_repo(tmp_path_factory.mktemp("template"))


def test_copier_yml_is_generated_from_cookiecutter_json() -> None:
    assert (ROOT / "copier.yml").read_text() == copier_yml.render(), "run `python scripts/copier_yml.py`"


@pytest.mark.parametrize("answers", ONE_CHANGE, ids=lambda a: "-".join(f"{k}={v}" for k, v in a.items()) or "defaults")
def test_copier_gives_cookiecutters_tree(answers: dict[str, str], template: Path, tmp_path: Path) -> None:
    baked = project_env.bake(tmp_path / "cookiecutter", **answers)
    copied = tmp_path / "copier" / baked.name
    run_copy(str(template), copied, data=answers, defaults=True, unsafe=True, quiet=True)
    answers_file = copied / ".copier-answers.yml"
    assert answers.items() <= _yaml(answers_file).items()
    answers_file.unlink()
    cookiecutter_tree, copier_tree = tree(baked), tree(copied)
    assert sorted(cookiecutter_tree) == sorted(copier_tree)
    assert [name for name in cookiecutter_tree if cookiecutter_tree[name] != copier_tree[name]] == []
    head = subprocess.run(["git", "symbolic-ref", "HEAD"], cwd=copied, capture_output=True, text=True, check=True)
    assert head.stdout.strip() == "refs/heads/main"


def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_copier_path_imports_no_cookiecutter(template: Path, tmp_path: Path) -> None:
    # A copier user installs copier and copier-template-extensions only.
    code = (
        "import sys; sys.modules['cookiecutter'] = None\n"
        "from copier import run_copy\n"
        f"run_copy({str(template)!r}, {str(tmp_path / 'p')!r}, defaults=True, unsafe=True, quiet=True)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    assert (tmp_path / "p" / "pyproject.toml").is_file()


@pytest.mark.parametrize(("answers", "field"), [
    ({"author_email": "not-an-email"}, "author_email"),
    ({"project_slug": "../escape"}, "project_slug"),
    ({"module_name": "tensorflow"}, "module_name"),
    ({"python_version": "3.9"}, "python_version"),
    ({"vertex_ai": "maybe"}, "vertex_ai"),  # copier alone would read any unknown word as true
    ({"dvc_remote": "foo"}, "dvc_remote"),  # copier's own refusal of a choice was a traceback
])
def test_copier_refuses_a_bad_answer_from_data(answers: dict, field: str, template: Path, tmp_path: Path) -> None:
    from copier.errors import UserMessageError

    with pytest.raises(UserMessageError, match=f"^{field}: .*example: "):
        run_copy(str(template), tmp_path / "out" / "p", data=answers, defaults=True, unsafe=True, quiet=True)
    assert not (tmp_path / "out").exists() and not (tmp_path / "escape").exists()


# Each as a user types it: a yes/no question, a choice, a free answer with a pattern, a version.
COMMAND_LINE_BAD_ANSWERS = {"vertex_ai": "maybe", "dvc_remote": "foo", "module_name": "my-mod", "python_version": "2.7"}


@pytest.mark.parametrize(("field", "value"), COMMAND_LINE_BAD_ANSWERS.items())
def test_copier_command_line_refuses_a_bad_answer_in_one_line(field: str, value: str, template: Path,
                                                               tmp_path: Path) -> None:
    run = subprocess.run([str(BIN / "copier"), "copy", "--trust", "--defaults", "--data", f"{field}={value}",
                          str(template), str(tmp_path / "out" / "p")], capture_output=True, text=True)
    # Copier's notice about this test's template, which has no release tags, is not about the answer.
    lines = [line for line in (run.stdout + run.stderr).strip().splitlines() if not line.startswith("No git tags")]
    assert run.returncode == 1 and len(lines) == 1 and lines[0].startswith(f"{field}: {value!r} "), lines[-3:]
    assert "example: " in lines[0] and not (tmp_path / "out").exists()


# cookiecutter itself refuses a yes/no or choice answer it cannot read, before the template's
# checks run, with a traceback (README: The questions): the other answers here.
@pytest.mark.parametrize(("field", "value"), [("module_name", "my-mod"), ("python_version", "2.7")])
def test_cruft_command_line_refuses_a_bad_answer_in_one_line(field: str, value: str, template: Path,
                                                             tmp_path: Path) -> None:
    run = subprocess.run([str(BIN / "cruft"), "create", "--no-input", "--output-dir", str(tmp_path / "out"),
                          "--extra-context", json.dumps({field: value}), template.as_uri()],
                         capture_output=True, text=True)
    lines = (run.stdout + run.stderr).strip().splitlines()
    assert run.returncode == 1 and len(lines) == 1 and lines[0].startswith(f"{field}: {value!r} "), lines[-3:]
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


# `copier copy --data-file`: unquoted in YAML, No is False and 0123 the octal number 83, which
# copier would bake as the text "False" and "83". Refused, saying to quote the answer.
@pytest.mark.parametrize("line", ["author_name: No", "github_owner: 0123", "description: 1_000"])
def test_copier_data_file_answer_that_yaml_changed_is_refused(line: str, template: Path, tmp_path: Path) -> None:
    field = line.split(":")[0]
    data = tmp_path / "answers.yaml"
    data.write_text(f"{line}\n")
    run = subprocess.run([str(BIN / "copier"), "copy", "--trust", "--defaults", "--data-file", str(data),
                          str(template), str(tmp_path / "out" / "p")], capture_output=True, text=True)
    last = run.stderr.strip().splitlines()[-1]
    assert run.returncode == 1 and last.startswith(f"{field}: ") and "quote it" in last, run.stderr[-500:]
    assert not (tmp_path / "out").exists()


def test_copier_update_takes_a_template_change(tmp_path: Path) -> None:
    repo = template_repo(tmp_path / "template")
    project = tmp_path / "project"
    # `copier copy -d vertex_ai=no`: copier reads the text as the yes/no question's False.
    run_copy(str(repo), project, data={"tracking": "mlflow", "vertex_ai": "no"}, defaults=True, unsafe=True, quiet=True)
    # Older versions of the template asked vertex_ai as a choice and wrote the answer as text.
    answers_file = project / ".copier-answers.yml"
    answers_file.write_text(answers_file.read_text().replace("\nvertex_ai: false\n", "\nvertex_ai: 'no'\n"))
    assert _yaml(answers_file)["vertex_ai"] == "no"
    readme = project / "README.md"
    readme.write_text(readme.read_text() + "A line of our own.\n")
    commit_all(project, "start")
    change_template(repo)
    run_update(project, defaults=True, unsafe=True, overwrite=True, quiet=True)
    assert (project / "Makefile").read_text().endswith(TEMPLATE_CHANGE)
    assert readme.read_text().endswith("A line of our own.\n")
    answers = _yaml(answers_file)
    assert answers["tracking"] == "mlflow" and answers["vertex_ai"] is False
    assert not (project / "Dockerfile").exists() and not (project / "src/colab_project/cloud").exists()
    assert answers["_commit"] == subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, check=True,
                                                capture_output=True, text=True).stdout.strip()


def test_cruft_create_check_update(tmp_path: Path) -> None:
    repo = template_repo(tmp_path / "template")
    answers = {"open_source_license": "none", "vertex_ai": "no"}
    project = cruft.create(repo.as_uri(), output_dir=tmp_path / "out", extra_context=answers)
    pruned = ["LICENSE", ".copier-answers.yml", "Dockerfile", "src/colab_project/cloud", "tests/test_vertex.py"]
    assert [name for name in pruned if (project / name).exists()] == []
    cruft_file = project / ".cruft.json"
    state = json.loads(cruft_file.read_text())
    assert {"open_source_license": "none", "vertex_ai": False}.items() <= state["context"]["cookiecutter"].items()
    # Older versions of the template asked vertex_ai as a choice and wrote the answer as text.
    state["context"]["cookiecutter"]["vertex_ai"] = "no"
    cruft_file.write_text(json.dumps(state, indent=2) + "\n")
    readme = project / "README.md"
    readme.write_text(readme.read_text() + "A line of our own.\n")
    commit_all(project, "start")
    assert cruft.check(project)
    change_template(repo)
    assert not cruft.check(project)
    assert cruft.update(project, skip_apply_ask=True)
    assert (project / "Makefile").read_text().endswith(TEMPLATE_CHANGE)
    assert readme.read_text().endswith("A line of our own.\n")
    assert [name for name in pruned if (project / name).exists()] == [], "the update brought back pruned files"
    assert json.loads(cruft_file.read_text())["context"]["cookiecutter"]["vertex_ai"] is False
    commit_all(project, "take the template's change")
    assert cruft.check(project)


def updates_md_commands(section: str) -> list[str]:
    """The commands of docs/updates.md's bash block under `## <section>`, without their comments."""
    text = (ROOT / "docs" / "updates.md").read_text()
    block = text.split(f"\n## {section}\n", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [re.sub(r"\s+#.*$", "", line) for line in block.splitlines() if line.strip()]


def test_updates_md_cruft_commands_take_a_template_change(tmp_path: Path) -> None:
    # docs/updates.md's cruft block as a user types it, in a terminal: a question is answered yes.
    repo = template_repo(tmp_path / "template")
    project = cruft.create(repo.as_uri(), output_dir=tmp_path / "out")
    commit_all(project, "Start from cookiecutter-colab")
    change_template(repo)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "GIT_PAGER": "cat",
           "GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.com",
           "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "test@example.com"}
    commands = updates_md_commands("cruft")
    assert [c.split()[:2] for c in commands][:3] == [["cruft", "check"], ["cruft", "diff"], ["cruft", "update"]]
    for command in commands:
        child = pexpect.spawn("bash", ["-c", command], cwd=project, env=env, encoding="utf-8", timeout=120)
        if child.expect([r"Apply diff and update\?", pexpect.EOF]) == 0:
            child.sendline("y")
            child.expect(pexpect.EOF)
        child.close()
        said = child.before[-3000:]
        # `cruft check` exits 1: the template has moved on.
        assert child.exitstatus == (1 if command == "cruft check" else 0), f"{command}\n{said}"
    assert (project / "Makefile").read_text().endswith(TEMPLATE_CHANGE)
    status = subprocess.run(["git", "status", "--porcelain"], cwd=project, capture_output=True, text=True, check=True)
    assert status.stdout == "" and cruft.check(project)


def test_cruft_refuses_a_bad_answer(tmp_path: Path) -> None:
    from cookiecutter.exceptions import FailedHookException

    repo = template_repo(tmp_path / "template")
    with pytest.raises(FailedHookException, match="^author_email: .*example: "):
        cruft.create(repo.as_uri(), output_dir=tmp_path / "out", extra_context={"author_email": "a@b"})
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_cookiecutter_prompt_refuses_a_bad_answer_before_the_next_question(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"cookiecutters_dir: {tmp_path / 'cc'}\nreplay_dir: {tmp_path / 'replay'}\n")
    out = tmp_path / "out"
    out.mkdir()
    child = pexpect.spawn(str(BIN / "cookiecutter"), ["--config-file", str(config), "-o", str(out), str(ROOT)],
                          encoding="utf-8", timeout=30, dimensions=(50, 200))
    # Question 5 of 12 gets a typo; the first four keep their defaults.
    for prompt, answer in [("Project name", ""), ("Repository and folder name", ""),
                           ("Python package name", ""), ("Your name", ""), ("Your email", "ada@example")]:
        child.expect(prompt)
        child.sendline(answer)
    child.expect(pexpect.EOF)
    child.close()
    after = child.before
    assert "author_email: 'ada@example' is not an email address (example: ada@example.com)" in after
    assert "One-line description" not in after, "the next question was asked"
    assert "Traceback" not in after
    assert child.exitstatus == 1
    assert list(out.iterdir()) == []


def test_copier_prompt_asks_a_bad_answer_again(template: Path, tmp_path: Path) -> None:
    child = pexpect.spawn(str(BIN / "copier"), ["copy", "--trust", str(template), str(tmp_path / "p")],
                          encoding="utf-8", timeout=30, dimensions=(50, 200))
    try:
        for prompt in ("Project name", "Repository and folder name", "Python package name", "Your name"):
            child.expect(prompt)
            child.sendline("")
        child.expect("Your email")
        child.send("\x15ada@example\r")  # Ctrl-U clears the default copier put in the field
        child.expect(r"author_email: 'ada@example' is not an email address \(example: ada@example.com\)")
        child.send("\x15ada@example.com\r")  # the same question, answered again
        child.expect("One-line description")
    finally:
        child.terminate(force=True)
    assert not (tmp_path / "p").exists()
