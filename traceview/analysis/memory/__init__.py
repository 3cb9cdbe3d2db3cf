"""Device memory from the allocators' events."""
