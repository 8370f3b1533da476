"""The per-turn context (`memctl context`): long-term memory, topics and the conversation under one budget."""
