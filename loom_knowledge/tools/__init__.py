"""Tools built on the library, apart from it so importing the library stays cheap: the
``loom knowledge`` commands, ``loom demo`` and the audit report."""
