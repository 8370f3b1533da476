"""The section-hit window (index_state.json) and the per-turn plan."""
