"""The status page's table-less model (models.py): in a project as Django's commands walk it."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("managers", ["default", "base"], ids=["dumpdata", "dumpdata --all"])
def test_dumpdata_of_the_whole_project_finds_no_rows_and_no_missing_table(
    django_user_model, managers
):
    """``dumpdata`` reads every model, unmanaged ones too (Django's ticket 13816): the model
    has no table, so it has no rows."""
    django_user_model.objects.create_user("someone")
    out = io.StringIO()
    call_command("dumpdata", all=managers == "base", stdout=out)
    dumped = json.loads(out.getvalue())
    assert {row["model"] for row in dumped} >= {"auth.user"}
    assert not any(row["model"].startswith("django_pdfpool.") for row in dumped)
