"""Operator commands (internal): approve, extend, send, cancel and retry of a failed agent, how a command reaches an agent, and the placement it answers.

Builds on the step loop, the journal and the fleet.
"""
