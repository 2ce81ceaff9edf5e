"""The applications on top of the engine.

Batch packing, the command line and the LoCoMo evaluation adapter.
"""

__all__: list[str] = []
