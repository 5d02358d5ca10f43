"""durably.runtime."""
