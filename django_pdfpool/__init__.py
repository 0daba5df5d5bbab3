"""django-pdfpool: admit expensive PDF work through a small scheduler.

The pool itself (``django_pdfpool.pool``) imports no Django, so importing the
package stays cheap and settings-free; Django-facing names load on first use.
"""

from __future__ import annotations

__version__ = "0.1.0.dev0"
