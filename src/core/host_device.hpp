#pragma once
// AVTRAIN_HOST_DEVICE: a function that nvcc compiles for the device too (__host__ __device__), and
// a plain inline function for every other compiler: the host and a CUDA kernel then share its bits.
#ifdef __CUDACC__
#define AVTRAIN_HOST_DEVICE __host__ __device__
#else
#define AVTRAIN_HOST_DEVICE
#endif
