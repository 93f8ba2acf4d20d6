"""avtrain's sample order in Python (src/data/sampler.cpp, src/data/balanced_weights.cpp,
src/core/keyed_random.hpp), so that a peer trains on the samples avtrain trains on, step by step:
the train/validation split keyed by (seed, "validation-split"), each epoch a shuffle of the training
split keyed by (seed, epoch) (data.sampling uniform) or draws with replacement by AST's class-balanced
weights (balanced), and a step's global batch cut into micro-batches of train.micro_batch in order.

Checked where it is used: a peer fed other samples than avtrain's parts from it at the first step,
which avtrain-reconcile's first-steps check (1e-6) catches (test e2e_torch_peer_reconciles_with_avtrain).
"""
import bisect

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def fnv1a(name):
    h = 1469598103934665603
    for c in name.encode():
        h = ((h ^ c) * 1099511628211) & MASK
    return h


class KeyedRandom:
    """splitmix64 over a key: (seed, name) or (seed, a, b), as avtrain's KeyedRandom."""

    def __init__(self, seed, a, b=0):
        if isinstance(a, str):
            self.state = mix64(seed & MASK) ^ fnv1a(a)
        else:
            self.state = mix64((seed ^ mix64((a + GOLDEN * (b + 1)) & MASK)) & MASK)

    def next(self):
        self.state = (self.state + GOLDEN) & MASK
        return mix64(self.state)

    def uniform(self):
        return float(self.next() >> 11) * 2.0 ** -53

    def below(self, n):
        limit = MASK - (MASK % n)
        while True:
            r = self.next()
            if r < limit:
                return r % n


def shuffle(values, rng):
    for i in range(len(values), 1, -1):
        j = rng.below(i)
        values[i - 1], values[j] = values[j], values[i - 1]


def balanced_weights(label_sets, classes):
    """AST's weights: class c weighs 1000 / (n_c + 0.01), a sample the sum over its set (in class order)."""
    count = [0.0] * classes
    for s in label_sets:
        for c in s:
            count[c] += 1
    class_weight = [1000.0 / (n + 0.01) for n in count]
    weights = []
    for s in label_sets:
        w = 0.0
        for c in s:
            w += class_weight[c]
        weights.append(w)
    return weights


def round_half_away(x):
    return int(x + 0.5) if x >= 0 else -int(-x + 0.5)


class Sampler:
    def __init__(self, total, val_fraction, seed, global_batch):
        all_ = list(range(total))
        shuffle(all_, KeyedRandom(seed, "validation-split"))
        n_val = round_half_away(val_fraction * total)  # std::llround
        self.validation = sorted(all_[:n_val])
        self.train = sorted(all_[n_val:])
        self.seed, self.global_batch = seed, global_batch
        self.steps_per_epoch = len(self.train) // global_batch
        if self.steps_per_epoch < 1:
            raise ValueError(f"the training split has {len(self.train)} samples, fewer than one global batch "
                             f"of {global_batch}")
        self.cumulative = None
        self.order, self.order_epoch = None, -1

    def draw_by_weight(self, weights):
        total, self.cumulative = 0.0, []
        for w in weights:
            total += w
            self.cumulative.append(total)
        self.order_epoch = -1

    def epoch_of(self, step):
        return step // self.steps_per_epoch

    def batch(self, step):
        epoch = self.epoch_of(step)
        if epoch != self.order_epoch:
            if self.cumulative is None:
                self.order = list(self.train)
                shuffle(self.order, KeyedRandom(self.seed, epoch, 0x5EED))
            else:
                rng = KeyedRandom(self.seed, epoch, 0xBA1A)
                top = self.cumulative[-1]
                self.order = []
                for _ in range(self.steps_per_epoch * self.global_batch):
                    u = 0.0 + (top - 0.0) * rng.uniform()
                    at = bisect.bisect_right(self.cumulative, u)
                    self.order.append(self.train[min(at, len(self.train) - 1)])
            self.order_epoch = epoch
        begin = (step % self.steps_per_epoch) * self.global_batch
        return self.order[begin:begin + self.global_batch]
