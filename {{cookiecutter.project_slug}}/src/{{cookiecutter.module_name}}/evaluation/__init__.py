"""After training: `evaluate` on the test split, `predict` and `export` from the saved model
alone, and the `report` figures and tables the notebooks show."""
