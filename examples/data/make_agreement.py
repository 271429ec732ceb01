#!/usr/bin/env python3
"""Writes the sample dataset examples/data/agreement_{train,eval}.txt in tapegrad's dataset format
(tokens, a TAB, one label per token, '_' = no label). Subject-verb agreement: at '?' the label is the
number (sg or pl) of the sentence's subject, the first noun, not of the nearer attractor noun:

    the dog near the cats ?	_ _ _ _ _ sg

Sentences have 3 to 9 tokens, so batches pad and mask the shorter ones. Run: python3 make_agreement.py
"""
import os
import random

NOUNS = {"dog": "sg", "cat": "sg", "bird": "sg", "fox": "sg", "dogs": "pl", "cats": "pl", "birds": "pl", "foxes": "pl"}
PREPS = ["near", "behind", "with"]


def sentence(rng):
    subject = rng.choice(list(NOUNS))
    words = ["the", subject]
    for _ in range(rng.randrange(3)):  # 0 to 2 attractor phrases
        words += [rng.choice(PREPS), "the", rng.choice(list(NOUNS))]
    words.append("?")
    labels = ["_"] * (len(words) - 1) + [NOUNS[subject]]
    return " ".join(words) + "\t" + " ".join(labels)


def main():
    rng = random.Random(7)
    here = os.path.dirname(os.path.abspath(__file__))
    seen = set()
    for name, n in (("agreement_train.txt", 2000), ("agreement_eval.txt", 500)):
        lines = []
        while len(lines) < n:
            s = sentence(rng)
            if s not in seen:  # no sentence in both files
                seen.add(s)
                lines.append(s)
        with open(os.path.join(here, name), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
