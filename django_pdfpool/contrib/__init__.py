"""Integrations with API frameworks: ``contrib.drf`` (Django REST framework, the ``[drf]``
extra) and ``contrib.ninja`` (django-ninja, the ``[ninja]`` extra). Each imports its
framework; nothing else in the package does."""
