"""The bench suites, in the order a full run takes them. Each is ``async run(bench)``."""

from .. import frameworks
from . import agent_steps, append, burst, codec, growth, imports, many, overhead, peers, peers_growing, restore, scan

SUITES = {
    "codec": codec.run,
    "append": append.run,
    "agent-steps": agent_steps.run,
    "growth": growth.run,
    "overhead": overhead.run,
    "restore": restore.run,
    "many": many.run,
    "peers": peers.run,
    "peers-growing": peers_growing.run,
    "scan": scan.run,
    "burst": burst.run,
    "imports": imports.run,
    "frameworks": frameworks.run,  # Pydantic AI (and other frameworks) on durably and on DBOS
}
