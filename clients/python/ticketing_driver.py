#!/usr/bin/env python3
"""The conformance driver of the Python client, runnable from a checkout:
clients/python/ticketing_driver.py --addrs ... (see ticketing/driver.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ticketing.driver import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
