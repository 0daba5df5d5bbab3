"""``PoolStatus``: no table and no rows (as django-rq does it), only so that the admin lists
"PDF pool -> Status" and staff can be granted ``django_pdfpool.view_pool_status``."""

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
