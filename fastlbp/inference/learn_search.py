"""How EM searches for the posterior's maximum (a mixin of `fastlbp.inference.learn.Learner`): Anderson-
accelerated EM chains as generators of the points to evaluate (`_em_chain`), several advanced together
with one batched E-step a round (`_drive`; EM from several starts: `_best_start`), and Newton steps with
the observed information once EM stalls (`_newton`). `Learner.run` describes the whole.
"""

from __future__ import annotations

import math

import numpy as np

from fastlbp.inference.learn_model import EPS, sigmoid

# Anderson acceleration's memory (EM steps whose secants it combines): a few slow directions dominate
# EM where labels leave much unobserved (weblech's 16 rules from 11 alarm labels).
ANDERSON_MEMORY = 5
# A sampled E-step's run converges when no rule's step exceeds this fraction of its Monte Carlo standard
# error (steps below the noise move p by less than the sampler can tell apart).
NOISE_FRACTION = 0.25
# EM (accelerated) hands over to Newton steps on the posterior, with the observed information the run
# computes anyway, once its largest residual has not halved in this many E-steps: on weblech's alarm
# labels Anderson-accelerated EM with a sampled E-step crawled at residuals of 3-6e-3 from its 8th
# E-step on (rules the labels barely inform; the map's steps are rough where worlds change with p).
STALLED = 4
NEWTON_STEPS = 4  # Newton steps at most (one E-step each), with the information of the first point
# Newton steps converge when no rule moves by more than this many Monte Carlo standard errors of the
# posterior's maximum (`Learner.map_noise`): in directions the labels barely inform, the sampler's error
# in the gradient moves the maximum by far more than one EM step's error, and Newton's steps from there
# on are that noise (weblech: steps of 1.2-2.6 errors, 0.02-0.03 in p, after the first).
MAP_NOISE_Z = 3.0
# EM from several starts (`Learner._best_start`, exact E-steps, `LearnOptions.starts`): the random starts'
# logit spread (0.5 to 0.98 within one standard deviation of 0.5), and the fewest E-steps per start.
START_SPREAD = 2.0
START_STEPS = 10


class Search:
    """EM's searches; the `Learner` it is mixed into gives `options`, `names`, `global_rule`, `a`, `b`,
    `counts_many`, `mstep`, `objective`, `map_noise` and `_last_counts`."""

    def _best_start(self, x: np.ndarray, starts: int, steps: int, seen: list) -> tuple[np.ndarray, int]:
        """Accelerated EM from `starts` points at once (`_start_points`), each until it converges or
        stalls (`STALLED`) or after `steps` E-steps, their E-steps one batch per round (`_drive`).

        Returns (the point where the chain of the highest log posterior got, the rounds run); every
        evaluated point goes to `seen`.

        Why: where the labels reach a rule only through others, the log posterior has long flat ridges
        and EM crawls along them to wherever its start leads (taint family, avrora size, 5 graphs: EM
        from the stated 0.999s, from 0.5 and from 4 random points stopped 0.7 nats apart with one rule
        between 0.92 and 0.999, the truth 0.999); the best of several starts is a better maximum, and
        the points they pass show how far the ridge goes (`hull`).
        """
        num_r = len(self.names)
        rounds = 0
        value: dict[bytes, float] = {}

        def evaluate_many(points):
            nonlocal rounds
            rounds += 1
            fired, body, log_ev = self.counts_many(points)
            replies = []
            for k, point in enumerate(points):
                obj = self.objective(float(log_ev[k]), point)
                value[point.tobytes()] = obj
                seen.append((point.copy(), obj))
                replies.append((self.mstep(fired[k], body[k]), obj, fired[k], body[k], np.zeros(num_r)))
            return replies

        chains = [self._em_chain(point, steps, np.zeros(num_r), stop_when_stalled=True)
                  for point in self._start_points(x, starts)]
        ends = self._drive(chains, evaluate_many)
        best = max((e for e in ends if e[2] is not None), key=lambda e: value[e[2][0].tobytes()])
        return best[0], rounds

    def _start_points(self, x: np.ndarray, starts: int) -> list[np.ndarray]:
        """`starts` points to run EM from: `x`, every rule at 0.5, then random ones (logit normal with
        standard deviation `START_SPREAD`, seeded by `settings.seed`); rules without clauses stay at x."""
        rng = np.random.default_rng(self.options.settings.seed)
        used = np.zeros(len(self.names), bool)
        for rules in self.global_rule:
            used[np.unique(rules)] = True
        points = [np.array(x, np.float64)]
        while len(points) < starts:
            other = (np.full(x.size, 0.5) if len(points) == 1
                     else sigmoid(rng.normal(0.0, START_SPREAD, x.size)))
            points.append(np.clip(np.where(used, other, x), EPS, 1 - EPS))
        return points

    def _em(self, x: np.ndarray, evaluate, most: int, count, settled: np.ndarray, stop_when_stalled: bool
            ) -> tuple[np.ndarray, bool, tuple | None]:
        """EM steps (Anderson-accelerated with `options.accelerate`) from `x` until converged, `most`
        E-steps in all (`count()` says how many ran), or, with `stop_when_stalled`, the largest
        residual has not halved in `STALLED` E-steps (`run` describes the safeguards); `evaluate(p)`
        returns (EM's image G(p), objective) and leaves the counts in `_last_counts`, `_last_noise`.

        Returns:
            (p: EM's last image where converged, else the next point to evaluate or the stalled
            point; converged; (point, F, B) of the last E-step, or None if none ran).
        """
        chain = self._em_chain(x, most - count(), settled, stop_when_stalled)
        try:
            point = next(chain)
            while True:
                g, obj = evaluate(point)
                point = chain.send((g, obj, *self._last_counts, self._last_noise))
        except StopIteration as done:
            return done.value

    def _em_chain(self, x: np.ndarray, most: int, settled: np.ndarray, stop_when_stalled: bool,
                  held: np.ndarray | None = None):
        """`_em` as a generator of the points to evaluate, sent back (G(p), objective, F, B, noise) for
        each: several chains (EM from several starts) advance together, their E-steps one batch
        (`_drive`). Converged: no rule's residual above `tol`, `NOISE_FRACTION` of its Monte Carlo
        standard error (sampled E-steps) or `settled` (R,). `held` (R,) bool: rules kept where they are
        (the profile's). Returns what `_em` does."""
        opts = self.options
        dx: list[np.ndarray] = []  # differences of the residuals f and of the images g, oldest first
        dg: list[np.ndarray] = []
        last = None  # (x, g, f, objective) of the last accepted point
        extrapolated = False  # x is Anderson's point, not plain EM's G(last x)
        best, since = math.inf, 0  # the smallest residual yet, E-steps since it last halved
        at = None
        evaluated = 0
        while evaluated < most:
            g, obj, fired, body, noise = yield x
            if held is not None:
                g = np.where(held, x, g)
            evaluated += 1
            at = (x, fired, body)
            f = g - x
            fell = not math.isnan(obj) and last is not None and obj < last[3] - 1e-12 * abs(last[3])
            if extrapolated and (np.linalg.norm(f) > 2 * np.linalg.norm(last[2]) or fell):
                # The extrapolation lost ground: plain EM's step from the last point, memory restarted.
                dx.clear()
                dg.clear()
                x, last, extrapolated = last[1], None, False
                continue
            if np.all(np.abs(f) <= np.maximum(np.maximum(opts.tol, NOISE_FRACTION * noise), settled)):
                return g, True, at
            size = float(np.max(np.abs(f)))
            best, since = (size, 0) if size <= best / 2 else (best, since + 1)
            if stop_when_stalled and since >= STALLED:
                return x, False, at
            if last is not None and opts.accelerate:
                dx.append(f - last[2])
                dg.append(g - last[1])
                del dx[:-ANDERSON_MEMORY], dg[:-ANDERSON_MEMORY]
            last = (x, g, f, obj)
            x, extrapolated = g, bool(dx)
            if dx:
                gamma = np.linalg.lstsq(np.stack(dx, axis=1), f, rcond=1e-10)[0]
                x = np.clip(g - np.stack(dg, axis=1) @ gamma, EPS, 1 - EPS)
        return x, False, at

    def _drive(self, chains: list, evaluate_many) -> list:
        """Advances generators of points (`_em_chain`, the profile's bounds) together: each round the
        points of those still running go to `evaluate_many` ((B, R) -> a list of B replies) as one
        batch. Returns each generator's return value."""
        results: list = [None] * len(chains)
        points: dict[int, np.ndarray] = {}
        for i, chain in enumerate(chains):
            try:
                points[i] = next(chain)
            except StopIteration as done:
                results[i] = done.value
        while points:
            order = list(points)
            replies = evaluate_many(np.stack([points[i] for i in order]))
            points = {}
            for i, reply in zip(order, replies, strict=True):
                try:
                    points[i] = chains[i].send(reply)
                except StopIteration as done:
                    results[i] = done.value
        return results

    def _newton(self, x: np.ndarray, fired: np.ndarray, body: np.ndarray, cov: np.ndarray, used: np.ndarray,
                evaluate, most: int, settled: np.ndarray | float = 0.0) -> tuple[np.ndarray, bool]:
        """Newton steps on log P(L) + log prior in logit p from `x` (F, B its E-step's counts), with the
        posterior covariance `cov` at `x` (`covariance`) kept as the inverse Hessian: the gradient is
        the score F - p B plus the prior's a - (a + b) p (`score`). Each step is one E-step
        (`evaluate`), at most 1 in logit per rule; converged as EM is (`run`). Returns (p, converged)."""
        for _ in range(min(NEWTON_STEPS, most)):
            grad = np.where(used, fired - x * body + self.a - (self.a + self.b) * x, 0.0)
            step = np.clip(cov @ grad, -1.0, 1.0)
            logit = np.log(x) - np.log1p(-x)
            new = sigmoid(logit + step)
            evaluate(new)
            moved = np.abs(new - x)
            x = new
            fired, body = self._last_counts
            if np.all(moved <= np.maximum(np.maximum(self.options.tol, MAP_NOISE_Z * self.map_noise(x, cov)),
                                          settled)):
                return x, True
        return x, False


__all__ = ["Search", "ANDERSON_MEMORY", "NOISE_FRACTION", "STALLED", "NEWTON_STEPS", "MAP_NOISE_Z",
           "START_SPREAD", "START_STEPS"]
