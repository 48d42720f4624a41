"""Training: the `trainer` wires strategy -> data -> model and task -> the step loop (loop.py),
under the checkpoint and stop `policy`; around it `checkpoints`, the run `lease`, the `strategy`,
`seeding`, the `preflight` checks, the run record and tracking, and the `saved_model` users get."""
