"""The ground floor: atomic writes and hashes (files), where things live (storage), what the
program runs on (environment), Cloud Storage paths (gcs). Imports nothing above it."""
