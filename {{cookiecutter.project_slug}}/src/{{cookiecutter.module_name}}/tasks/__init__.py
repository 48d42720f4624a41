"""The built-in task kinds beside task.py's worked example: what they share (base.py), one per
module."""
