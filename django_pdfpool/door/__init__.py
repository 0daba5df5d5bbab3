"""The door: admission decided from a request's headers, before its body is read.

``rules`` decides (no Django); ``headers`` reads what the door may read; ``views`` finds
the ``@pdf_pooled`` view a URL resolves to; ``entry`` reads the pool and applies the
settings; ``asgi`` is the ASGI middleware (``PdfPoolDoor``) and ``django`` the steps
``AdmissionMiddleware`` takes under WSGI. See docs/door.md.
"""
