"""Tools (internal): the ``@tool`` decorator and ``Tool``, argument schemas and validation, and what a result becomes in the journal.

May import ``durably.errors`` and ``durably._figures`` only.
"""
