"""Child agents: started by a parent's agent-tool call, run anywhere, their end delivered to the parent once.

``runs`` starts children and reads their ends for the parent's actor;
``delivery`` takes a child's end to its parent's journal and wakes the parent
(when the child's activation ends, when a child is cancelled, and in every
``serve()`` scan, which catches the ends a dead process did not deliver);
``family`` carries a parent's cancel and purge to its children.
"""
