"""Settings of the fault-suite servers: the test settings plus the fault endpoints."""

from tests.settings import *  # noqa: F403

ROOT_URLCONF = "tests.fault_urls"
