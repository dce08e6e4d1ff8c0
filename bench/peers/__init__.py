"""Peer benchmark: ours beside OAT, PAI and NAIVE on the same conversation (``python -m bench.peers``).

Kept empty of imports: Temporal's workflow sandbox imports this package with each peer's module.
"""
