"""The ground floor: atomic writes and hashes (files), where things live (storage), what the
program runs on (environment), paths and URLs alike (locations). Imports nothing above it."""
