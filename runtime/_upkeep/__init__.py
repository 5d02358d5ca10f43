"""Upkeep of stored data (internal): retention and purge, key rotation (reencrypt), and definition migration on resume.

Builds on the journal; never imports the CLI or the console.
"""
