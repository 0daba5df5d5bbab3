"""An admin entry for the status page, done the way django-rq does it.

``PoolStatus`` has no table (``managed = False``) and no rows: it exists so that the
admin index lists "PDF pool -> Status" and so that one custom permission,
``django_pdfpool.view_pool_status``, can be granted to the staff who may see it.
"""

from __future__ import annotations

from django.db import models

#: The permission the status page (HTML and JSON) requires; superusers always have it.
VIEW_STATUS = "django_pdfpool.view_pool_status"


class PoolStatus(models.Model):
    """The status page's admin entry and permission; never queried."""

    # Explicit so that a project's DEFAULT_AUTO_FIELD never asks for a migration here.
    id = models.BigAutoField(primary_key=True)

    class Meta:
        managed = False
        default_permissions = ()
        permissions = (("view_pool_status", "Can view the PDF pool status"),)
        verbose_name = "status"
        verbose_name_plural = "status"

    def __str__(self) -> str:
        return "PDF pool status"
