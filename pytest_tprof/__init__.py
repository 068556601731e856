"""pytest glue for pytest-tprof: options, the ``tprof`` fixture, hooks, rendering."""
