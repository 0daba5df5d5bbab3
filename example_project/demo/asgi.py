"""The ASGI application `make demo` serves with uvicorn.

``PdfPoolDoor`` refuses an upload to a ``@pdf_pooled`` view from its headers, before its
body is read, when the pool cannot take it (Django's handler reads every body first).
``PoolLifespan`` answers the lifespan protocol Django's handler does not speak: on
shutdown (Ctrl-C, SIGTERM) uvicorn lets in-flight requests finish, then the pool
stops taking work and finishes its queue before the process exits. ``KeptThreads`` runs
each request's sync code on a thread kept from earlier requests, not on a new one.
"""

import os

from django.core.asgi import get_asgi_application

from django_pdfpool import KeptThreads, PdfPoolDoor, PoolLifespan

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo.settings")

application = PdfPoolDoor(PoolLifespan(KeptThreads(get_asgi_application())))
