"""The extraction sandbox: untrusted PDFs read in limited, short-lived child processes.

Parent side: extract, child_process, template, layers; child side: child_main, child_job,
template_main, engines, confine, kernel; both: wire.
"""
