"""One test over the whole mechanism registry: the declared protocol, spec round trips, the
support check, and ``build`` as a drop-in for the CLI's mechanism builder."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from privinfer import invariants as I
from privinfer import mechanisms as M
from privinfer.invariants import Invariant
from privinfer.mechanisms import (
    REGISTRY,
    CanonicalNoiseMechanism,
    CorrelatedGaussian,
    DiscreteGaussian,
    DoubleGeometric,
    ExtendedGaussian,
    ExtendedLaplace,
    Gaussian,
    GaussianCanonicalMechanism,
    GeneralizedGaussian,
    GeneralizedLaplace,
    KNorm,
    Laplace,
    LinearGaussian,
    MechanismOptionError,
    ProjectedGaussian,
    ProjectedLaplace,
    SemiDPGaussian,
    SemiPrivateTwoByTwo,
    TopDownBaseline,
    Tulap,
    TulapMechanism,
    build,
    cli_info,
    cli_names,
    eps_delta_tradeoff,
    from_spec,
    one_way_margins_sensitivity_space,
)
from privinfer.mechanisms.base import Mechanism

_B = np.array([[1.0, 0.0, 2.0, 0.5], [0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 1.0]])

#: One small instance per registry name (the test below fails if a registered class has none).
CASES = {
    "gaussian": lambda: Gaussian(4, 1.0, 1e-5, 1.0),
    "laplace": lambda: Laplace(4, scale=1.3),
    "double-geometric": lambda: DoubleGeometric(4, 1.0),
    "discrete-gaussian": lambda: DiscreteGaussian(4, 1.5),
    "generalized-laplace": lambda: GeneralizedLaplace(I.total(4), 1.0, norm="l2", burn_in=5),
    "generalized-gaussian": lambda: GeneralizedGaussian(I.groups(["a", "a", "b", "b", "b"]), 1.5, burn_in=5),
    "projected-gaussian": lambda: ProjectedGaussian(I.margins((2, 3), [(0,), (1,)]), 1.0, 1e-5, 1.0),
    "extended-gaussian": lambda: ExtendedGaussian(I.total(4), 1.0, 1e-5, query=np.eye(4)),
    "projected-laplace": lambda: ProjectedLaplace(I.groups([2, 1, 2, 1]), scale=1.1),
    "extended-laplace": lambda: ExtendedLaplace(I.Invariant([[1.0, 2.0, 0.0, 1.0]]), scale=0.7),
    "correlated-gaussian": lambda: CorrelatedGaussian(_B, I.total(3), 1.0, 1e-5),
    "semi-dp-gaussian": lambda: SemiDPGaussian(one_way_margins_sensitivity_space((2, 3), a=2), 1.0),
    "k-norm": lambda: KNorm(one_way_margins_sensitivity_space((2, 3), a=2), 1.0),
    "linear-gaussian": lambda: LinearGaussian(_B, np.diag([1.0, 2.0, 0.5])),
    "noisy-measurements": lambda: M.NoisyMeasurements([np.eye(4), np.array([[1, 1, 0, 0], [0, 0, 1, 1]])],
                                                      [1.5, 2.0]),
    "topdown-baseline": lambda: TopDownBaseline(I.total(4), "discrete_gaussian", 1.5),
    "tulap": lambda: TulapMechanism(3, 1.0, 0.0),
    "gaussian-canonical": lambda: GaussianCanonicalMechanism(3, 1.0),
    "canonical-noise": lambda: CanonicalNoiseMechanism(3, eps_delta_tradeoff(1.0, 0.0)),
    "semi-private-two-by-two": lambda: SemiPrivateTwoByTwo(Tulap.from_privacy(1.0, 0.0)),
}


def test_every_registered_class_has_a_case_and_every_concrete_class_is_registered():
    assert set(CASES) == set(REGISTRY)
    exported = [getattr(M, name) for name in M.__all__]
    concrete = {c for c in exported if isinstance(c, type) and issubclass(c, Mechanism)
                and not getattr(c, "__abstractmethods__", None)}
    assert concrete == set(REGISTRY.values())
    for name, cls in REGISTRY.items():
        assert cls.spec_name == name


def _inputs(mech, rng, k=3):
    """k confidential inputs: non-negative integer counts for integer mechanisms, reals otherwise."""
    if mech.integer:
        return rng.integers(3, 20, size=(k, mech.n))
    return rng.normal(5.0, 2.0, size=(k, mech.n))


def _off_support(mech, y):
    """A point that is not a possible release: off the invariant, or non-integer."""
    if mech.invariant is not None:
        C = mech.invariant.matrix
        C = C.toarray() if hasattr(C, "toarray") else np.asarray(C)
        return y + 0.25 * C[0]  # a row-space direction: C (y' - x) = 0.25 C C_0^T != 0
    if mech.integer:
        return y + np.eye(mech.m)[0] * 0.5
    return None


@pytest.mark.parametrize("name", sorted(CASES))
def test_registry_protocol(name):
    mech = CASES[name]()
    # declared, not probed
    assert type(mech).spec_name == name
    assert isinstance(mech.n, int) and isinstance(mech.m, int) and mech.n >= 1
    assert isinstance(mech.integer, bool) and isinstance(mech.transparent, bool)
    assert mech.invariant is None or isinstance(mech.invariant, Invariant)
    assert isinstance(mech.logp_constant_dropped, str)
    assert mech.augmentation is None or mech.augmentation.dim >= 1
    assert mech.requires_augmentation == (mech.augmentation is not None)

    # spec round trip through JSON
    spec = mech.spec()
    text = json.dumps(spec)
    again = from_spec(json.loads(text))
    assert type(again) is type(mech)
    assert again.spec() == json.loads(text)

    rng = np.random.default_rng(20240611)
    x = _inputs(mech, rng)
    y = mech.release(x, rng=7)
    # the rebuilt mechanism is the same mechanism: same draws from the same seed ...
    np.testing.assert_array_equal(again.release(x, rng=7), y)
    # ... and the same likelihood at releases of other inputs
    if mech.transparent:
        for seed in (1, 2):
            x2 = _inputs(mech, np.random.default_rng(seed))
            y2 = mech.release(x2, rng=seed)
            a, b = mech.logp(y2, x2), again.logp(y2, x2)
            assert np.all(np.isfinite(a))
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=0)

    # support: every release is in it; a point off the invariant / non-integer is not
    assert np.all(mech.in_support(y, x))
    assert mech.in_support(y[0], x[0]) is True
    y_nan = np.array(y[0], dtype=float)
    y_nan[0] = np.nan
    assert mech.in_support(y_nan, x[0]) is False
    off = _off_support(mech, np.asarray(y[0], dtype=float))
    if off is not None:
        assert mech.in_support(off, x[0]) is False
        if mech.transparent:
            assert mech.logp(off, x[0]) == -np.inf
    if mech.transparent:
        assert np.all(np.isfinite(mech.logp(y, x)))
    else:
        with pytest.raises(NotImplementedError):
            mech.logp(y, x)


def test_in_support_checks_shapes():
    mech = LinearGaussian(_B, 1.0)
    with pytest.raises(ValueError, match=r"y must have shape \(\.\.\., 3\)"):
        mech.in_support(np.zeros(4), np.zeros(4))
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 4\)"):
        mech.in_support(np.zeros(3), np.zeros(3))
    assert mech.in_support(np.zeros((2, 3)), np.zeros(4)).tolist() == [True, True]


def test_integer_invariant_support_is_exact():
    # integer mechanisms test C e = 0 exactly: a release of large counts moved by one unit
    # along a row of C is off the support, however large the counts
    mech = GeneralizedLaplace(I.total(3), 1.0, burn_in=5)
    x = np.array([10**12, 3, 4])
    y = x + np.array([2, -1, -1])
    assert mech.in_support(y, x) is True
    assert mech.in_support(y + np.array([1, 0, 0]), x) is False
    assert mech.logp(y + np.array([1, 0, 0]), x) == -np.inf


def test_extra_noise_support_hook():
    class RangeGaussian(Gaussian):
        """Noise restricted to the range of (1, 1, 0, 0): an extra support condition."""

        def extra_noise_support(self, e, scale, xp):
            return np.abs(e[..., 0] - e[..., 1]) + np.abs(e[..., 2]) + np.abs(e[..., 3]) <= 1e-9 * scale

    mech = RangeGaussian(4, sigma=1.0)
    assert mech.in_support(np.array([1.0, 1.0, 0.0, 0.0]), np.zeros(4)) is True
    assert mech.in_support(np.array([1.0, 1.0, 0.5, 0.0]), np.zeros(4)) is False
    # a class outside the registry has no spec
    with pytest.raises(TypeError, match="not a registered mechanism class"):
        mech.spec()


def test_spec_names_the_argument_it_cannot_serialize():
    from privinfer.lattice import PairMoves

    inv = I.total(4)
    mech = GeneralizedLaplace(inv, 1.0, burn_in=5, moves=PairMoves(np.zeros(4, dtype=np.int64)))
    with pytest.raises(TypeError, match="argument 'moves'"):
        mech.spec()


def test_spec_carries_the_invariant_and_its_values():
    inv = I.groups(["b", "a", "b"], t=[4.0, 10.0])
    mech = ProjectedGaussian(inv, sigma=2.0)
    spec = mech.spec()
    assert spec["invariant"] == {"kind": "groups", "labels": ["b", "a", "b"], "t": [4.0, 10.0]}
    assert spec["parameters"]["invariant"] == {"$ref": "invariant"}
    again = from_spec(json.loads(json.dumps(spec)))
    np.testing.assert_array_equal(again.invariant.t, [4.0, 10.0])
    # exact rationals travel exactly
    dg = DoubleGeometric(3, scale=pytest.importorskip("fractions").Fraction(7, 3))
    assert dg.spec()["parameters"]["scale"] == {"$fraction": [7, 3]}
    assert from_spec(dg.spec()).scale == dg.scale


def test_from_spec_rejects_bad_specs():
    with pytest.raises(ValueError, match="unknown mechanism 'nope'"):
        from_spec({"mechanism": "nope", "parameters": {}, "invariant": None})
    with pytest.raises(ValueError, match="mapping"):
        from_spec(["projected-gaussian"])
    spec = ProjectedGaussian(I.total(3), sigma=1.0).spec()
    with pytest.raises(ValueError, match="refers to its invariant but has none"):
        from_spec(dict(spec, invariant=None))


def test_augmentation_replaces_the_old_attributes():
    mech = ProjectedLaplace(I.Invariant([[1.0, 1, 0, 0], [0, 0, 1, 1]]), scale=1.0)
    aug = mech.augmentation
    assert aug.dim == 2 and mech.augmentation_dim == 2 and mech.requires_augmentation
    r = np.array([0.2, -0.4])
    y = np.array([1.0, -1.0, 0.5, -0.5])
    assert aug.logp(y, np.zeros(4), r) == mech.augmented_logp(y, np.zeros(4), r)
    assert ProjectedGaussian(I.total(3), sigma=1.0).augmentation is None
    with pytest.raises(AttributeError):
        mech.augmentation_dim = 3


# ---------------------------------------------------------------------------------------------
# build by CLI name: a drop-in for workflow.codec.build_mechanism
# ---------------------------------------------------------------------------------------------
def test_cli_names_and_info_match_the_cli_table():
    from privinfer.workflow.codec import MECHANISMS

    assert cli_names() == list(MECHANISMS)
    for name, info in MECHANISMS.items():
        mine = cli_info(name)
        assert (mine.integer, mine.invariant, mine.params, mine.transparent) == \
            (info.integer, info.invariant, info.params, info.transparent)
        assert mine.needs_invariant == (info.invariant == "required")
    with pytest.raises(MechanismOptionError, match="unknown mechanism 'x'"):
        cli_info("x")


_VALUES = {"epsilon": 1.0, "delta": 1e-5, "sigma": 1.5, "sensitivity": 2.0, "norm": "l2"}


def _outcome(fn, *args, **kw):
    try:
        return "ok", fn(*args, **kw).spec()
    except ValueError as exc:
        return "error", str(exc)


@pytest.mark.parametrize("name", ["unknown-name"] + list(cli_names()))
def test_build_is_a_drop_in_for_build_mechanism(name):
    from privinfer.workflow.codec import build_mechanism

    n = 4
    for invariant in (None, I.total(n)):
        for k in range(len(_VALUES) + 1):
            for keys in itertools.combinations(_VALUES, k):
                opts = {key: _VALUES[key] for key in keys}
                want = _outcome(build_mechanism, name, invariant, n, **opts)
                got = _outcome(build, name, invariant, n, **opts)
                assert got == want, (name, invariant, opts)
    # an option error is one line and a MechanismOptionError
    with pytest.raises(MechanismOptionError) as info:
        build("projected-laplace", I.total(n), n, delta=0.1)
    assert "\n" not in str(info.value)
    # a non-integer sensitivity for an integer mechanism
    with pytest.raises(MechanismOptionError, match="positive integer"):
        build("double-geometric", None, n, epsilon=1.0, sensitivity=1.5)
