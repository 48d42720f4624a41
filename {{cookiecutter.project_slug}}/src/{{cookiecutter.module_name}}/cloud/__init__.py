"""Beyond one machine: the same training as a Vertex AI custom job (`vertex`)."""
