"""The extraction sandbox: untrusted PDFs read in limited, short-lived child processes.

No Django, no pool. The parent side (``extract``, ``child_process``, ``spares``) starts,
feeds, kills and reaps children; the child side (``child_main``, ``engines``) runs in them.
"""
