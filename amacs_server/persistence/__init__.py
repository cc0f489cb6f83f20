"""Persistence: org files, consciousness.el, transcripts and the per-tick git commit."""
