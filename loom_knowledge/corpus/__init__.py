"""The corpus in the log: its events, its read models, and the ``KnowledgeBase`` writing them."""
