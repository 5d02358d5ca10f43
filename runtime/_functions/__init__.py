"""Function agents: a run whose body is user code, with journaled calls inside it.

``FunctionAgent`` (definition.py) names the body; ``FunctionActor`` (actor.py)
runs it as the actor of an activation; ``Run`` (run.py) is what the body gets,
with ``Run.call`` journaling each call as intent and result and replaying it on
resume; ``journaled`` (journaled.py) routes a decorated function through the
current run.
"""
