"""The admission rules across processes and hosts, kept in Redis (needs redis-py).

Every change of shared state is one Lua script; the Python beside it keeps this
process's callers and jobs in step. docs/cluster.md explains the design.
"""
