"""durably.integrations: bridges that give other agent frameworks durably's journal.

Each bridge is its own subpackage with its own optional extra, e.g.
``durably.integrations.langgraph`` (``pip install -e '.[langgraph]'`` in durably's clone).
The core runtime never imports them.
"""
