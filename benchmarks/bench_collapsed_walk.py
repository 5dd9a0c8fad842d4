r"""One small tract's walk with its cells collapsed, against the alternation of walk and cells.

Why.  On all Kentucky tracts the slowest cells of ``privinfer.census.hierarchy_model`` are in
the smallest tracts (``unit_convergence``): with everything but the tract's walk and cells held,
the 780-person tract 21111008800's people aged 65+ reach a bulk ESS of 11-27 in 220 draws.  This
benchmark measures, on that tract's conditional law, how much of that is the alternation itself
-- walk given cells, cells given walk, the data-augmentation Gibbs sampler, however exact each
half -- and what a move of the walk with the cells integrated out gives instead.

The conditional law (one tract, everything else held).  Cells ``x`` (2 sexes x 23 age groups)
with a fixed total ``N`` (the invariant and the other tracts' cells hold it); log profile
``theta = b + A eta``, ``b`` the county's log profile, ``A eta`` the second-order walk over the
ages (slopes per year of age, as in the model, ``A`` the cumulative sums times the age groups'
spacing), ``eta_k ~ N(0, sigma_k^2)``; ``x | N ~ DirMult(N, kappa softmax(theta))``; every cell
measured once, ``y_i = x_i + e_i``, ``e_i`` discrete Gaussian of the model's budget (rho 0.0025,
variance about 200).  Given ``eta`` the cells are independent given their sum (the
Dirichlet-multinomial is a product of per-cell factors ``Gamma(x + alpha)/(x! Gamma(alpha))``
restricted to ``sum x = N``), so ``privinfer.lattice.GroupSumSampler`` (tree forward filtering,
backward sampling) draws them given the walk, up to its tables' truncation, and scores any
state under the same law (``log_q``).

Three samplers, each step exact (a Metropolis--Hastings test on the joint law):

* pair moves: ``eta`` given ``x`` by ``--rounds`` independence moves from the Laplace
  approximation of its exact conditional, then the cells by the model's own cell kernel
  (``measured_pair_sweeps``, ``privinfer.pymc.measured.SWEEPS`` sweeps of pair transfers): the
  model's walk moves and cell moves taken one after the other;
* alternation: the same walk moves, then ``x`` given ``eta`` by one block move from the tree
  sampler (the ideal of alternating the two);
* collapsed: ``eta'`` from a multivariate t around the Gauss--Newton mode of the walk's law with
  the cells integrated out in a Gaussian approximation (each cell's Dirichlet-multinomial
  spread plus its measurement's variance), then ``x'`` from the tree sampler given ``eta'``,
  accepted jointly with probability ``min(1, pi(eta', x') t(eta) q(x | eta) / (pi(eta, x)
  t(eta') q(x' | eta')))``.  With the tree sampler exact this is the Metropolis--Hastings test
  of the walk's marginal law (the cells integrated out exactly), and the truncation only lowers
  the acceptance: exact whatever the approximations.

Printed: acceptance, the bulk ESS of the tract's people aged 65+ and of its people under 18 per
iteration, the time per iteration, the ratios to the pair moves, and each sampler's posterior mean
of the people 65+ with its Monte Carlo standard error (all three target the same law, so the means
agree within a few standard errors).  The prior's scales and
``kappa`` are fixed (``--kappa``, default 150; the walk's scales 0.02 per year below age 35 and
0.004 above); the release is drawn afresh (``--seed``).

Measured (1,000 iterations each, seed 1; times of runs alone or two side by side on 2 cores):

============================  ==========  ================================  =========================
tract (people, share 65+)     sampler     bulk ESS per iteration, 65+ / <18  time per iteration
============================  ==========  ================================  =========================
21111008800 (780, 0.032)      pairs       0.111 / 0.200                      5.7 ms
(the slowest of all tracts)   alternation 0.241 / 0.330                      9.4 ms
                              collapsed   0.438 / 0.302 (3.9x / 1.5x)        6.7 ms (acceptance 0.56)
21111006400 (801, 0.272)      pairs       0.182 / 0.229                      11.3 ms
                              alternation 0.284 / 0.275                      16.6 ms
                              collapsed   0.395 / 0.371 (2.2x / 1.6x)        11.0 ms (acceptance 0.55)
21057000200 (3,870, 0.196)    pairs       0.895 / 0.824                      8.7 ms
(the median tract)            alternation 0.808 / 0.940                      15.1 ms
                              collapsed   0.412 / 0.320 (0.5x / 0.4x)        10.9 ms (acceptance 0.55)
============================  ==========  ================================  =========================

(The first tract's run of 400 iterations gave the alternation 0.110 and the collapsed move
0.433 for the people 65+: at this length the ESS per iteration of one run is good to about
+-30%.)  So the alternation of walk and cells is what is slow in the smallest tracts: there,
integrating the cells out multiplies the ESS of the slowest direction by 2-4 at the same cost.
In a tract of median size the cells pin the walk down, the alternation is nearly independent
already, and an independence move (acceptance 0.55) is worse: a collapsed move belongs beside
the others for the small tracts only; ``WalkGibbs`` makes it so, for pairs of sibling tracts
(``privinfer.pymc.walk_collapse``, ``privinfer.pymc.walk.COLLAPSE_SMALL``).  Its ceiling is its acceptance: a t proposal at the exact
collapsed mode and curvature (finite differences of the tree's normalizer, 370 s, not usable per
iteration) gave acceptance 0.59 and 0.72 per iteration on another release of the first tract.

Run: ``python benchmarks/bench_collapsed_walk.py [--tract 21111008800] [--iters 400]``
"""

from __future__ import annotations

import argparse
import time

import arviz as az
import numpy as np
import scipy.sparse as sp
from scipy.special import digamma, gammaln, logsumexp, polygamma

from privinfer.census import AGE_GROUPS, synthetic_tracts
from privinfer.census.ages import category_midpoints
from privinfer.lattice import GroupSumSampler, GroupTree, MeasuredPairs, measured_pair_sweeps, unimodal_windows
from privinfer.lattice.laws import discrete_gaussian_variance, sample_discrete_gaussian
from privinfer.pymc.measured import SWEEPS
from privinfer.pymc.walk_kernel import walk_offsets

from bench_hierarchy_model import OLD, YOUNG  # the age groups 65+ and under 18 of the hierarchy benchmark

NU = 8.0


class TractLaw:
    """The conditional law of one tract's walk ``eta`` and cells ``x`` (module docstring)."""

    def __init__(self, b, A, sigma, kappa, N, y, var):
        self.b, self.A, self.sigma, self.kappa, self.N = b, A, sigma, kappa, int(N)
        self.y, self.P = np.asarray(y, float), 1.0 / var
        self.tree = GroupTree(np.zeros(b.size, dtype=np.int64))
        self.tilt = np.log(self.N / (self.N + kappa))

    def profile(self, eta):
        """The cells' shares ``p = softmax(b + A eta)`` and their Jacobian ``dp / d eta``."""
        th = self.b + self.A @ eta
        p = np.exp(th - logsumexp(th))
        return p, p[:, None] * self.A - np.outer(p, p @ self.A)

    def alpha(self, eta):
        return self.kappa * self.profile(eta)[0]

    def log_joint(self, eta, x):
        a = self.alpha(eta)
        return (-0.5 * np.sum((eta / self.sigma) ** 2) + np.sum(gammaln(x + a) - gammaln(a) - gammaln(x + 1))
                - 0.5 * np.sum(self.P * (x - self.y) ** 2))

    def cells_sampler(self, eta):
        """The tree sampler of the cells given ``eta`` and their sum (tilted so that each cell's
        window sits where the sum puts it; the tilt is constant given the sum)."""
        a = self.alpha(eta)

        def logp(idx, v):
            v = np.asarray(v, dtype=float)
            return (gammaln(v + a[idx]) - gammaln(v + 1) - 0.5 * self.P * (v - self.y[idx]) ** 2 + v * self.tilt)

        lo, hi, _, _ = unimodal_windows(logp, a.size, lower=0, upper=self.N)
        return GroupSumSampler(self.tree, logp, lo, hi)

    def collapsed_mode(self, iters: int = 12):
        """Gauss--Newton mode and precision of the walk's law with the cells integrated out in
        a Gaussian approximation: ``y_i ~ N(N p_i, N p_i (1 - p_i) (N + kappa)/(1 + kappa) + 1/P_i)``
        (from ``eta = 0``: a function of the held parameters and the data alone)."""
        eta = np.zeros(self.A.shape[1])
        N, k = self.N, self.kappa
        prec0 = np.diag(1.0 / self.sigma**2)
        for _ in range(iters):
            p, dp = self.profile(eta)
            mu = N * p
            T = N * p * (1 - p) * (N + k) / (1 + k) + 1.0 / self.P
            J = N * dp
            H = prec0 + J.T @ (J / T[:, None])
            G = -prec0 @ eta + J.T @ ((self.y - mu) / T)
            step = np.linalg.solve(H, G)
            eta = eta + step
            if np.max(np.abs(step)) < 1e-10:
                break
        return eta, H

    def cond_mode(self, eta, x, iters: int = 20):
        """Newton mode and precision of ``eta`` given the cells ``x`` (exact derivatives of the
        Dirichlet-multinomial in the log profile; Fisher-scored curvature)."""
        prec0 = np.diag(1.0 / self.sigma**2)
        k = self.kappa
        for _ in range(iters):
            p, dp = self.profile(eta)
            a = k * p
            g = digamma(x + a) - digamma(a)                      # d/d alpha
            Jt = k * dp                                          # d alpha / d eta
            G = -prec0 @ eta + Jt.T @ g
            h = polygamma(1, x + a) - polygamma(1, a)             # d2/d alpha2 (<= 0)
            H = prec0 + Jt.T @ (-h[:, None] * Jt)
            step = np.linalg.solve(H, G)
            eta = eta + step
            if np.max(np.abs(step)) < 1e-10:
                break
        return eta, H


def t_draw(rng, mu, L):
    z = rng.standard_normal(mu.size) / np.sqrt(rng.chisquare(NU) / NU)
    return mu + np.linalg.solve(L.T, z)


def t_logpdf(v, mu, L):
    z = L.T @ (v - mu)
    return -0.5 * (NU + mu.size) * np.log1p(z @ z / NU) + np.sum(np.log(np.diag(L)))


def cells_move(rng, law, eta, x):
    """One exact block move of the cells given ``eta`` (independence proposal from the tree
    sampler, Metropolis--Hastings test)."""
    s = law.cells_sampler(eta)
    xp, lqp, ok = s.sample(rng, np.array([law.N]))
    if not ok[0]:
        return x, False
    lq = s.log_q(x)[0]
    if np.log(rng.random()) < law.log_joint(eta, xp) - law.log_joint(eta, x) + lq - lqp[0]:
        return xp, True
    return x, False


def alternation(rng, law, eta, x, iters, rounds, pairs=None, sweeps=SWEEPS):
    """Walk given cells, then cells given walk: by one exact block move, or (``pairs``) by the
    model's pair moves of the cells (``sweeps`` sweeps of ``measured_pair_sweeps``)."""
    out, acc, tries = [], 0, 0
    x = x.copy()
    for _ in range(iters):
        for _ in range(rounds):
            mu, H = law.cond_mode(eta, x)
            L = np.linalg.cholesky(H)
            ep = t_draw(rng, mu, L)
            tries += 1
            if np.log(rng.random()) < (law.log_joint(ep, x) - law.log_joint(eta, x) + t_logpdf(eta, mu, L)
                                       - t_logpdf(ep, mu, L)):
                eta, acc = ep, acc + 1
        if pairs is None:
            x, _ = cells_move(rng, law, eta, x)
        else:
            x, _, _ = measured_pair_sweeps(rng, x, law.y, pairs, alpha=law.alpha(eta), sweeps=sweeps)
        out.append(x.copy())
    return np.array(out), acc / tries


def collapsed(rng, law, eta, x, iters):
    """The collapsed move (module docstring).  The proposal and the current state's tree sampler
    are rebuilt every iteration although nothing else moves here: in the model the held
    parameters and the other cells change between iterations, so this is the move's real cost."""
    out, acc = [], 0
    for _ in range(iters):
        mu, H = law.collapsed_mode()
        L = np.linalg.cholesky(H)
        ep = t_draw(rng, mu, L)
        sampler = law.cells_sampler(ep)
        xp, lqp, ok = sampler.sample(rng, np.array([law.N]))
        if ok[0]:
            lq = law.cells_sampler(eta).log_q(x)[0]
            log_r = (law.log_joint(ep, xp) - law.log_joint(eta, x) + t_logpdf(eta, mu, L) - t_logpdf(ep, mu, L)
                     + lq - lqp[0])
            if np.log(rng.random()) < log_r:
                eta, x, acc = ep, xp, acc + 1
        out.append(x.copy())
    return np.array(out), acc / iters


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tract", default="21111008800")
    ap.add_argument("--iters", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3, help="walk moves per iteration of the alternation")
    ap.add_argument("--kappa", type=float, default=150.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)

    frame = synthetic_tracts("KY", rng=7)
    cells = frame[frame["tract"] == args.tract]
    if cells.empty:
        raise SystemExit(f"no tract {args.tract!r} in the synthetic Kentucky tracts")
    county = frame[frame["county"] == cells["county"].iloc[0]]
    prof = county.groupby(["sex", "age"], observed=True)["count"].sum().to_numpy(dtype=float)
    x_true = cells["count"].to_numpy(dtype=np.int64)
    N = int(x_true.sum())
    ages = cells["age"].astype(str).to_numpy()
    old, young = np.isin(ages, OLD), np.isin(ages, YOUNG)

    mids = category_midpoints(AGE_GROUPS)
    K = len(AGE_GROUPS)
    # the model's second-order walk (walk_kernel.walk_offsets) as a matrix: column c the cells'
    # offsets from a unit increment c
    code = cells["age"].cat.codes.to_numpy()  # the frame's age groups are ordered categoricals (P12 order)
    A = walk_offsets(np.eye(K - 1), code, order=2, spacing=np.diff(mids)).T
    sigma = np.where(mids[1:] < 35, 0.02, 0.004)
    s = 1.0 / np.sqrt(2 * 0.0025)
    y = x_true + sample_discrete_gaussian(s, size=x_true.size, rng=rng)
    law = TractLaw(np.log(prof / prof.sum()), A, sigma, args.kappa, N, y, discrete_gaussian_variance(s))
    print(f"tract {args.tract}: {N} people, {x_true[old].sum()} aged 65+ ({x_true[old].sum() / N:.3f}; county "
          f"{prof[old].sum() / prof.sum():.3f}), {x_true[young].sum()} under 18; kappa {args.kappa:g}, "
          f"{args.iters} iterations each")

    eta0, _ = law.collapsed_mode()
    x0 = law.cells_sampler(eta0).sample(rng, np.array([N]))[0]
    n = x_true.size
    pairs = MeasuredPairs(sp.identity(n, format="csr"), np.full(n, s), [(np.zeros(n, dtype=np.int64), 1.0)],
                          unit=np.zeros(n, dtype=np.int64))
    res = {}
    for name, run in (("pair moves", lambda: alternation(rng, law, eta0, x0, args.iters, args.rounds, pairs)),
                      ("alternation", lambda: alternation(rng, law, eta0, x0, args.iters, args.rounds)),
                      ("collapsed", lambda: collapsed(rng, law, eta0, x0, args.iters))):
        t0 = time.perf_counter()
        draws, acc = run()
        dt = (time.perf_counter() - t0) / args.iters
        n_old, n_young = draws[:, old].sum(axis=1), draws[:, young].sum(axis=1)
        e_old, e_young = float(az.ess(n_old[None])), float(az.ess(n_young[None]))
        res[name] = (e_old / args.iters, e_young / args.iters, dt)
        print(f"{name:12s} acceptance {acc:.2f}; per iteration: bulk ESS of people 65+ {e_old / args.iters:.3f}, "
              f"under 18 {e_young / args.iters:.3f}; {dt * 1e3:.1f} ms; people 65+ mean {n_old.mean():.1f} "
              f"+- {n_old.std() / np.sqrt(e_old):.1f} (Monte Carlo se), sd {n_old.std():.1f}")
    base = res["pair moves"]
    for name in ("alternation", "collapsed"):
        c = res[name]
        print(f"{name} / pair moves: ESS per iteration 65+ {c[0] / base[0]:.1f}x, under 18 {c[1] / base[1]:.1f}x; "
              f"time per iteration {c[2] / base[2]:.2f}x")


if __name__ == "__main__":
    main()
