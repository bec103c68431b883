"""Condensers: strategies that shrink a context view without deleting history."""
