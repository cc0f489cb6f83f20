"""AMACS server: owns the agent's mind; Emacs is its face and its hands."""

__version__ = "0.1.0"
