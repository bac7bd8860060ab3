"""The pure corpus domain: documents, passages, fingerprints, reconciles, prompts, citations.

No database and no log: everything here is a function of its arguments, so it is tested
without either. The public names are re-exported by :mod:`loom_knowledge`."""
