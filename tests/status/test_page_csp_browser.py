"""The status page under a strict Content-Security-Policy (the template's promise: no inline
script or style, nothing fetched from elsewhere), in Debian's chromium: nothing refused, and
the refresh runs."""

from __future__ import annotations

import pytest

from tests.status.test_page_browser import URL, refreshed, signed_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
POLICY = "default-src 'self'; object-src 'none'; base-uri 'none'"


def test_a_strict_policy_refuses_nothing_on_the_page(pdfpool, live_server, operator, browser):
    page, errors = signed_in(browser, live_server, fake_clock=True)  # refreshed() jumps it

    def with_policy(route):
        response = route.fetch()
        headers = {**response.headers, "content-security-policy": POLICY}
        route.fulfill(response=response, headers=headers)

    page.route("**/*", with_policy)
    refused: list[str] = []
    page.on("console", lambda m: refused.append(m.text) if "Content Security" in m.text else None)
    page.goto(live_server.url + URL)
    assert page.evaluate("document.styleSheets.length") >= 2  # the admin's and ours
    refreshed(page)
    assert refused == [] and errors == []
