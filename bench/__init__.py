"""durably.bench."""
