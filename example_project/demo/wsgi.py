"""The WSGI application, for servers without ASGI (gunicorn, mod_wsgi).

Under WSGI nothing sends a shutdown event: the pool drains at interpreter exit
(django-pdfpool registers ``drain_pool`` with ``atexit`` when it builds the pool).
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo.settings")

application = get_wsgi_application()
