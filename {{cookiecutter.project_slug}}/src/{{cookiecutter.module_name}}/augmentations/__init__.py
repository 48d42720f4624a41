"""The built-in augmentations beside augment.py's worked example (`flip`)."""
