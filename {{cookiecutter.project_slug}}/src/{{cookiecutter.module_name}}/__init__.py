"""{{ cookiecutter.project_name }}

Training that survives Colab disconnects and scales out.
Run `python -m {{ cookiecutter.module_name }} --help` for the commands.
"""

import os
import warnings

# TensorFlow's C++ log (CUDA probing, oneDNN notices) is silent unless you set the level yourself
# (docs/troubleshooting.md). Set here, before any module of the package imports TensorFlow: the
# notebooks, the command line and scripts all import this file first.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Optuna imports tqdm.auto, which warns in a Jupyter kernel without ipywidgets (a local Jupyter or
# papermill; Colab has them). The package draws its own bars for where the output goes.
warnings.filterwarnings("ignore", message="IProgress not found", module="tqdm")

__version__ = "0.1.0"
