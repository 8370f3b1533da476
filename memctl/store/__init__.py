"""The store: where every file lives, the lock, transactions (the only writer), file formats."""


def is_url(name: str) -> bool:
    """Whether a store's name (--store, $MEMCTL_STORE) is a PostgreSQL URL rather than a folder.
    Here, with nothing imported: the resident server's client asks it before any import."""
    return name[:13].lower().startswith(("postgresql://", "postgres://"))
