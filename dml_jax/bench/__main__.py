"""``python -m dml_jax.bench``: the same as ``dml-jax bench``."""

import sys

from . import main

sys.exit(main())
