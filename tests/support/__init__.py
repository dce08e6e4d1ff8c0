"""What the tests share: helpers, fake servers and worker processes. Fixtures live in conftest.py."""
