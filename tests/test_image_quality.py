"Tests of vlbias_nb.image_quality: Fréchet distance, SSIM, person/face criteria (GAB §4.3)."
import numpy as np, pytest
from hypothesis import given, settings, strategies as st
from vlbias_nb.image_quality import frechet_distance, fid_from_features, ssim, passes_quality, person_share, mean_pairwise

def test_fid_brute_force_diagonal():
    rng = np.random.default_rng(0)
    v1, v2 = rng.random(6) + 0.1, rng.random(6) + 0.1
    m1, m2 = rng.normal(size=6), rng.normal(size=6)
    ref = ((m1 - m2) ** 2).sum() + ((np.sqrt(v1) - np.sqrt(v2)) ** 2).sum()
    assert np.isclose(frechet_distance(m1, np.diag(v1), m2, np.diag(v2)), ref)

def test_fid_symmetric_nonnegative():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(100, 4)), rng.normal(size=(80, 4)) @ rng.normal(size=(4, 4)) + 1
    assert np.isclose(fid_from_features(a, b), fid_from_features(b, a), rtol=1e-6) and fid_from_features(a, b) > 0

@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000))
def test_ssim_self_is_one_and_symmetric(seed):
    rng = np.random.default_rng(seed)
    x, y = rng.random((16, 16)), rng.random((16, 16))
    assert np.isclose(ssim(x, x), 1.0) and np.isclose(ssim(x, y), ssim(y, x))

def test_person_rule():
    assert person_share([]) == 0.0
    assert passes_quality(["person", "person", "dog"], 2) and not passes_quality(["dog"], 1)
    assert mean_pairwise([0, 1], lambda a, b: a + b) == 1
    with pytest.raises(ValueError, match="same shape"): ssim(np.zeros((4, 4)), np.zeros((5, 5)))
