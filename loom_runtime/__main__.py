"""``python -m loom_runtime``: the ``loom`` command line, where the console script is not on
``PATH`` (or to pick the interpreter explicitly)."""

from loom_runtime.tools.cli import main

if __name__ == "__main__":
    main()
