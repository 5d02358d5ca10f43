"""Reading (internal): history, state at a seq and forks (time travel), describe, watch and verify.

Reads through the store and the journal's codec only; needs no live agent.
"""
