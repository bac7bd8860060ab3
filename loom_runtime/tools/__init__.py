"""Tools built on the runtime, apart from it so importing the library stays cheap: the ``loom``
command line, its inert terminal output, and the pytest plugin that replays bundles."""
