"""The admission rules: slots, queue, wait, single-flight and one job per caller.

No Django, no PDFs. ``local.Pool`` keeps them in one process, ``redis.redis_pool.RedisPool``
across every process sharing a Redis namespace; both are ``protocol.AdmissionPool``s and
share a job's life (``jobs``) and what is counted and shown (``ledger``).
"""
