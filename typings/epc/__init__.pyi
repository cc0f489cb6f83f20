# Local stubs for python-epc 0.0.5 (it ships no types): only what AMACS uses.
