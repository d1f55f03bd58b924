"""Logits of one model from two backends (dsinfer logits --device cpu and cuda:N).

Usage: python3 tests/device/compare_logits.py CPU.npy OTHER.npy DTYPE

Prints the relative max error (max |other - cpu| / max |cpu|), top-1
agreement, and the positions whose top-1 must agree: where the CPU's best
logit leads its second by more than twice the largest difference, no
difference within that bound can change the argmax. Exits 1 when the error
passes the tolerance or such a position disagrees.

Tolerances, from the reference comparison against llama.cpp
(tests/reference/test_logits_vs_llama_cpp.py), whose argument holds here:
both backends do the same arithmetic (activations rounded to the same types
by the same rule) in a different summation order. F32 1e-3; F16/BF16 5e-3;
4- to 8-bit weights 5e-2 (an ulp-level difference upstream can move one
activation to the neighbouring quantum).
"""

import sys

import numpy as np

TOLERANCE = {"f32": 1e-3, "f16": 5e-3, "bf16": 5e-3}


def main():
    cpu, other = np.load(sys.argv[1]), np.load(sys.argv[2])
    dtype = sys.argv[3]
    tolerance = TOLERANCE.get(dtype, 5e-2)
    assert cpu.shape == other.shape, (cpu.shape, other.shape)
    diff = np.abs(other - cpu)
    error = float(diff.max() / np.abs(cpu).max())
    top = np.sort(cpu, axis=-1)
    margin = top[:, -1] - top[:, -2]
    agree = np.argmax(cpu, axis=-1) == np.argmax(other, axis=-1)
    decided = margin > 2 * diff.max(axis=-1)
    wrong = int((decided & ~agree).sum())
    print(f"{dtype}: relative max error {error:.2e} (tolerance {tolerance:g}); top-1 agreement {agree.mean():.3f} "
          f"({int(agree.sum())}/{len(agree)}); positions the margin decides {int(decided.sum())}, of them disagreeing {wrong}")
    sys.exit(0 if error <= tolerance and wrong == 0 else 1)


if __name__ == "__main__":
    main()
