"""durably.schemas."""
