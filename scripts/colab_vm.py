"""Inside a Colab-in-a-box VM (scripts/colab_box.py): run one notebook as Colab runs it.

    unshare --mount --uts --pid --fork --mount-proc -- <VM python> colab_vm.py SPEC.json

This process is the VM's first process (PID 1 of its namespace): it gives the VM its disk
(binds SPEC["content"] at /content) and its host name, opens the notebook, puts the user's
parameter edits in a cell after the parameters cell, and runs every cell in a new kernel (the
kernel spec in the VM's HOME: its Python, COLAB_RELEASE_TAG) with /content as working folder.
With SPEC["kill"], a disconnect: once a checkpoint of that step is complete on Drive, this
process exits at once and, as PID 1, takes every process of the VM with it (the kernel, its
training, TensorBoard). It writes the executed notebook and a result file, whatever happens.
"""

from __future__ import annotations

import glob
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path


def main(spec_file: str) -> int:
    spec = json.loads(Path(spec_file).read_text())
    subprocess.run(["mount", "--bind", spec["content"], "/content"], check=True)
    socket.sethostname(spec["hostname"])
    os.chdir("/content")

    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(spec["notebook"], as_version=4)
    inject_parameters(nb, spec["parameters"])
    result = {"hostname": socket.gethostname(), "status": "running"}
    lock = threading.Lock()

    def finish(**fields) -> None:
        with lock:
            result.update(fields)
            try:
                nbformat.write(nb, spec["output"])
            except Exception as exc:  # noqa: BLE001 (a cell's outputs changing while written)
                result["notebook_write_error"] = repr(exc)
            Path(spec["result"]).write_text(json.dumps(result, indent=1))

    if spec.get("kill"):
        threading.Thread(target=disconnect_at, args=(spec["kill"], finish), daemon=True).start()
    started = time.monotonic()
    client = NotebookClient(
        nb,
        timeout=spec["timeout"],
        kernel_name="python3",
        resources={"metadata": {"path": "/content"}},
    )
    try:
        client.execute()
        finish(status="ok", seconds=time.monotonic() - started)
    except CellExecutionError as exc:
        finish(status="error", ename=exc.ename, evalue=exc.evalue,
               seconds=time.monotonic() - started)  # fmt: skip
    except (DeadKernelError, CellTimeoutError) as exc:
        finish(status="crashed", ename=type(exc).__name__, evalue=str(exc),
               seconds=time.monotonic() - started)  # fmt: skip
    return 0


def inject_parameters(nb, parameters: dict) -> None:
    """A cell after the `parameters` cell that sets these values (what papermill injects, and
    what a user who edits the parameters cell gets)."""
    if not parameters:
        return
    import nbformat

    index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    source = "# Parameters set for this run\n" + "".join(
        f"{name} = {value!r}\n" for name, value in parameters.items()
    )
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
    nb.cells.insert(index + 1, cell)


def disconnect_at(kill: dict, finish) -> None:
    """Wait for a complete checkpoint at `kill["step"]` or later, then end the VM at once."""
    while True:
        steps = [int(m[1]) for p in glob.glob(kill["glob"]) if (m := re.search(r"step-(\d+)", p))]
        if steps and max(steps) >= kill["step"]:
            finish(status="killed", killed_after_step=max(steps), at=time.time())
            os._exit(137)  # PID 1 exits: the kernel and every other process of the VM die
        time.sleep(0.01)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
