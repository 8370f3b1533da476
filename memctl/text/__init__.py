"""Text rules shared by every stage: CJK, words, tokens, noise, when to search."""
