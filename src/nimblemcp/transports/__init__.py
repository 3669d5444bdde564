"""Transports: thin byte movers around the transport-agnostic server core."""
