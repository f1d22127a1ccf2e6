"""Rank 2, model: bytes and time at every memory level (``levels``, ``warps``,
``dram``, ``cpu``, ``hierarchy``, ``tensorcore``). Pure Python; imports util and device.
"""
