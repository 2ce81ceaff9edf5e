"""``python -m cognoxium``: the ``cognoxium`` command line, as the console script runs it."""

from cognoxium.app.cli import main

if __name__ == "__main__":
    main()
