#!/usr/bin/python3
"""Writes tests/data/walkthrough_expected.txt: every number examples/walkthrough computes from the
notes (../shared/seeds/00*.txt), computed independently here with plain numpy in float64, for
tests/test_walkthrough.cpp to compare against (to 1e-12). Run by hand (the suite never needs Python):

    /usr/bin/python3 tests/data/make_walkthrough_expected.py

Format: one "key value" per line, value written with repr(). Keys are the walkthrough's claim keys
("001.softmax_row1.p2") and its table entries ("001.S.r1c2", rows and columns from 1).
"""
import math
import os

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "walkthrough_expected.txt")

values = {}


def put(key, value):
    assert key not in values, key
    values[key] = float(value)


def put_table(key, m):
    m = np.atleast_2d(np.asarray(m, dtype=np.float64))
    for r in range(m.shape[0]):
        for c in range(m.shape[1]):
            put(f"{key}.r{r + 1}c{c + 1}", m[r, c])


def softmax_rows(s):
    s = np.atleast_2d(s)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def attention(q, k, v, factor):
    """softmax(Q K^T factor) V and the weights."""
    a = softmax_rows(q @ k.T * factor)
    return a @ v, a


# ---- note 001 -------------------------------------------------------------------------------
E = np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9], [0.2, 0.1, 0.4], [0.5, 0.3, 0.2]])
Wq = np.array([[0.3, 0.6, 0.9], [0.1, 0.4, 0.7], [0.2, 0.5, 0.8]])
Wk = np.array([[0.5, 0.2, 0.1], [0.4, 0.3, 0.6], [0.7, 0.8, 0.9]])
Wv = np.array([[0.6, 0.1, 0.4], [0.3, 0.5, 0.2], [0.8, 0.7, 0.9]])
r3 = 1 / math.sqrt(3)

S = np.einsum("ik,jk->ij", E, E)  # explicit dot products, not the same code path as E @ E.T
put_table("001.E", E)
put_table("001.S", S)
# The claims on S ("001.S.r1c2") have the keys of the table's entries: one value serves both.

put("001.score_scale", r3)
ex = np.exp(S[0])
ex_scaled = np.exp(S[0] * r3)
for j in range(5):
    put(f"001.softmax_row1.exp{j + 1}", ex[j])
put("001.softmax_row1.sum", ex.sum())
C_none, A_none = attention(E, E, E, 1.0)
C_sqrt, A_sqrt = attention(E, E, E, r3)
for j in range(5):
    put(f"001.softmax_row1.p{j + 1}", ex[j] / ex.sum())
put("001.softmax_row1.row_sum", A_none[0].sum())
for c in range(3):
    put(f"001.C1.{c + 1}", C_none[0, c])
put_table("001.row1", np.vstack([ex, ex_scaled, A_none[0], A_sqrt[0]]))
stated_p = np.array([0.1761, 0.2107, 0.2522, 0.1796, 0.1814])
put_table("001.C1", np.vstack([stated_p @ E, C_none[0], C_sqrt[0]]))
put_table("001.A.none", A_none)
put_table("001.C.none", C_none)
put_table("001.A.sqrt", A_sqrt)
put_table("001.C.sqrt", C_sqrt)

put_table("001.normalization", softmax_rows(np.array([[10.0, 20, 30], [0.1, 0.2, 0.3]])))

# Two sentences, each its own sequence.
for tag, factor in (("none", 1.0), ("sqrt", r3)):
    banks, weights = [], []
    for rows in ([0, 1, 2], [3, 1, 4]):
        X = E[rows]
        out, a = attention(X, X, X, factor)
        banks.append(out[1])
        weights.append(a[1])
    b1, b2 = banks
    put(f"001.sentences.{tag}.diff_norm", np.linalg.norm(b1 - b2))
    put(f"001.sentences.{tag}.cosine", b1 @ b2 / (np.linalg.norm(b1) * np.linalg.norm(b2)))
    for k, w in enumerate(weights):
        put(f"001.sentences.{tag}.others{k + 1}", w[0] + w[2])
    put_table(f"001.sentences.{tag}.weights", np.vstack(weights))
    put_table(f"001.sentences.{tag}.bank", np.vstack(banks))

# Learnable: Q, K, V of Money Bank Grows with the note's matrices.
put_table("001.Wq", Wq)
put_table("001.Wk", Wk)
put_table("001.Wv", Wv)
X3 = E[:3]
for name, W in (("q", Wq), ("k", Wk), ("v", Wv)):
    P = X3 @ W
    put_table(f"001.learnable.{name.upper()}", P)
    for c in range(3):
        put(f"001.bank.{name}{c + 1}", P[1, c])
for tag, factor in (("sqrt", r3), ("none", 1.0)):
    out, a = attention(X3 @ Wq, X3 @ Wk, X3 @ Wv, factor)
    put_table(f"001.learnable.{tag}.weights", a)
    put_table(f"001.learnable.{tag}.output", out)

# ---- note 002 -------------------------------------------------------------------------------
Q = np.array([[0.2, 0.5, 0.1], [0.4, 0.6, 0.2], [0.1, 0.3, 0.2], [0.3, 0.4, 0.1], [0.5, 0.2, 0.3], [0.3, 0.1, 0.5]])
K = np.array([[0.1, 0.3, 0.6], [0.2, 0.4, 0.7], [0.3, 0.5, 0.4], [0.4, 0.3, 0.5], [0.6, 0.4, 0.2], [0.4, 0.2, 0.6]])
V = np.array([[0.3, 0.2, 0.8], [0.5, 0.3, 0.9], [0.2, 0.1, 0.7], [0.6, 0.4, 0.9], [0.7, 0.5, 0.8], [0.8, 0.6, 0.9]])
sit = 3
put_table("002.inputs", np.hstack([Q, K, V]))
scores = K @ Q[sit]
put_table("002.scores", scores)
out_sqrt, w_sqrt = attention(Q, K, V, r3)
out_d, w_d = attention(Q, K, V, 1 / 3)
put_table("002.sitting.weights", np.vstack([w_sqrt[sit], w_d[sit]]))
put_table("002.sitting.output", np.vstack([out_sqrt[sit], out_d[sit]]))
put_table("002.pair", np.vstack([softmax_rows(np.array([0.13, 0.26]) / 3)[0], softmax_rows(scores[:2] / 3)[0],
                                 softmax_rows(scores[:2] * r3)[0]]))
put("002.tokens", 6)
put("002.dk", 3)
put("002.dot.The", scores[0])
put("002.dot.dog", scores[1])
put("002.divisor", math.sqrt(3))
put("002.weight.The", w_sqrt[sit, 0])
put("002.weight.dog", w_sqrt[sit, 1])
for j, name in enumerate(["The", "dog"]):
    for c in range(3):
        put(f"002.sum_vector.{name}.{c + 1}", V[j, c])
put_table("002.weighted_sum", np.vstack([0.4 * V[0], 0.6 * V[1], w_sqrt[sit, 0] * V[0], w_sqrt[sit, 1] * V[1]]))

# ---- note 003 -------------------------------------------------------------------------------
put("003.sqrt_dk", math.sqrt(4))
I3 = np.eye(3)
put("003.identity.max_diff", np.abs(attention(E @ I3, E @ I3, E @ I3, r3)[0] - attention(E, E, E, r3)[0]).max())
put("003.saturation.none", attention(X3 @ Wq, X3 @ Wk, X3 @ Wv, 1.0)[1].max())
put("003.saturation.sqrt", attention(X3 @ Wq, X3 @ Wk, X3 @ Wv, r3)[1].max())

# ---- note 004 -------------------------------------------------------------------------------
a, b, c = np.array([1.0, 0, 0]), np.array([0.0, 10, 2]), np.array([2.0, 0, 2])
put("004.dot.aa", a @ a)
put("004.dot.ab", a @ b)
put("004.dot.ac", a @ c)
apple, phone = np.array([5.0, 2, 0]), np.array([0.0, 5, 0])
AP = np.vstack([apple, phone])
sim = AP @ AP.T / math.sqrt(3)
w = softmax_rows(sim)
put_table("004.abc", np.vstack([a, b, c]))
put_table("004.inputs", AP)
put_table("004.sim", sim)
put_table("004.weights", w)
put("004.sim.apple_apple", sim[0, 0])
put("004.sim.apple_phone", sim[0, 1])
put("004.apple_dims", 3)
put("004.fruit.apple", apple[0])
put("004.fruit.phone", phone[0])
ratio = math.exp(sim[0, 1] - sim[0, 0])
row = np.array([0.99997, 0.00000, 0.00002, 0.00002, 0.00000])
fruit = np.array([5.0, 0, 0, 2, 0])
put("004.row.phone", 0.99997 * ratio)
put("004.ratio", ratio)
put("004.apple_bound", 1 / (1 + ratio))
put("004.row.sum", row.sum())
put("004.text_apple_weight", 0.99997)
put("004.dot_fruit", row @ fruit)
put("004.dot_fruit.lo", 5 * (0.99997 - 0.5e-5) + 2 * (0.00002 - 0.5e-5))
put("004.dot_fruit.hi", 5 * (0.99997 + 0.5e-5) + 2 * (0.00002 + 0.5e-5))

with open(OUT, "w") as f:
    f.write("# Written by tests/data/make_walkthrough_expected.py (numpy, float64); key value\n")
    for key, value in values.items():
        f.write(f"{key} {value!r}\n")
print(f"wrote {len(values)} values to {OUT}")
