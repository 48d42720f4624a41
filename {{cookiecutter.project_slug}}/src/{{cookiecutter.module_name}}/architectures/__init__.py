"""The built-in architectures beside model.py's worked example (`mlp`): cnn, text, backbone."""
