"""Addressable memory: MemId, active memory (RAM/ROM), versioned long-term memory."""
