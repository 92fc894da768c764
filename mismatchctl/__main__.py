"""``python -m mismatchctl``."""

from mismatchctl.cli.main import run

if __name__ == "__main__":
    run()
