"""The test project with its sessions in signed cookies: a server's session read needs no
database (its own is an empty one in memory), for tests/e2e/test_door_answers.py."""

from tests.project.settings import *  # noqa: F403

SESSION_ENGINE = "django.contrib.sessions.backends.signed_cookies"
