"""The demo: a real multi-step agent surveying Python standard-library modules,
crashed with SIGKILL, resumed, approved from another process, and verified."""
