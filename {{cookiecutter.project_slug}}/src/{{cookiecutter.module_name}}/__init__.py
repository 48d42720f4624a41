"""{{ cookiecutter.project_name }}

Training that survives Colab disconnects and scales out.
Run `python -m {{ cookiecutter.module_name }} --help` for the commands.
"""

__version__ = "0.1.0"
