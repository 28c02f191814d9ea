#!/usr/bin/python3
"""Data for the worked example of docs/training.md, "Models": three Gaussian
blobs in 2-D (600 points, seed 0; 500 to train, 100 to test) and the initial
parameters of a 2-16-3 MLP, as .npy files in the current directory."""
import numpy as np

rng = np.random.default_rng(0)
centers = np.array([[2, 0], [-1, 1.7], [-1, -1.7]])
y = rng.integers(0, 3, 600)
x = (centers[y] + rng.standard_normal((600, 2)) * 0.8).astype(np.float32)
np.save("xtr.npy", x[:500])
np.save("ytr.npy", y[:500].astype(np.int32))
np.save("xte.npy", x[500:])
np.save("yte.npy", y[500:].astype(np.int32))
np.save("w1.npy", rng.uniform(-0.7, 0.7, (2, 16)).astype(np.float32))
np.save("w2.npy", rng.uniform(-0.25, 0.25, (16, 3)).astype(np.float32))
np.save("b1.npy", np.zeros(16, np.float32))
np.save("b2.npy", np.zeros(3, np.float32))
