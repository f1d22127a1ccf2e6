"""Rank 2, model: bytes and time at every memory level (``levels``, ``warps``,
``dram``, ``cpu``, ``hierarchy``, ``tensorcore``; ``hopper``: the Hopper 16-bit kernel's
levels). Pure Python; imports util and device.
"""
