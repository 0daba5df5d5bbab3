"""The test matrix: the suite on Python 3.12 and 3.13 with Django 6 (`make test-matrix`).

`make test` runs the default interpreter (3.11, Django 5.2 LTS)."""

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True


@nox.session(python=["3.12", "3.13"])
def tests(session: nox.Session) -> None:
    session.install("-e", ".[test,docs]", "django>=6.0,<7")
    session.run("python", "-c", "import django; print('Django', django.get_version())")
    session.run("python", "-m", "pytest", *session.posargs)
