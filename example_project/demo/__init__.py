"""The django-pdfpool example project: settings, URLs, and the ASGI/WSGI entry points."""
