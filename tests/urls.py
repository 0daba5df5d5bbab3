"""URLs for the test suite; tests add their own views here as the app grows."""

urlpatterns: list = []
