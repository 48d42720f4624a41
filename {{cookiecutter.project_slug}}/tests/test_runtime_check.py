"""The notebooks' runtime check: a Colab TPU runtime is refused at once, in one line; a Colab
runtime other than the lock's snapshot is refused in one line naming the differences and the ways
out; the snapshot passes; off Colab it is skipped."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from conftest import MODULE, PARAMS, PROJECT, SRC

from {{ cookiecutter.module_name }}.colab import runtime_check
from {{ cookiecutter.module_name }}.colab.notebooks import check_accelerator
from {{ cookiecutter.module_name }}.colab.runtime_check import (
    TPU_STOP,
    NotebookStop,
    check_runtime,
    matching_runtimes,
    read_pins,
    stop_on_tpu,
)
from {{ cookiecutter.module_name }}.config import load_params
from {{ cookiecutter.module_name }}.core import hardware
from {{ cookiecutter.module_name }}.training import strategy

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

GPU = read_pins(PROJECT / "requirements" / "colab-constraints.txt")
OVERRIDES, LOCK_PYTHON = runtime_check.lock_settings(PROJECT)
LOCK = read_pins(PROJECT / "requirements.txt", LOCK_PYTHON)
COLAB = {"COLAB_RELEASE_TAG": "release-colab_20260819-060000_RC00"}
PYTHON = f"{LOCK_PYTHON}.15"  # the snapshot's Python, any patch release


def check(tmp_path, installed, python=PYTHON, **environ):
    """check_runtime on this project, as on Colab, saving a freeze under tmp_path."""
    env = {**COLAB, "PROJECT_STORAGE_DIR": str(tmp_path), **environ}
    return check_runtime(PROJECT, environ=env, installed=installed, python=python)


def test_importable_from_the_checkout_with_the_standard_library_alone():
    # -S: no site-packages at all, as before `%pip install -r requirements.txt` ran.
    code = f"import sys; sys.path.insert(0, {str(SRC)!r}); import {MODULE}.colab.runtime_check"
    run = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_off_colab_the_check_is_skipped(tmp_path):
    installed = {**GPU, "tensorflow": "9.9.9"}
    assert check_runtime(PROJECT, environ={}, installed=installed, python="3.9.0") == []


def test_the_snapshot_itself_passes(tmp_path):
    # Every package at Colab's version, tensorflow-metadata included: the lock's override of it
    # is deliberate (tools/lock.py OVERRIDES), not a difference.
    assert GPU["tensorflow-metadata"] != LOCK["tensorflow-metadata"]
    assert "tensorflow-metadata" in OVERRIDES
    assert check(tmp_path, GPU) == []
    assert not list(tmp_path.iterdir()), "nothing saved when the runtime is the lock's"


def test_a_newer_tensorflow_is_refused_in_one_line_naming_the_ways_out(tmp_path):
    installed = {**GPU, "tensorflow": "2.21.0", "keras": "3.14.0"}
    with pytest.raises(NotebookStop) as stop:
        check(tmp_path, installed)
    line = str(stop.value)
    assert "\n" not in line and stop.value._render_traceback_() == [line]
    assert f"tensorflow 2.21.0 (lock: {GPU['tensorflow']})" in line
    assert f"keras 3.14.0 (lock: {GPU['keras']})" in line
    (freeze,) = tmp_path.glob("colab-pip-freeze-gpu-*.txt")
    assert f"make lock COLAB_FREEZE={freeze}" in line
    assert "allow_reinstall = True" in line
    text = freeze.read_text()
    assert text.startswith("# pip freeze of the Colab GPU runtime release-colab_20260819")
    assert "pytest==" in text  # this interpreter's real freeze
    # The `make lock COLAB_FREEZE=...` the line gives reads the freeze's Python from it.
    spec = importlib.util.spec_from_file_location("lock", PROJECT / "tools" / "lock.py")
    lock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lock)
    assert lock.freeze_python(freeze) == ".".join(map(str, sys.version_info[:2]))


def test_an_older_runtime_names_python_and_a_pinned_version_only_where_one_matches(tmp_path):
    installed = {**GPU, "tensorflow": "2.19.0", "numpy": "2.0.2"}
    pattern = r"Python 3\.12\.12 \(lock: 3\.1\d\), tensorflow 2\.19\.0"
    with pytest.raises(NotebookStop, match=pattern) as stop:
        check(tmp_path, installed, python="3.12.12")
    assert "(Python stays 3.12.12)" in str(stop.value)
    assert "Runtime version" not in str(stop.value)  # no pinned runtime has the lock's versions
    older = {"tensorflow": "2.19.0", "numpy": "2.0.2"}
    assert matching_runtimes("3.12", older) == ["2026.01", "2025.10"]
    assert matching_runtimes("3.11", {**older, "tensorflow": "2.18.0"}) == ["2025.07"]
    line = runtime_check.refusal(["tensorflow 2.20.0 (lock: 2.19.0)"], "f.txt", ["2026.01"])
    assert "Runtime version 2026.01" in line


def test_another_preinstalled_pin_that_differs_is_named_and_a_missing_one_is_not(tmp_path):
    installed = {**GPU, "pillow": "12.0.0"}
    del installed["scikit-learn"]  # not installed: pip installs it, nothing is replaced
    with pytest.raises(NotebookStop) as stop:
        check(tmp_path, installed)
    line = str(stop.value)
    assert line.count(" (lock: ") == 1 and f"pillow 12.0.0 (lock: {LOCK['pillow']})" in line


@pytest.fixture
def no_tpu_here(monkeypatch):
    """This machine's own TPU signals hidden: only the faked ones count."""
    for name in (*hardware.TPU_VARIABLES, "COLAB_TPU_1VM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(hardware, "TPU_DEVICE_FILES", ())


def test_a_colab_tpu_runtime_stops_at_once_in_one_line(tmp_path, no_tpu_here, monkeypatch):
    # What Colab's TPU runtimes set (v5e-1: COLAB_TPU_1VM=1, TPU_ACCELERATOR_TYPE=v5e-1, ...),
    # each signal alone; their packages (no TensorFlow, protobuf 7, ...) are never compared.
    signals = [{"COLAB_TPU_1VM": "1"}, {"TPU_ACCELERATOR_TYPE": "v5e-1"}, {"TPU_WORKER_ID": "0"}]
    for signal in signals:
        with pytest.raises(NotebookStop) as stop:
            check(tmp_path, GPU, **signal)  # stopped before the pins are compared
        assert str(stop.value) == TPU_STOP and stop.value._render_traceback_() == [TPU_STOP]
        with pytest.raises(NotebookStop, match="^Colab's TPU runtimes have no TensorFlow; pick"):
            stop_on_tpu({**COLAB, **signal})
        assert stop_on_tpu(signal) is None, "off Colab (a Cloud TPU VM): not refused"
    assert "Runtime > Change runtime type > T4 GPU" in TPU_STOP and "\n" not in TPU_STOP
    assert not list(tmp_path.iterdir()), "refused before saving anything"
    # A v5e or v6e chip is a VFIO device (/dev/vfio/0), an older TPU /dev/accel0.
    (tmp_path / "vfio").mkdir()
    (tmp_path / "vfio" / "0").touch()
    monkeypatch.setattr(hardware, "TPU_DEVICE_FILES", (str(tmp_path / "vfio" / "[0-9]*"),))
    with pytest.raises(NotebookStop, match="^Colab's TPU runtimes have no TensorFlow"):
        stop_on_tpu(COLAB)
    # A GPU runtime sets COLAB_TPU_1VM empty: compared with the lock as usual.
    monkeypatch.setattr(hardware, "TPU_DEVICE_FILES", ())
    assert check(tmp_path, GPU, COLAB_TPU_1VM="") == []


def test_tpu_strategy_off_colab_names_tensorflow_tpu_and_on_colab_a_gpu_runtime(monkeypatch):
    cfg = load_params(PARAMS, ["distribute.strategy=tpu"]).distribute
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    with pytest.raises(strategy.StrategyError, match=r"install `tensorflow-tpu==2\."):
        strategy.make_strategy(cfg, hw=strategy.Hardware(tpu=True))
    monkeypatch.setenv("COLAB_RELEASE_TAG", COLAB["COLAB_RELEASE_TAG"])
    with pytest.raises(strategy.StrategyError) as refused:
        strategy.make_strategy(cfg, hw=strategy.Hardware(tpu=True))
    assert "pick a GPU runtime (Runtime > Change runtime type > T4 GPU)" in str(refused.value)
    assert "tensorflow-tpu" not in str(refused.value) and "\n" not in str(refused.value)


def test_allow_reinstall_says_what_is_replaced_and_goes_on(tmp_path, capsys):
    installed = {**GPU, "tensorflow": "2.21.0"}
    env = {**COLAB, "PROJECT_STORAGE_DIR": str(tmp_path)}
    found = check_runtime(PROJECT, True, environ=env, installed=installed, python=PYTHON)
    assert found == [f"tensorflow 2.21.0 (lock: {GPU['tensorflow']})"]
    assert capsys.readouterr().out.startswith("NOTE: allow_reinstall: installing the lock's")
    assert not list(tmp_path.iterdir())


def test_lock_markers_hold_for_the_python_asked(tmp_path):
    lock = tmp_path / "requirements.txt"
    lock.write_text(
        "# a comment\n--extra-index-url https://example.org\nnumpy==2.0.2\n"
        'old==1.0 ; python_version < "3.12"\n'
        'new==2.0 ; python_version >= "3.12" and python_version < "3.14"\n'
        'either==3.0 ; python_version == "3.10" or python_version == "3.13"\n'
        "torch @ https://example.org/torch-2.9.0.whl\n"
    )
    assert read_pins(lock) == {"numpy": "2.0.2", "old": "1.0", "new": "2.0", "either": "3.0"}
    assert read_pins(lock, "3.11.2") == {"numpy": "2.0.2", "old": "1.0"}
    assert read_pins(lock, "3.13") == {"numpy": "2.0.2", "new": "2.0", "either": "3.0"}


def test_check_accelerator_stops_on_a_cpu_in_one_line_and_passes_a_gpu(monkeypatch, capsys):
    from {{ cookiecutter.module_name }}.colab import notebooks

    monkeypatch.setattr(notebooks, "detect_hardware", lambda: strategy.Hardware(gpus=0))
    with pytest.raises(NotebookStop, match=r"^No GPU or TPU on this runtime") as stop:
        check_accelerator()
    assert "\n" not in str(stop.value) and "require_accelerator = False" in str(stop.value)
    monkeypatch.setattr(notebooks, "detect_hardware", lambda: strategy.Hardware(gpus=1))
    assert check_accelerator() == "1 GPU(s)"
    assert capsys.readouterr().out == "Accelerator: 1 GPU(s)\n"
