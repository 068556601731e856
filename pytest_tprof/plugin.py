"""pytest hooks of pytest-tprof."""
