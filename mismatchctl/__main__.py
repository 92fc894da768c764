"""``python -m mismatchctl``."""

from mismatchctl.cli.process import main

if __name__ == "__main__":
    main()
