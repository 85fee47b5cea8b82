"""Reproductions of the seed papers' experiments that need no download; each module is one command."""
