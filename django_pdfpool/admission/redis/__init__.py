"""The admission rules across processes and hosts, kept in Redis (needs redis-py): each change
of shared state one Lua script, the Python keeping this process in step (docs/cluster.md)."""
