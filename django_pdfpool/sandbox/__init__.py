"""The extraction sandbox: untrusted PDFs read in limited, short-lived child processes.

Parent side: extract, child_process, spares; child side: child_main, engines; both: wire.
"""
