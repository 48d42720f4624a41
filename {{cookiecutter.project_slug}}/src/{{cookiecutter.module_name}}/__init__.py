"""{{ cookiecutter.project_name }}

Training that survives Colab disconnects and scales out.
Run `python -m {{ cookiecutter.module_name }} --help` for the commands.
"""

import os

# TensorFlow's C++ log (CUDA probing, oneDNN notices) is silent unless you set the level yourself
# (docs/troubleshooting.md). Set here, before any module of the package imports TensorFlow: the
# notebooks, the command line and scripts all import this file first.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

__version__ = "0.1.0"
