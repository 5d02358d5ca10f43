"""durably's web console (``durably ui``, extra ``durably[ui]``): agents, timelines, state at a seq, approvals.

``create_app(store, ...)`` returns the Starlette app; ``serve_console`` runs it
with uvicorn. See ``app`` for the pages, ``security`` for who may use them,
``timeline`` for how a journal is shown and what of its content.
"""

from .app import create_app
from .security import ConsoleConfigError
from .timeline import ContentPolicy

__all__ = ["ConsoleConfigError", "ContentPolicy", "create_app"]
