"""Integrations: ``drf`` (Django REST framework), ``ninja`` (django-ninja), ``celery``, each
with its extra; each imports its framework, and nothing else in the package does."""
