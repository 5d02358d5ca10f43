"""Ownership and serving (internal): activations and their handles, leases and their holders, scans, ``serve()`` and wake-ups.

Builds on the step loop and the journal; the CLI, console and integrations build on it.
"""
