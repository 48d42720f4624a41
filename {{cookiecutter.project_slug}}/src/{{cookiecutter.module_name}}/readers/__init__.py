"""The built-in readers (`data.source`) beside sources.py's worked example (`images`)."""
