"""Colab in a box: Colab's Python and packages, VMs that come and go, a Drive that stays.

tests/test_colab_box.py runs a baked project's notebooks here as Colab runs them.

- The image (`image_for(project)`): a copy of Python 3.13 (pyenv's, or `$COLAB_BOX_PYTHON`) that
  holds Colab's versions (requirements/colab-constraints.txt) of every package the project's lock
  shares with Colab, pip at Colab's version and a `google.colab` stand-in; beside it a wheelhouse
  with the lock's other packages, so that `%pip install -r requirements.txt` works offline. Built
  once per lock and kept in `.venv-project/colab-<hash>/`, as the project environments are
  (TensorFlow is installed once: uv links it from its cache).
- A VM (`Box.new_vm()`): its own /content (a bind mount in a private mount namespace), its own host
  name (UTS namespace) and process tree (PID namespace: when the VM stops, every process in it
  dies at once, as on a disconnect), its own HOME and TMPDIR, and a thin overlay environment
  (`venv --system-site-packages` on the image) that `%pip` installs into. A new VM deletes the last
  one's folder: the checkout, the overlay, every VM-local file.
- Drive (`Box.drive`): a tmpfs (a file system of its own, as Drive's FUSE mount is) that the
  stand-in's `drive.mount(path)` binds at `path`; it outlives every VM.
- GitHub: a local bare repository that git reaches as https://github.com/<owner>/<slug>.git
  (`url.<base>.insteadOf` in the VMs' global git config).

A notebook runs in an IPython kernel of the overlay's Python with COLAB_RELEASE_TAG set, top to
bottom (nbclient), driven from inside the VM by scripts/colab_vm.py. Needs root (unshare, mount).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
CACHE = ROOT / ".venv-project"
# Bump when the image's recipe changes: the cached images are then rebuilt.
RECIPE = "2"
COLAB_PYTHON = "3.13"
# What a Colab runtime's COLAB_RELEASE_TAG looks like; its presence is how code knows it is on Colab.
RELEASE_TAG = "release-colab_20260819-box"
# Only these reach a VM from the host environment.
UV_ENV = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}

# The `google.colab` stand-in: `drive.mount(path)` binds the box's Drive folder at `path`, so
# `<path>/MyDrive` appears, as on Colab, and outlives the VM.
DRIVE_STUB = '''"""Stand-in for google.colab.drive (Colab in a box): the box's Drive folder, bound at `mountpoint`."""

import os
import subprocess


def mount(mountpoint, force_remount=False, timeout_ms=120000, readonly=False):
    mountpoint = os.path.abspath(mountpoint)
    if os.path.ismount(mountpoint) and not force_remount:
        print(f"Drive already mounted at {mountpoint}; to attempt to forcibly remount, call "
              f'drive.mount("{mountpoint}", force_remount=True).')
        return
    os.makedirs(mountpoint, exist_ok=True)
    subprocess.run(["mount", "--bind", os.environ["COLAB_BOX_DRIVE"], mountpoint], check=True)
    os.makedirs(os.path.join(mountpoint, "MyDrive"), exist_ok=True)
    print(f"Mounted at {mountpoint}")


def flush_and_unmount(timeout_ms=24 * 60 * 60 * 1000):
    pass
'''


def pins(path: Path, python: str | None = COLAB_PYTHON) -> dict[str, str]:
    """`name==version` lines of a requirements file, by canonical name, for Linux and `python`."""
    env = {"python_version": python or COLAB_PYTHON, "python_full_version": f"{python}.0",
           "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
           "implementation_name": "cpython", "os_name": "posix",
           "platform_python_implementation": "CPython"}  # fmt: skip
    found = {}
    for line in path.read_text().splitlines():
        line = line.split(" #")[0].strip()
        if not line or line.startswith(("#", "-")) or " @ " in line:
            continue
        req = Requirement(line)
        if req.marker and not req.marker.evaluate(env):
            continue
        specs = list(req.specifier)
        if len(specs) == 1 and specs[0].operator == "==":
            found[canonicalize_name(req.name)] = specs[0].version
    return found


def base_python() -> Path:
    """Colab's Python minor here: `$COLAB_BOX_PYTHON`, else pyenv's newest 3.13.x."""
    if os.environ.get("COLAB_BOX_PYTHON"):
        return Path(os.environ["COLAB_BOX_PYTHON"])
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = sorted(root.glob(f"versions/{COLAB_PYTHON}.*/bin/python{COLAB_PYTHON}"),
                   key=lambda p: [int(x) for x in re.findall(r"\d+", p.parts[-3])])  # fmt: skip
    if not found:
        raise SystemExit(
            f"colab box: no Python {COLAB_PYTHON} (Colab's) found: `pyenv install {COLAB_PYTHON}` "
            f"or set COLAB_BOX_PYTHON to a python{COLAB_PYTHON} executable"
        )
    return found[-1]


@dataclass(frozen=True)
class Image:
    """A built image: the Colab interpreter and the wheelhouse for `%pip`."""

    home: Path

    @property
    def prefix(self) -> Path:
        return self.home / "python"

    @property
    def python(self) -> Path:
        return self.prefix / "bin" / f"python{COLAB_PYTHON}"

    @property
    def site_packages(self) -> Path:
        return self.prefix / "lib" / f"python{COLAB_PYTHON}" / "site-packages"

    @property
    def wheelhouse(self) -> Path:
        return self.home / "wheelhouse"

    def distributions(self) -> dict[str, str]:
        return installed(self.site_packages)


def installed(site_packages: Path) -> dict[str, str]:
    """{canonical name: version} of the distributions installed in one site-packages folder."""
    found = {}
    for info in site_packages.glob("*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        found[canonicalize_name(name)] = version
    return found


def image_requirements(project: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(the image's pins, the wheelhouse's pins) for this project's lock.

    The image: Colab's version of every package that the lock and Colab share, and Colab's pip.
    The wheelhouse: every lock pin the image does not satisfy (the packages Colab lacks and the
    lock's deliberate overrides), and what building the project (`pip install -e .`) needs.
    """
    lock = pins(project / "requirements.txt")
    colab = pins(project / "requirements" / "colab-constraints.txt", None)
    image = {name: colab[name] for name in sorted(lock) if name in colab}
    image["pip"] = colab["pip"]
    wheels = {name: version for name, version in lock.items() if image.get(name) != version}
    return image, wheels


def build_requires(project: Path) -> list[str]:
    """The `[build-system] requires` of the project's pyproject.toml."""
    text = (project / "pyproject.toml").read_text()
    block = re.search(r"\[build-system\][^\[]*requires\s*=\s*\[([^\]]*)\]", text)
    return re.findall(r'"([^"]+)"', block[1]) if block else []


def image_for(project: Path, log=print) -> Image:
    """The image for this project's lock, built on first use and then taken from the cache."""
    python = base_python()
    image_pins, wheel_pins = image_requirements(project)
    recipe = json.dumps(
        [RECIPE, str(python), image_pins, wheel_pins, build_requires(project), DRIVE_STUB],
        sort_keys=True,
    )
    digest = hashlib.sha256(recipe.encode()).hexdigest()
    image = Image(CACHE / f"colab-{digest[:16]}")
    stamp = image.home / "recipe.sha256"
    if stamp.is_file() and stamp.read_text() == digest and image.python.exists():
        return image
    started = time.monotonic()
    # Built where it stays (the scripts' #! lines name the interpreter's path); complete once the
    # stamp, written last, is there.
    shutil.rmtree(image.home, ignore_errors=True)
    built = image
    _copy_interpreter(python, built.prefix)
    requirements = image.home / "image.txt"
    requirements.write_text("".join(f"{n}=={v}\n" for n, v in image_pins.items()))
    log(f"colab box: installing {len(image_pins)} of Colab's packages into {built.prefix} ...")
    subprocess.run(
        [str(Path(sys.executable).parent / "uv"), "pip", "install", "--quiet", "--no-deps",
         "--compile-bytecode", "--python", str(built.python), "-r", str(requirements)],
        check=True, env=UV_ENV,
    )  # fmt: skip
    stub = built.site_packages / "google" / "colab"
    stub.mkdir(parents=True, exist_ok=True)
    (stub / "__init__.py").write_text('"""Stand-in for google.colab (Colab in a box)."""\n')
    (stub / "drive.py").write_text(DRIVE_STUB)
    wheels = image.home / "wheels.txt"
    wheels.write_text("".join(f"{n}=={v}\n" for n, v in wheel_pins.items())
                      + "".join(f"{r}\n" for r in build_requires(project)))  # fmt: skip
    log(f"colab box: {len(wheel_pins)} wheels for %pip into {built.wheelhouse} ...")
    subprocess.run(
        [str(built.python), "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
         "--no-deps", "-w", str(built.wheelhouse), "-r", str(wheels)],
        check=True, env={**os.environ, "PIP_NO_INPUT": "1"},
    )  # fmt: skip
    stamp.write_text(digest)
    log(f"colab box: image built in {time.monotonic() - started:.0f} s: {image.home}")
    return image


def _copy_interpreter(python: Path, prefix: Path) -> None:
    """A copy of `python`'s installation at `prefix`, without its tests and installed packages:
    Colab's interpreter, into which the image's packages go as into Colab's system Python."""
    source = Path(python).resolve().parent.parent
    stdlib = source / "lib" / f"python{COLAB_PYTHON}"

    def ignore(folder: str, names: list[str]) -> list[str]:
        here = Path(folder)
        if here == stdlib:
            return [n for n in names if n in ("test", "idlelib", "turtledemo")]
        if here == stdlib / "site-packages":
            return names
        if here == source / "bin":  # scripts of the original's packages (pip): not ours
            return [n for n in names if not n.startswith("python")]
        return []

    shutil.copytree(source, prefix, symlinks=True, ignore=ignore)


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run git in `cwd` (committer set); return its output."""
    who = {f"GIT_{role}_{key}": value for role in ("AUTHOR", "COMMITTER")
           for key, value in (("NAME", "Ada"), ("EMAIL", "ada@example.org"))}  # fmt: skip
    run = subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **who, **(env or {})},
                         check=True, capture_output=True, text=True)  # fmt: skip
    return run.stdout.strip()


def _joined(text: str | list[str]) -> str:
    """A notebook's multi-line string: stored as one string or as a list of lines."""
    return text if isinstance(text, str) else "".join(text)


@dataclass
class NotebookRun:
    """What a notebook run in a VM left: the executed notebook, its outcome and its time."""

    status: str  # "ok" | "error" (a cell raised) | "killed" (the VM went away) | "crashed"
    seconds: float
    notebook: dict[str, Any]
    result: dict[str, Any]
    log: str  # the driver's own output (not the notebook's)

    @property
    def code_cells(self) -> list[dict[str, Any]]:
        return [c for c in self.notebook.get("cells", []) if c["cell_type"] == "code"]

    @property
    def text(self) -> str:
        """Everything the notebook printed or showed as text, and its error lines."""
        parts = []
        for cell in self.code_cells:
            for out in cell.get("outputs", []):
                if out["output_type"] == "stream":
                    parts.append(_joined(out["text"]))
                elif out["output_type"] == "error":
                    parts.append("\n".join(out["traceback"]) + "\n")
                else:
                    parts.append(_joined(out.get("data", {}).get("text/plain", "")) + "\n")
        return "".join(parts)

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [o for c in self.code_cells for o in c.get("outputs", []) if o["output_type"] == "error"]

    def outputs_of(self, marker: str) -> str:
        """The text of the first code cell whose source holds `marker`."""
        cell = next(c for c in self.code_cells if marker in "".join(c["source"]))
        return NotebookRun("", 0, {"cells": [cell]}, {}, "").text


@dataclass
class Box:
    """Drive, GitHub and the VMs of one scenario, under `root`."""

    root: Path
    image: Image
    owner: str
    slug: str
    vms: int = 0
    current: VM | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # A file system of its own, as Colab's Drive (FUSE) is: a VM's bind of it at
        # /content/drive is then a mount point by os.path.ismount, which the package asks.
        self.drive.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4g", "colab-box-drive", str(self.drive)], check=True)
        (self.drive / "MyDrive").mkdir(parents=True, exist_ok=True)
        self.gitconfig.write_text(
            f'[url "{self.github}/"]\n\tinsteadOf = https://github.com/\n'
            "[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n"
        )
        # The mount point every VM binds its own disk on (an empty folder on the host).
        Path("/content").mkdir(exist_ok=True)

    @property
    def drive(self) -> Path:
        return self.root / "drive"

    @property
    def storage(self) -> Path:
        """The project's storage folder as the host sees it (on a VM: /content/drive/MyDrive/<slug>)."""
        return self.drive / "MyDrive" / self.slug

    @property
    def github(self) -> Path:
        return self.root / "github"

    @property
    def gitconfig(self) -> Path:
        return self.root / "gitconfig"

    @property
    def origin(self) -> Path:
        return self.github / self.owner / f"{self.slug}.git"

    @property
    def url(self) -> str:
        return f"https://github.com/{self.owner}/{self.slug}.git"

    def publish(self, project: Path) -> None:
        """Commit everything in `project` and push it to the bare repository GitHub stands for."""
        git(project, "add", "-A")
        if git(project, "status", "--porcelain"):
            git(project, "commit", "-q", "--no-verify", "-m", "Start from cookiecutter-colab")
        if not self.origin.exists():
            git(self.root, "init", "-q", "--bare", str(self.origin))
        git(project, "push", "-q", str(self.origin), "HEAD:refs/heads/main")

    def push_from(self, checkout: Path, *args: str) -> None:
        """`git push` from a clone that knows the repository by its GitHub address."""
        git(checkout, "push", "-q", *args, env={"GIT_CONFIG_GLOBAL": str(self.gitconfig)})

    def close(self) -> None:
        """Unmount Drive (its files go with it)."""
        subprocess.run(["umount", str(self.drive)], check=True)

    def new_vm(self) -> VM:
        """A new VM; the last one is gone, with its disk (the checkout, the overlay, /tmp)."""
        for old in self.root.glob("vm-*"):
            _remove_vm_folder(old)
        self.vms += 1
        self.current = VM(self, self.vms)
        return self.current


def _remove_vm_folder(folder: Path) -> None:
    """Delete a stopped VM's folder, never through a mount point (Drive bound inside it)."""
    mounts = Path("/proc/self/mountinfo").read_text().split("\n")
    inside = [m for m in mounts if len(m.split()) > 4 and m.split()[4].startswith(f"{folder}/")]
    if inside:
        raise RuntimeError(f"colab box: {folder} still has mounts: {inside}")
    shutil.rmtree(folder)


class VM:
    """One Colab VM: its disk is `dir` (content/ is its /content), its host name is its own."""

    def __init__(self, box: Box, number: int) -> None:
        self.box = box
        self.number = number
        self.dir = box.root / f"vm-{number}"
        self.hostname = f"colab-{number}-{secrets.token_hex(4)}"
        self.content, self.home, self.tmp = self.dir / "content", self.dir / "root", self.dir / "tmp"
        self.venv = self.dir / "usr-local"  # where %pip installs (Colab: /usr/local/lib/python3.x)
        for folder in (self.content, self.home, self.tmp):
            folder.mkdir(parents=True)
        (self.content / "sample_data").mkdir()  # as on Colab
        subprocess.run([str(box.image.python), "-m", "venv", "--without-pip",
                        "--system-site-packages", str(self.venv)], check=True)  # fmt: skip
        kernels = self.home / ".local" / "share" / "jupyter" / "kernels" / "python3"
        kernels.mkdir(parents=True)
        spec = {
            "argv": [str(self.python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3",
            "language": "python",
            "env": {"COLAB_RELEASE_TAG": RELEASE_TAG},
        }
        (kernels / "kernel.json").write_text(json.dumps(spec, indent=1))
        self.runs = 0

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        return self.venv / "lib" / f"python{COLAB_PYTHON}" / "site-packages"

    @property
    def checkout(self) -> Path:
        """The project's clone as the host sees it (on the VM: /content/<slug>)."""
        return self.content / self.box.slug

    def env(self) -> dict[str, str]:
        """The VM's environment: nothing of the host's but a locale."""
        return {
            "PATH": os.pathsep.join([str(self.venv / "bin"), str(self.box.image.prefix / "bin"),
                                     "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin",
                                     "/sbin", "/bin"]),  # fmt: skip
            "HOME": str(self.home),
            "TMPDIR": str(self.tmp),
            "LANG": "C.UTF-8",
            "SHELL": "/bin/bash",
            "JUPYTER_PLATFORM_DIRS": "1",
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
            "GIT_CONFIG_GLOBAL": str(self.box.gitconfig),
            "COLAB_BOX_DRIVE": str(self.box.drive),
            # %pip: offline, from the box's wheelhouse (Colab's own packages are in the image).
            "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(self.box.image.wheelhouse),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_ROOT_USER_ACTION": "ignore",
        }

    def distributions(self) -> dict[str, str]:
        """What `%pip` installed on this VM (the overlay's own distributions)."""
        return installed(self.site_packages)

    def effective_versions(self) -> dict[str, str]:
        """{name: version} as the VM's Python imports them (the overlay first, then the image)."""
        code = ("import importlib.metadata as m, json, re\n"
                "seen = {}\n"
                "for d in m.distributions():\n"
                "    seen.setdefault(re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(), d.version)\n"
                "print(json.dumps(seen))")  # fmt: skip
        run = subprocess.run([str(self.python), "-c", code], capture_output=True, text=True,
                             check=True, env=self.env())  # fmt: skip
        return json.loads(run.stdout)

    def fake_distribution(self, name: str, version: str) -> None:
        """A distribution's metadata alone in the overlay: the runtime then reports that version."""
        info = self.site_packages / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "INSTALLER").write_text("colab-box\n")

    def run(
        self,
        notebook: Path,
        parameters: dict[str, Any] | None = None,
        kill_at_step: int | None = None,
        timeout: int = 1200,
    ) -> NotebookRun:
        """Open `notebook` on this VM and run all its cells in a new kernel, top to bottom.

        `parameters` go into a cell after the parameters cell, as a user's edits would.
        `kill_at_step`: the VM goes away (every process killed at once) as soon as a checkpoint of
        that step or later is complete on Drive.
        """
        self.runs += 1
        out = self.box.root / "runs" / f"vm{self.number}-{self.runs}-{Path(notebook).stem}"
        out.parent.mkdir(parents=True, exist_ok=True)
        spec = {
            "content": str(self.content),
            "hostname": self.hostname,
            "notebook": str(notebook),
            "parameters": parameters or {},
            "output": f"{out}.ipynb",
            "result": f"{out}.json",
            "timeout": timeout,
            "kill": None if kill_at_step is None else {
                "glob": f"/content/drive/MyDrive/{self.box.slug}/checkpoints/*/step-*/meta.json",
                "step": kill_at_step,
            },
        }  # fmt: skip
        Path(f"{out}.spec.json").write_text(json.dumps(spec, indent=1))
        command = ["unshare", "--mount", "--uts", "--pid", "--fork", "--mount-proc",
                   "--propagation", "private", "--", str(self.python), str(SCRIPTS / "colab_vm.py"),
                   f"{out}.spec.json"]  # fmt: skip
        started = time.monotonic()
        proc = subprocess.run(command, env=self.env(), capture_output=True, text=True,
                              timeout=timeout + 120)  # fmt: skip
        seconds = time.monotonic() - started
        log = proc.stdout + proc.stderr
        result_file, nb_file = Path(f"{out}.json"), Path(f"{out}.ipynb")
        result = json.loads(result_file.read_text()) if result_file.is_file() else {}
        notebook_json = json.loads(nb_file.read_text()) if nb_file.is_file() else {}
        status = result.get("status", "crashed")
        return NotebookRun(status, seconds, notebook_json, result, log)
