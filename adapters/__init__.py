"""durably.adapters."""
