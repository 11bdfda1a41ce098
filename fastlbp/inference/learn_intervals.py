"""How sure learning is (a mixin of `fastlbp.inference.learn.Learner`): the observed information of the
labels about the rules (`information`, `covariance`), the Monte Carlo error of a sampled maximum
(`map_noise`), the profile posterior's check of each interval (`_profile` and its bounds; exact
E-steps), the intervals widened to the points evaluated near the top (`hull`), and Beta quantiles that
are never NaN (`beta_quantile`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fastlbp.inference.learn_model import sigmoid

# The profile check of the intervals (`Learner._profile`): the 95 % likelihood-ratio drop (chi-square(1)'s
# 0.95 quantile, 3.84, halved), the most tries per bound, the most a try moves a bound (times its logit
# distance from the maximum), and the logit past which a bound is 0 or 1.
PROFILE_DROP = 1.92
PROFILE_TRIES = 5
PROFILE_GROWTH = 4.0
PROFILE_EDGE = 12.0
PROFILE_STEPS = 2  # Newton steps toward the profile's maximum per try, stopped once they gain < PROFILE_GAIN
PROFILE_GAIN = 0.05
# Then accelerated EM steps among the others at most, where Newton's still leave the drop over the bound
# (taint family, avrora size: a bound at 0.964 of a rule whose ridge runs flat, within 0.7 nats, to 0.999).
PROFILE_EM_STEPS = 12
# Bisections of a one-sided rule's far bound (`Learner._profile_inward`).
PROFILE_BISECTIONS = 6


class Intervals:
    """The information, the profile check and the Monte Carlo error; the `Learner` it is mixed into gives
    `options`, `names`, `a`, `b`, `counts`, `counts_many`, `mstep`, `objective`, `_em_chain`, `_drive`
    and `_posteriors`."""

    def _profile(self, p: np.ndarray, cov: np.ndarray, lower: np.ndarray, upper: np.ndarray, used: np.ndarray,
                 body: np.ndarray, seen: list | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The Laplace interval's bounds checked against the profile posterior (exact E-steps only: they
        give log P(L)), and moved out where it is flatter.

        At a bound b of rule r the others are maximised from below (`_profile_value`: their conditional
        mode under the Laplace approximation or the maximum's, Newton steps, then EM steps); the drop of the
        log posterior from the maximum must be `PROFILE_DROP` (the 95 % likelihood-ratio bound),
        and where the steps already show less they stop. Where it is less, the
        posterior is flatter than its curvature at the maximum says (a curved ridge: rules that reach
        the alarms only jointly), and the bound moves out by sqrt(PROFILE_DROP / drop) of its logit
        distance (at most `PROFILE_GROWTH`), up to `PROFILE_TRIES` times, to 0 or 1 past
        `PROFILE_EDGE` in logit; where the maximum sits at 0 or 1, the far bound is found by bisection
        instead (`_profile_inward`). The bounds advance together, their E-steps one batch per round
        (`_drive`). Evaluated points go to `seen` (point, log posterior).
        """
        lower, upper = np.array(lower, np.float64), np.array(upper, np.float64)
        seen = [] if seen is None else seen

        num_r = len(self.names)

        def evaluate_many(points):
            fired, body, log_ev = self.counts_many(points)
            replies = []
            for k, point in enumerate(points):
                value = self.objective(float(log_ev[k]), point)
                seen.append((point.copy(), value))
                replies.append((self.mstep(fired[k], body[k]), value, fired[k], body[k], np.zeros(num_r)))
            return replies

        top = evaluate_many(p[None])[0][1]
        top = max(top, *(v for _, v in seen))
        logit = np.log(p) - np.log1p(-p)
        bounds = [(r, side, edge) for r in np.flatnonzero(used)
                  for side, edge in ((lower, 0.0), (upper, 1.0)) if 0.0 < side[r] < 1.0]
        near = [(x, top - v) for x, v in seen if top - v < PROFILE_DROP]
        chains = []
        for r, b, edge in bounds:
            # The evaluated point inside the drop that reaches farthest past the Laplace bound (EM's
            # starts crawl along ridges): the search goes on from there.
            sign = -1.0 if edge == 0.0 else 1.0
            past = [(x, d) for x, d in near if sign * (x[r] - b[r]) > 0]
            anchor = max(past, key=lambda xd: sign * xd[0][r]) if past else None
            chains.append(self._profile_bound(int(r), float(b[r]), edge, p, logit, cov, used, top, body,
                                              anchor))
        for (r, b, _), moved in zip(bounds, self._drive(chains, evaluate_many), strict=True):
            b[r] = moved
        return lower, upper

    def _profile_bound(self, r: int, bound: float, edge: float, p: np.ndarray, logit: np.ndarray,
                       cov: np.ndarray, used: np.ndarray, top: float, body: np.ndarray,
                       anchor: tuple[np.ndarray, float] | None = None):
        """One bound of `_profile` as a generator of the points to evaluate, sent back (EM's image, log
        posterior, F, B, noise) for each; returns the bound, moved out where the profile is flatter,
        or, where the maximum sits against 0 or 1 (`_profile_inward`; `body` (R,) the expected bodies
        held), moved in to where it drops by `PROFILE_DROP`. `anchor`: (an evaluated point past the
        bound, its drop) to go on from: its rule r is the bound, and the next tries start from its
        others (taint family: a ridge whose profile dips past the Laplace bound and rises again, EM's
        starts found points on it 0.997 where the truth is 0.999)."""
        target = math.log(bound) - math.log1p(-bound)
        # Fewer than one expected failure (or firing) of its clauses whose body held: the likelihood only
        # rises toward 1 (or 0), and the maximum sits where the prior's pseudo-counts stop it.
        one_sided = body[r] >= 1.0 and min(p[r], 1 - p[r]) * body[r] < 1.0
        if one_sided and (edge == 0.0) == (p[r] > 0.5):
            return (yield from self._profile_inward(r, target, logit, cov, used, top))
        start = None
        if anchor is not None:
            start, drop = anchor
            bound = float(start[r])
            target = logit[r] + (float(np.log(bound) - np.log1p(-bound)) - logit[r]) * min(
                PROFILE_GROWTH, math.sqrt(PROFILE_DROP / max(drop, PROFILE_DROP / PROFILE_GROWTH**2)))
            if abs(target) >= PROFILE_EDGE:
                return edge
        for _ in range(PROFILE_TRIES):
            drop = top - (yield from self._profile_value(r, target, logit, cov, used, top, start))
            if drop >= PROFILE_DROP:
                break
            grow = PROFILE_GROWTH if drop <= 0 else min(PROFILE_GROWTH, math.sqrt(PROFILE_DROP / drop))
            target = logit[r] + (target - logit[r]) * grow
            if abs(target) >= PROFILE_EDGE:
                return edge
            bound = float(sigmoid(np.array([target]))[0])
        return bound

    def _profile_inward(self, r: int, target: float, logit: np.ndarray, cov: np.ndarray, used: np.ndarray,
                        top: float):
        """The bound of a rule whose maximum sits against 0 or 1, on the side away from it: there the logit's
        curvature vanishes, the Laplace interval is the prior's, and the rule reads "poorly identified"
        however many clauses it has (taint family: 15,616 clauses, learned 1.000, interval [0.368, 1]).
        Bisection in logit between the bound (where the drop must be at least `PROFILE_DROP`) and
        `PROFILE_EDGE` toward the maximum, `PROFILE_BISECTIONS` times; the bound kept is the last point
        known to drop by `PROFILE_DROP` or more (the interval errs wide)."""
        inside = math.copysign(min(abs(logit[r]), PROFILE_EDGE), logit[r])
        outside = target
        if top - (yield from self._profile_value(r, outside, logit, cov, used, top)) < PROFILE_DROP:
            return float(sigmoid(np.array([outside]))[0])  # the prior's bound holds
        for _ in range(PROFILE_BISECTIONS):
            mid = (inside + outside) / 2
            if top - (yield from self._profile_value(r, mid, logit, cov, used, top)) >= PROFILE_DROP:
                outside = mid
            else:
                inside = mid
        return float(sigmoid(np.array([outside]))[0])

    def _profile_value(self, r: int, target: float, logit: np.ndarray, cov: np.ndarray, used: np.ndarray,
                       top: float, start: np.ndarray | None = None):
        """The profile posterior at logit p_r = target, from below (a generator of points, as
        `_profile_bound`): the others at their conditional mode under the Laplace approximation, then
        `PROFILE_STEPS` Newton steps among them with r held (the others' covariance given r, the Schur
        complement, as inverse Hessian; at most 1 in logit), then, where those leave the drop over
        `PROFILE_DROP`, up to `PROFILE_EM_STEPS` accelerated EM steps among them; each stage stops once
        the drop is under the bound; with `start` (R,), the others start from its values instead.
        Returns the best log posterior found."""
        others = used.copy()
        others[r] = False
        schur = cov - np.outer(cov[:, r], cov[r]) / cov[r, r]
        conditional = np.where(np.outer(others, others), schur, 0.0)
        x_logit = logit + cov[:, r] / cov[r, r] * (target - logit[r])
        if start is not None:
            x_logit = np.log(start) - np.log1p(-start)
        x_logit[r] = target
        x_logit[~used] = logit[~used]
        x = sigmoid(x_logit)
        image, value, fired, body, _ = yield x
        # The maximum's others too: on a curved ridge the Laplace approximation's conditional mode can
        # lie off it (taint family: from the maximum's others, with the rule moved from 0.931 to 0.999,
        # 10 EM steps reach 0.19 nats below the top; from the conditional mode 8 steps stayed over 1.92).
        plain = sigmoid(np.where(np.arange(logit.size) == r, target, logit))
        reply = yield plain
        if reply[1] > value:
            x, (image, value, fired, body, _) = plain, reply
        for _ in range(PROFILE_STEPS):
            if top - value < PROFILE_DROP:
                break
            grad = np.where(others, fired - x * body + self.a - (self.a + self.b) * x, 0.0)
            step = np.clip(conditional @ grad, -1.0, 1.0)
            new = sigmoid(np.log(x) - np.log1p(-x) + np.where(others, step, 0.0))
            reply = yield new
            gain = reply[1] - value
            if gain > 0:
                x, (image, value, fired, body, _) = new, reply
            if gain < PROFILE_GAIN:
                break
        if top - value >= PROFILE_DROP:
            # Newton's quadratic model failed (a curved ridge): EM from its image of the best point.
            inner = self._em_chain(np.where(others, image, x), PROFILE_EM_STEPS, np.zeros(x.size), True,
                                   held=~others)
            point = next(inner)
            while top - value >= PROFILE_DROP:
                reply = yield point
                value = max(value, reply[1])
                try:
                    point = inner.send(reply)
                except StopIteration:
                    break
            inner.close()
        return value

    def map_noise(self, probability: np.ndarray, cov: np.ndarray) -> np.ndarray:
        """(R,) the Monte Carlo standard error of the posterior's maximum at `probability`, from the last
        `counts`' sampled E-steps and the posterior covariance `cov` in logit (`covariance`): the
        gradient's error (F_r - p_r B_r, the clauses' errors taken as independent) through the inverse
        Hessian, in p. 0 where no E-step is sampled."""
        var_fired, var_body = getattr(self, "_count_variance", (0.0, 0.0))
        p = np.asarray(probability, np.float64)
        var_grad = np.zeros(p.size) + var_fired + p**2 * var_body
        var_logit = np.einsum("ij,j,ij->i", cov, var_grad, cov)
        return p * (1 - p) * np.sqrt(np.maximum(var_logit, 0.0))

    def score(self, probability: np.ndarray) -> np.ndarray:
        """(R,) d log P(L) / d logit p_r at rule probabilities `probability` (R,): F_r - p_r B_r (Fisher's
        identity: the expected complete-data score under P(. | L))."""
        fired, body, _ = self.counts(probability)
        return fired - probability * body

    def information(self, probability: np.ndarray, used: np.ndarray | None = None) -> np.ndarray:
        """(R, R) observed information of the labels about logit p at `probability` (R,):
        -d^2 log P(L) / d logit p^2, by central differences of `score` (2 E-steps per rule in `used`,
        `options.step` apart, one batch where the E-steps are `batched`; LBP at
        `options.information_tol`), symmetrised. Rows and columns of
        rules not in `used` (no clauses) are 0."""
        p = np.asarray(probability, np.float64)
        num_r = p.size
        used = np.ones(num_r, bool) if used is None else np.asarray(used, bool)
        logit = np.log(p) - np.log1p(-p)
        h = self.options.step
        hess = np.zeros((num_r, num_r))
        sessions = [post.e_step for post in self._posteriors if post is not None and post.row.iterative]
        kept = [s.settings for s in sessions]
        tight = self.options.information_tol
        for s in sessions:
            s.settings = dataclasses.replace(s.settings, tol=min(s.settings.tol, tight))
        rules = np.flatnonzero(used)
        points = np.repeat(logit[None], 2 * rules.size, axis=0)  # up_r0, down_r0, up_r1, ...
        points[2 * np.arange(rules.size), rules] += h
        points[2 * np.arange(rules.size) + 1, rules] -= h
        points = sigmoid(points)
        try:
            fired, body, _ = self.counts_many(points)
            score = fired - points * body
            hess[:, rules] = ((score[0::2] - score[1::2]) / (2 * h)).T
        finally:
            for s, old in zip(sessions, kept, strict=True):
                s.settings = old
        hess[~used] = 0.0
        return -(hess + hess.T) / 2

    def covariance(self, probability: np.ndarray, used: np.ndarray | None = None) -> np.ndarray:
        """(R, R) posterior covariance of logit p at `probability` (the MAP, where the Laplace
        approximation holds): the inverse of the labels' `information` plus the prior's precision
        (a + b) p (1 - p) on the diagonal.

        The information's negative eigenvalues (an approximate E-step's noise, or a MAP not quite
        reached) are raised to 0 first, so no rule's posterior is wider than its prior: a direction
        the labels do not inform keeps the prior's width, and the rules along it are reported as
        poorly identified, never as known.
        """
        p = np.asarray(probability, np.float64)
        used = np.ones(p.size, bool) if used is None else np.asarray(used, bool)
        info = self.information(p, used)
        prior = (self.a + self.b) * p * (1 - p)
        cov = np.diag(1 / prior)
        idx = np.flatnonzero(used)
        if idx.size:
            w, v = np.linalg.eigh(info[np.ix_(idx, idx)])
            precision = (v * np.maximum(w, 0.0)) @ v.T + np.diag(prior[idx])
            cov[np.ix_(idx, idx)] = np.linalg.inv(precision)
        return cov


def hull(seen: list[tuple[np.ndarray, float]], lower: np.ndarray, upper: np.ndarray, used: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """The intervals widened to every evaluated point whose log posterior is within `PROFILE_DROP` of the
    best evaluated: such a point's every coordinate lies inside that rule's 95 % profile interval (the
    profile at it is at least the point's value), wherever the Laplace approximation ends."""
    if not seen:
        return lower, upper
    values = np.array([v for _, v in seen])
    near = np.stack([x for (x, _), ok in zip(seen, values >= values.max() - PROFILE_DROP, strict=True) if ok])
    lower = np.where(used, np.minimum(lower, near.min(axis=0)), lower)
    upper = np.where(used, np.maximum(upper, near.max(axis=0)), upper)
    return lower, upper


def beta_quantile(q: float, a: np.ndarray, b: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """Beta(a, b)'s q-quantile, never NaN: where scipy's is not finite (a + b past about 1e17, or
    infinite where the information vanished), the normal approximation around the mean (`centre`
    where a or b is infinite), inside [0, 1]."""
    from scipy.stats import beta, norm

    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.array(beta.ppf(q, a, b), np.float64, ndmin=1)
    bad = ~np.isfinite(out)
    if np.any(bad):
        a_, b_ = a.reshape(out.shape)[bad], b.reshape(out.shape)[bad]
        n = a_ + b_
        finite = np.isfinite(n) & (n > 0)
        mean = np.where(finite, a_ / np.where(finite, n, 1.0), np.broadcast_to(centre, out.shape)[bad])
        sd = np.where(finite, np.sqrt(mean * (1 - mean) / np.where(finite, n + 1, 1.0)), 0.0)
        out[bad] = np.clip(mean + norm.ppf(q) * sd, 0.0, 1.0)
    return out.reshape(np.shape(a))


__all__ = ["Intervals", "hull", "beta_quantile", "PROFILE_DROP", "PROFILE_TRIES", "PROFILE_GROWTH",
           "PROFILE_EDGE", "PROFILE_STEPS", "PROFILE_GAIN", "PROFILE_EM_STEPS", "PROFILE_BISECTIONS"]
