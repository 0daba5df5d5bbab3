"""Integrations with frameworks: ``contrib.drf`` (Django REST framework, the ``[drf]``
extra), ``contrib.ninja`` (django-ninja, ``[ninja]``) and ``contrib.celery`` (Celery,
``[celery]``). Each imports its framework; nothing else in the package does."""
