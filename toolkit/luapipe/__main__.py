"""``python -m luapipe``: the command line (see :mod:`luapipe._entry`)."""

from luapipe._entry import main

if __name__ == "__main__":
    main()
