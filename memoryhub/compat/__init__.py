"""Compatibility surfaces: other platforms' memory APIs served over MemoryHub's own services."""
