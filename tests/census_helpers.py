"""Small random geography x attribute frames for the census tests."""

import numpy as np
import pandas as pd


def random_frame(seed: int, counties: int = 4, max_tracts: int = 3, sexes=("male", "female"),
                 ages=("0-17", "18-64", "65+"), groups: int = 0, mean: float = 20.0) -> pd.DataFrame:
    """county > tract (> group when ``groups``) x sex x age cells with Poisson counts, in a
    shuffled row order (the cells are the rows, whatever their order)."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(counties):
        for t in range(int(rng.integers(1, max_tracts + 1))):
            subs = [None] if not groups else [f"g{g}" for g in range(int(rng.integers(1, groups + 1)))]
            for g in subs:
                for s in sexes:
                    for a in ages:
                        row = {"county": f"{c:03d}", "tract": f"{c:03d}{t:03d}", "sex": s, "age": a,
                               "count": int(rng.poisson(mean))}
                        if groups:
                            row["group"] = f"{c:03d}{t:03d}{g}"
                        rows.append(row)
    f = pd.DataFrame(rows)
    return f.iloc[rng.permutation(len(f))].reset_index(drop=True)
