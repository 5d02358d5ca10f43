"""The step loop (internal): an agent's definition, its actor and mailbox, the state fold, model calls and their retries, and the handling of a step's tool calls.

May import ``durably.errors``, ``durably._figures``, ``durably._telemetry``, ``durably._tools`` and ``durably._journal``;
never the fleet, operator, reading or upkeep rooms, the CLI or the console.
"""
