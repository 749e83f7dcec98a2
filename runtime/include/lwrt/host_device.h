// lwrt/host_device.h - LWRT_HOST_DEVICE, for the formulas every backend shares
// defines: LWRT_HOST_DEVICE
//
// A function marked LWRT_HOST_DEVICE compiles for the host and, under nvcc,
// for the device as well: the reference interpreter, the CPU kernels and
// the CUDA kernels call the same code. Free of other headers, so lwcc's own
// libraries include the headers built on it from the source tree.
#pragma once

#ifndef LWRT_HOST_DEVICE
#if defined(__CUDACC__)
#define LWRT_HOST_DEVICE __host__ __device__
#else
#define LWRT_HOST_DEVICE
#endif
#endif
