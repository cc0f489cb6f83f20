# Local stub for plotly (no stubs upstream): only what amacs_server.research.report uses.
