"""The engine: immutable plan nodes, optimizer rules and lowering to Polars.

Internal: users build plans through :class:`~cognoxium.frame.CognitionFrame`.
"""

__all__: list[str] = []
