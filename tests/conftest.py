import os

import numpy as np
import pytest


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A fresh generator per test, seeded from QSA_TEST_SEED or the test's name; the seed is printed."""
    seed = int(os.environ.get("QSA_TEST_SEED", abs(hash(request.node.nodeid)) % 2**31))
    print(f"seed={seed} (rerun with QSA_TEST_SEED={seed})")
    return np.random.default_rng(seed)
