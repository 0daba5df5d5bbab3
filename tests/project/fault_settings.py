"""Settings of the fault-suite servers: the test settings plus the fault endpoints."""

from tests.project.settings import *  # noqa: F403

ROOT_URLCONF = "tests.project.fault_urls"
