"""Data, from your files to training batches: `prepare` (stage, split, shard, manifest), the
tf.data `pipeline`, the data `manifest` and `staging` to fast disk. Uses the readers of
sources.py and the augmentations of augment.py."""
