"""``python -m luapipe``: the command line."""

from luapipe.cli import main

if __name__ == "__main__":
    main()
