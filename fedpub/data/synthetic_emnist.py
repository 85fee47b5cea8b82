"""Deterministic synthetic federated handwritten digits, written in TFF's federated EMNIST HDF5 layout.

Each writer draws the ten digits from stroke skeletons (polylines, arcs and Bézier curves) in a personal style:
glyph variants (crossed 7, flagged 1, open 4, ...), a smooth polynomial warp of every digit, slant, rotation,
scale, aspect, offset, stroke width, ink darkness, pixel noise and how often strokes are left short; each example
adds its own jitter. A fraction of "ambiguous" writers warp, jitter and truncate much more. Writers have their own
class mix (Dirichlet) and example count, and every writer's examples are split by example between
``fed_emnist_digitsonly_train.h5`` and ``..._test.h5``, as in TFF. Strokes are rendered with anti-aliased
distance-to-segment ink (vectorised numpy); pixels are float32 in [0, 1] on a 1/255 grid, ink 0.0 and background
1.0 (TFF polarity).

A second spec may generate **public writers** into ``fed_emnist_digitsonly_public.h5`` beside them (every example
of each, ids ``p0000_00``, ...): drawn from their own generator streams, so that they share no writer with the
private population even under the same seed, and typically in another style (more ambiguous writers, more pixel
noise), an off-distribution public pool (``data.public.pool: heldout``, fedpub issue 36).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import h5py
import numpy as np

from fedpub.atomic import atomic_path
from fedpub.data.generated import SPEC_ATTR, ensure_generated
from fedpub.seeding import numpy_generator

NUM_DIGITS = 10
SIZE = 28
# Bump when the generated data changes for the same spec: cached files from other versions are regenerated.
GENERATOR_VERSION = 1
TRAIN_NAME = "fed_emnist_digitsonly_train.h5"
TEST_NAME = "fed_emnist_digitsonly_test.h5"
PUBLIC_NAME = "fed_emnist_digitsonly_public.h5"
PURPOSE, PUBLIC_PURPOSE = "synthetic_emnist", "synthetic_emnist_public"
"""The generator streams of the private and of the public writers (``numpy_generator(seed, purpose, writer)``)."""

GLYPH_HEIGHT_PX = 19.0
RENDER_CHUNK = 256
RENDER_THREADS = min(8, os.cpu_count() or 1)
"""Threads that render chunks at once (each holds about 200 MB of temporaries)."""
AMBIGUOUS_SPREAD = 2.5  # how much more an ambiguous writer warps and jitters
MAX_CUT = 0.2  # largest fraction of a glyph's strokes a (non-ambiguous) writer leaves out at either end


@dataclass(frozen=True)
class SyntheticEmnistSpec:
    """What to generate. The same spec always gives the same pixels and labels.

    ``class_concentration`` is the Dirichlet concentration of each writer's class mix (smaller = more skewed);
    ``ambiguous_fraction`` of the writers distort their glyphs strongly; ``noisy_fraction`` of the writers get
    additive Gaussian pixel noise, with a standard deviation of at most ``pixel_noise``. The defaults give a
    SmallCNN about 95-96% test accuracy after 2 centralised epochs (``simulations/benchmarks``).
    """

    num_writers: int = 500
    min_examples: int = 20
    max_examples: int = 80
    test_fraction: float = 0.15
    class_concentration: float = 1.0
    ambiguous_fraction: float = 0.25
    pixel_noise: float = 0.08
    noisy_fraction: float = 0.25
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.num_writers <= 10_000:
            raise ValueError(f"num_writers must be in [1, 10000], got {self.num_writers}")
        if not 2 <= self.min_examples <= self.max_examples:
            raise ValueError(
                f"need 2 <= min_examples <= max_examples, got min_examples={self.min_examples}, "
                f"max_examples={self.max_examples}"
            )
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {self.test_fraction}")
        if not self.class_concentration > 0.0:
            raise ValueError(f"class_concentration must be > 0, got {self.class_concentration}")
        if not 0.0 <= self.ambiguous_fraction <= 1.0:
            raise ValueError(f"ambiguous_fraction must be in [0, 1], got {self.ambiguous_fraction}")
        if not 0.0 <= self.pixel_noise <= 0.5:
            raise ValueError(f"pixel_noise must be in [0, 0.5], got {self.pixel_noise}")
        if not 0.0 <= self.noisy_fraction <= 1.0:
            raise ValueError(f"noisy_fraction must be in [0, 1], got {self.noisy_fraction}")

    def to_json(self) -> str:
        """The spec and generator version, as stored in the files' ``fedpub_spec`` attribute."""
        return json.dumps({"generator_version": GENERATOR_VERSION, **asdict(self)}, sort_keys=True)


# ---------------------------------------------------------------------------------------------------------------
# Stroke skeletons: glyph coordinates, x to the right, y downwards, the digit spanning y in [-0.5, 0.5].

Polyline = np.ndarray  # (k, 2) points joined in order


def _arc(cx: float, cy: float, rx: float, ry: float, deg0: float, deg1: float, n: int) -> Polyline:
    t = np.deg2rad(np.linspace(deg0, deg1, n + 1))
    return np.stack([cx + rx * np.cos(t), cy + ry * np.sin(t)], axis=1)


def _bezier(p0: Sequence[float], p1: Sequence[float], p2: Sequence[float], n: int) -> Polyline:
    t = np.linspace(0.0, 1.0, n + 1)[:, None]
    a, b, c = np.asarray(p0), np.asarray(p1), np.asarray(p2)
    return (1 - t) ** 2 * a + 2 * (1 - t) * t * b + t**2 * c


def _line(*points: tuple[float, float]) -> Polyline:
    return np.asarray(points, dtype=np.float64)


def _digit_variants() -> list[list[list[Polyline]]]:
    """For each digit, its variants; a variant is a list of strokes."""
    circle9 = _arc(0.0, -0.24, 0.26, 0.26, 0, 360, 14)
    return [
        [  # 0
            [_arc(0.0, 0.0, 0.28, 0.5, -90, 270, 16)],
            [_arc(0.0, 0.0, 0.26, 0.5, -100, 250, 16)],
        ],
        [  # 1
            [_line((0.04, -0.5), (-0.04, 0.5))],
            [_line((-0.17, -0.28), (0.04, -0.5), (-0.04, 0.5))],
            [_line((-0.17, -0.28), (0.04, -0.5), (-0.04, 0.5)), _line((-0.18, 0.5), (0.14, 0.5))],
        ],
        [  # 2
            [np.concatenate([_arc(0.0, -0.24, 0.27, 0.26, -170, 30, 9), _line((-0.3, 0.5), (0.32, 0.5))])],
            [
                np.concatenate(
                    [
                        _arc(0.0, -0.24, 0.27, 0.26, -160, 10, 8),
                        _bezier((0.27, -0.2), (0.05, 0.25), (-0.3, 0.48), 5)[1:],
                        _line((0.32, 0.42)),
                    ]
                )
            ],
        ],
        [  # 3
            [_arc(0.0, -0.25, 0.25, 0.25, -160, 90, 9), _arc(0.0, 0.24, 0.28, 0.26, -90, 160, 10)],
            [_line((-0.25, -0.5), (0.25, -0.5), (-0.04, -0.08)), _arc(0.0, 0.22, 0.28, 0.28, -100, 160, 10)],
        ],
        [  # 4
            [_line((0.12, -0.5), (-0.3, 0.18), (0.32, 0.18)), _line((0.14, -0.22), (0.14, 0.5))],
            [_line((-0.22, -0.5), (-0.26, 0.12), (0.3, 0.12)), _line((0.16, -0.5), (0.16, 0.5))],
        ],
        [  # 5
            [_line((0.28, -0.5), (-0.18, -0.5), (-0.2, -0.06)), _arc(0.0, 0.2, 0.28, 0.3, -125, 150, 10)],
            [
                _line((-0.18, -0.5), (-0.2, -0.06)),
                _line((-0.18, -0.5), (0.28, -0.48)),
                _arc(0.0, 0.22, 0.27, 0.28, -130, 160, 10),
            ],
        ],
        [  # 6
            [_bezier((0.22, -0.5), (-0.3, -0.3), (-0.27, 0.22), 6), _arc(0.0, 0.22, 0.27, 0.28, 180, 540, 14)],
            [_line((0.15, -0.5), (-0.25, 0.16)), _arc(0.0, 0.24, 0.25, 0.26, 200, 560, 14)],
        ],
        [  # 7
            [_line((-0.3, -0.5), (0.3, -0.5), (-0.06, 0.5))],
            [_line((-0.3, -0.5), (0.3, -0.5), (-0.06, 0.5)), _line((-0.1, 0.02), (0.24, 0.02))],
            [
                np.concatenate(
                    [_line((-0.3, -0.42), (-0.28, -0.5)), _bezier((0.3, -0.5), (0.05, 0.0), (-0.05, 0.5), 5)]
                )
            ],
        ],
        [  # 8
            [_arc(0.0, -0.27, 0.22, 0.23, 0, 360, 12), _arc(0.0, 0.23, 0.27, 0.27, 0, 360, 14)],
            [_arc(0.0, -0.3, 0.19, 0.2, 0, 360, 12), _arc(0.0, 0.2, 0.3, 0.3, 0, 360, 14)],
        ],
        [  # 9
            [circle9, _line((0.26, -0.24), (0.2, 0.5))],
            [circle9, _bezier((0.26, -0.24), (0.28, 0.4), (-0.18, 0.45), 6)],
        ],
    ]


@dataclass(frozen=True)
class _Glyph:
    points: np.ndarray  # (K, 2) float32
    segments: np.ndarray  # (S, 2) indices into points


def _glyph(strokes: list[Polyline]) -> _Glyph:
    points, segments, start = [], [], 0
    for stroke in strokes:
        k = len(stroke)
        points.append(stroke)
        segments.append(np.stack([np.arange(start, start + k - 1), np.arange(start + 1, start + k)], axis=1))
        start += k
    return _Glyph(np.concatenate(points).astype(np.float32), np.concatenate(segments))


GLYPHS: list[list[_Glyph]] = [[_glyph(v) for v in variants] for variants in _digit_variants()]


def _warp_basis(p: np.ndarray) -> np.ndarray:
    """Smooth deformation basis at points ``p`` (..., 2) -> (..., 7): linear, quadratic and cubic terms.

    The linear terms are damped (the affine style already covers them) so that strong warps bend glyphs rather
    than collapse them.
    """
    x, y = p[..., 0], p[..., 1]
    return np.stack([0.4 * x, 0.4 * y, x * x, x * y, y * y, x * x * y, x * y * y], axis=-1)


WARP_TERMS = 7

# ---------------------------------------------------------------------------------------------------------------
# Per-writer plans: every random draw happens here, from a generator derived from (seed, writer index).


@dataclass(frozen=True)
class _WriterPlan:
    labels: np.ndarray  # (n,) int
    variants: np.ndarray  # (n,) glyph variant of each example
    affine: np.ndarray  # (n, 2, 3) glyph coordinates -> pixel coordinates
    warp: np.ndarray  # (n, 2, WARP_TERMS)
    half_width: np.ndarray  # (n,) stroke half-width in pixels
    cut: np.ndarray  # (n, 2) fractions of the glyph's segments left out at its start and at its end
    darkness: float
    noise: np.ndarray  # (n, 28, 28) additive pixel noise
    is_test: np.ndarray  # (n,) bool


def _writer_plan(spec: SyntheticEmnistSpec, writer: int, purpose: str = PURPOSE) -> _WriterPlan:
    rng = numpy_generator(spec.seed, purpose, writer)
    n = int(rng.integers(spec.min_examples, spec.max_examples + 1))
    class_mix = rng.dirichlet(np.full(NUM_DIGITS, spec.class_concentration))
    labels = rng.choice(NUM_DIGITS, size=n, p=class_mix)
    variant_of_digit = np.array([rng.integers(len(v)) for v in GLYPHS])
    ambiguous = rng.random() < spec.ambiguous_fraction
    spread = AMBIGUOUS_SPREAD if ambiguous else 1.0

    # Writer style.
    slant = rng.normal(0.12, 0.18)
    rotation = rng.normal(0.0, 0.08)
    scale = rng.uniform(0.78, 1.12)
    aspect = rng.uniform(0.75, 1.25)
    offset = rng.normal(0.0, 1.0, size=2)
    width = rng.uniform(0.8, 1.9)
    darkness = float(rng.uniform(0.65, 1.0))
    noise_std = rng.uniform(0.25, 1.0) * spec.pixel_noise if rng.random() < spec.noisy_fraction else 0.0
    digit_warp = rng.normal(0.0, 0.09 * spread, size=(NUM_DIGITS, 2, WARP_TERMS))

    # Example jitter.
    e_slant = slant + rng.normal(0.0, 0.08 * spread, size=n)
    e_rot = rotation + rng.normal(0.0, 0.06 * spread, size=n)
    e_scale = scale * rng.uniform(0.9, 1.1, size=n)
    e_offset = offset + rng.normal(0.0, 1.0, size=(n, 2))
    warp = digit_warp[labels] + rng.normal(0.0, 0.05 * spread, size=(n, 2, WARP_TERMS))
    half_width = width * rng.uniform(0.85, 1.15, size=n)
    sloppiness = rng.uniform(0.0, 0.5)  # how often this writer leaves a glyph's first or last stroke short
    cut = np.where(rng.random((n, 2)) < sloppiness, rng.uniform(0.0, MAX_CUT * spread, size=(n, 2)), 0.0)
    noise = rng.standard_normal(size=(n, SIZE, SIZE), dtype=np.float32) * np.float32(noise_std)
    test_count = min(n - 1, max(1, round(n * spec.test_fraction)))
    is_test = np.zeros(n, dtype=bool)
    is_test[rng.permutation(n)[:test_count]] = True

    # affine = rotation @ shear @ diag(sx, sy) * height, then translate to the image centre.
    cos, sin = np.cos(e_rot), np.sin(e_rot)
    sx, sy = GLYPH_HEIGHT_PX * e_scale * aspect, GLYPH_HEIGHT_PX * e_scale
    affine = np.empty((n, 2, 3))
    affine[:, 0, 0] = cos * sx
    affine[:, 0, 1] = (-cos * e_slant - sin) * sy
    affine[:, 1, 0] = sin * sx
    affine[:, 1, 1] = (-sin * e_slant + cos) * sy
    affine[:, :, 2] = SIZE / 2 + e_offset
    return _WriterPlan(
        labels=labels,
        variants=variant_of_digit[labels],
        affine=affine,
        warp=warp,
        half_width=half_width,
        cut=cut,
        darkness=darkness,
        noise=noise,
        is_test=is_test,
    )


# ---------------------------------------------------------------------------------------------------------------
# Rendering.

_PIXEL_CENTRES = (np.stack(np.meshgrid(np.arange(SIZE), np.arange(SIZE)), axis=-1).reshape(-1, 2) + 0.5).astype(
    np.float32
)  # (784, 2) pixel centres (x, y), row-major


def _ink(
    glyph: _Glyph, affine: np.ndarray, warp: np.ndarray, half_width: np.ndarray, cut: np.ndarray
) -> np.ndarray:
    """Ink coverage in [0, 1], shape (B, 28, 28), of one glyph under B transforms and truncations."""
    p = glyph.points[None]  # (1, K, 2)
    warped = p + np.einsum("bij,kj->bki", warp.astype(np.float32), _warp_basis(glyph.points))
    a32 = affine.astype(np.float32)
    pix = np.einsum("bij,bkj->bki", a32[:, :, :2], warped) + a32[:, None, :, 2]  # (B, K, 2)
    start, end = pix[:, glyph.segments[:, 0]], pix[:, glyph.segments[:, 1]]  # (B, S, 2)
    ab = end - start
    inv_len2 = 1.0 / np.maximum((ab * ab).sum(-1), 1e-6)  # (B, S)
    rx = _PIXEL_CENTRES[None, None, :, 0] - start[..., 0:1]  # (B, S, P)
    ry = _PIXEL_CENTRES[None, None, :, 1] - start[..., 1:2]
    abx, aby = ab[..., 0:1], ab[..., 1:2]
    t = np.clip((rx * abx + ry * aby) * inv_len2[..., None], 0.0, 1.0)
    rx -= t * abx
    ry -= t * aby
    num_segments = len(glyph.segments)
    position = (np.arange(num_segments) + 0.5) / num_segments
    keep = (position >= cut[:, :1]) & (position <= 1.0 - cut[:, 1:])  # (B, S)
    keep[:, num_segments // 2] = True
    d2 = np.where(keep[..., None], rx * rx + ry * ry, np.float32(np.inf))
    dist = np.sqrt(d2.min(axis=1))  # (B, P)
    coverage = np.clip(half_width[:, None].astype(np.float32) - dist + 0.5, 0.0, 1.0)
    return coverage.reshape(-1, SIZE, SIZE)


def _render(plans: list[_WriterPlan]) -> np.ndarray:
    """Pixels (total examples, 28, 28) of all writers, concatenated in writer order."""
    labels = np.concatenate([p.labels for p in plans])
    variants = np.concatenate([p.variants for p in plans])
    affine = np.concatenate([p.affine for p in plans])
    warp = np.concatenate([p.warp for p in plans])
    half_width = np.concatenate([p.half_width for p in plans])
    cut = np.concatenate([p.cut for p in plans])
    pixels = np.empty((len(labels), SIZE, SIZE), dtype=np.float32)
    jobs = []
    for digit, glyph_variants in enumerate(GLYPHS):
        for variant, glyph in enumerate(glyph_variants):
            idx = np.flatnonzero((labels == digit) & (variants == variant))
            chunks = np.array_split(idx, max(1, -(-len(idx) // RENDER_CHUNK)))
            jobs += [(glyph, chunk) for chunk in chunks if len(chunk)]

    def draw(glyph: _Glyph, chunk: np.ndarray) -> None:  # chunks are disjoint: the same pixels in any order
        pixels[chunk] = _ink(glyph, affine[chunk], warp[chunk], half_width[chunk], cut[chunk])

    with ThreadPoolExecutor(RENDER_THREADS) as pool:  # numpy's large array operations release the GIL
        for done in [pool.submit(draw, glyph, chunk) for glyph, chunk in jobs]:
            done.result()
    # In place, to keep the peak memory near one copy of the pixels: 1 - darkness * ink + noise, then clip and
    # quantise to 1/255 steps like 8-bit scans.
    darkness = np.concatenate([np.full(len(p.labels), p.darkness, dtype=np.float32) for p in plans])
    pixels *= -darkness[:, None, None]
    pixels += 1.0
    pixels += np.concatenate([p.noise for p in plans])
    np.clip(pixels, 0.0, 1.0, out=pixels)
    pixels *= 255.0
    np.round(pixels, out=pixels)
    pixels /= 255.0
    return pixels


def writer_ids(num_writers: int, prefix: str = "f") -> list[str]:
    """LEAF-style writer ids ``f0000_00``, ``f0000_01``, ... (8 characters, sorted); ``prefix`` ``p``: the generated
    public writers', ``d``: scikit-learn's digits' pseudo-writers (:mod:`fedpub.data.emnist_sklearn_digits`)."""
    return [f"{prefix}{w // 100:04d}_{w % 100:02d}" for w in range(num_writers)]


Client = tuple[str, np.ndarray, np.ndarray]  # (client id, labels, pixels)


def write_clients(path: Path, spec_json: str, clients: list[Client]) -> None:
    """Write ``clients`` into a new HDF5 file at ``path`` in TFF's EMNIST layout, ``spec_json`` as its marker."""
    with h5py.File(path, "w") as f:
        f.attrs[SPEC_ATTR] = spec_json
        examples = f.create_group("examples")
        for client_id, labels, pixels in clients:
            group = examples.create_group(client_id)
            group.create_dataset("label", data=labels.astype(np.int32), track_times=False)
            group.create_dataset(
                "pixels",
                data=pixels,
                chunks=pixels.shape,
                compression="gzip",
                compression_opts=4,
                shuffle=True,
                track_times=False,
            )


def write_synthetic_emnist(directory: str | os.PathLike[str], spec: SyntheticEmnistSpec) -> tuple[Path, Path]:
    """Generate ``spec`` into ``directory`` as TFF digits-only train/test HDF5 files; returns (train, test).

    Both files are written under temporary names in ``directory`` and renamed into place only when complete,
    so an interrupted generation never leaves a partial file under a final name.
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    train_clients: list[Client] = []
    test_clients: list[Client] = []
    for client_id, plan, px in _writers(spec, PURPOSE, "f"):
        train_clients.append((client_id, plan.labels[~plan.is_test], px[~plan.is_test]))
        test_clients.append((client_id, plan.labels[plan.is_test], px[plan.is_test]))

    final = (root / TRAIN_NAME, root / TEST_NAME)
    with atomic_path(final[0]) as train_tmp, atomic_path(final[1]) as test_tmp:
        write_clients(train_tmp, spec.to_json(), train_clients)
        write_clients(test_tmp, spec.to_json(), test_clients)
    return final


def _writers(spec: SyntheticEmnistSpec, purpose: str, prefix: str) -> list[tuple[str, _WriterPlan, np.ndarray]]:
    """(id, plan, pixels) of every writer of ``spec``, drawn from the ``purpose`` streams."""
    plans = [_writer_plan(spec, w, purpose) for w in range(spec.num_writers)]
    pixels = _render(plans)
    bounds = np.cumsum([0] + [len(p.labels) for p in plans])
    return [(client_id, plan, pixels[lo:hi])
            for client_id, plan, lo, hi in zip(writer_ids(spec.num_writers, prefix), plans, bounds[:-1], bounds[1:])]


def public_spec_json(spec: SyntheticEmnistSpec) -> str:
    """What the public writers' file stores as its spec: ``spec`` marked as the public writers' (so that a file of
    private writers is never taken for it)."""
    return json.dumps({"public_writers": json.loads(spec.to_json())}, sort_keys=True)


def write_synthetic_emnist_public(directory: str | os.PathLike[str], spec: SyntheticEmnistSpec) -> Path:
    """Generate the public writers of ``spec`` into ``directory``'s :data:`PUBLIC_NAME`, every example of each
    (``test_fraction`` is not used), atomically; returns its path."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    clients: list[Client] = [(cid, plan.labels, px) for cid, plan, px in _writers(spec, PUBLIC_PURPOSE, "p")]
    with atomic_path(root / PUBLIC_NAME) as tmp:
        write_clients(tmp, public_spec_json(spec), clients)
    return root / PUBLIC_NAME


def ensure_synthetic_emnist(directory: str | os.PathLike[str], spec: SyntheticEmnistSpec) -> tuple[Path, Path]:
    """The train/test files in ``directory``: generated from ``spec`` when absent, reused when generated from it,
    refused (DatasetError, the differing fields named) when generated from another spec or not by fedpub."""
    root = Path(directory)
    train, test = ensure_generated(
        root, "synthetic EMNIST", (root / TRAIN_NAME, root / TEST_NAME), spec.to_json(),
        lambda: write_synthetic_emnist(root, spec),
    )
    return train, test


def ensure_synthetic_emnist_public(directory: str | os.PathLike[str], spec: SyntheticEmnistSpec) -> Path:
    """The public writers' file in ``directory``, generated from ``spec`` when absent, reused or refused as
    :func:`ensure_synthetic_emnist` does."""
    root = Path(directory)
    (public,) = ensure_generated(
        root, "synthetic EMNIST public writers", (root / PUBLIC_NAME,), public_spec_json(spec),
        lambda: (write_synthetic_emnist_public(root, spec),),
    )
    return public
