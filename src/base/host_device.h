#pragma once
// DS_HOST_DEVICE marks a function the CPU kernels and the CUDA backend's
// kernels both compile (nvcc: __host__ __device__; elsewhere nothing), so
// that a per-token computation has one body in one order of operations.
// Such a function calls only what both sides have: the C math functions
// (expf, fmaxf), no std::.

#ifdef __CUDACC__
#define DS_HOST_DEVICE __host__ __device__
#else
#define DS_HOST_DEVICE
#endif
