"""The store: where every file lives, the lock, transactions (the only writer), file formats."""
