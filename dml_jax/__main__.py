"""``python -m dml_jax``: the dml-jax command line."""

import sys

from .cli import main

sys.exit(main())
