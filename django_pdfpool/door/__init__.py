"""The door: admission decided from a request's headers, before its body is read.

``rules`` decides (no Django); ``headers`` reads what the door may read; ``views`` finds
the ``@pdf_pooled`` view a URL resolves to; ``entry`` reads the pool and applies the
settings; ``steps`` runs that logic, written once, on a thread or an event loop;
``django`` is the steps ``AdmissionMiddleware`` takes under WSGI. The ASGI
middleware (``PdfPoolDoor``) is ``django_pdfpool.asgi.door``, beside the other ASGI
wrapper (``asgi`` here is its retired path). See docs/door.md.
"""
