"""Governance: scores, version chains, pending review, lifecycle, health."""
