"""durably's web console (``durably ui``, extra ``durably[ui]``): agents, timelines, state at a seq, approvals.

``create_app(store, ...)`` returns the Starlette app; ``serve_console`` runs it
with uvicorn. See ``app`` for the pages, ``security`` for who may use them,
``timeline`` for how a journal is shown and what of its content.
"""

from durably._console.app import create_app
from durably._console.timeline import ContentPolicy

__all__ = ["ContentPolicy", "create_app"]
