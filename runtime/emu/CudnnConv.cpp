// emu/CudnnConv.cpp - the emulated cuDNN's convolution calls (forward, backward data and filter)
//
// The three directions' execution calls, workspace queries, heuristics
// (cudnnGet*Algorithm_v7) and searches (cudnnFind*AlgorithmEx) around the
// algorithms of CudnnConvAlgos.cpp. Each call checks its descriptors first
// (null ones: BAD_PARAM; inconsistent ones: the status cuDNN documents, see
// convGeometry), then the algorithm (out of range: BAD_PARAM; not
// supported here: NOT_SUPPORTED; given fewer workspace bytes than it needs:
// BAD_PARAM), then its device operands.
//
// cudnnFind*AlgorithmEx synchronizes (refused, and the capture invalidated,
// while a stream capture forbids it: CUDNN_STATUS_EXECUTION_FAILED_CUDART),
// runs every algorithm on the caller's buffers on the handle's stream,
// waiting for each and timing it by wall clock, and lists them fastest
// first, those that could not run after them with the status their
// execution call would return. cudnnGet*Algorithm_v7 runs nothing and
// lists a fixed preference order (FWD 1, 0, 2, 7, 6, 5, 4, 3; BWD_DATA 1,
// 0, 5, 4, 3, 2; BWD_FILTER 1, 0, 3, 5, 6, 2, 4), supported algorithms
// first: lwcc's runtime, which takes the first deterministic one, runs
// IMPLICIT_PRECOMP_GEMM, BWD_DATA_ALGO_1 and BWD_FILTER_ALGO_1.
#include "CudnnConv.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace lwemu::dnn {
namespace {

const char* const kExec[] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                             "cudnnConvolutionBackwardFilter"};
const char* const kFind[] = {"cudnnFindConvolutionForwardAlgorithmEx",
                             "cudnnFindConvolutionBackwardDataAlgorithmEx",
                             "cudnnFindConvolutionBackwardFilterAlgorithmEx"};
const int kAlgoCount[] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};
/// The heuristics' fixed preference orders.
const int kPreferFwd[] = {1, 0, 2, 7, 6, 5, 4, 3};
const int kPreferData[] = {1, 0, 5, 4, 3, 2};
const int kPreferFilter[] = {1, 0, 3, 5, 6, 2, 4};

/// The descriptors of one call in the roles of (x, w, conv, y), whatever
/// the direction calls them.
struct Descs {
  const cudnnTensorStruct* x;
  const cudnnFilterStruct* w;
  const cudnnConvolutionStruct* conv;
  const cudnnTensorStruct* y;
};

/// Null and liveness checks of the handle and descriptors, then the geometry.
cudnnStatus_t prepare(const char* call, cudnnHandle_t h, const Descs& d, ConvGeom& g) {
  if (!h || !d.x || !d.w || !d.conv || !d.y)
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(h, Kind::Handle, call, "handle");
  checkLive(d.x, Kind::Tensor, call, "a tensor descriptor");
  checkLive(d.y, Kind::Tensor, call, "a tensor descriptor");
  checkLive(d.w, Kind::Filter, call, "the filter descriptor");
  checkLive(d.conv, Kind::Convolution, call, "convDesc");
  return convGeometry(d.x, d.w, d.conv, d.y, g);
}

/// A direction's operands as (in1, in2, out): (x, w, y), (dy, w, dx) or (x, dy, dw).
struct Operands {
  const void* in1;
  const void* in2;
  void* out;
};

void checkOperands(ConvDir dir, const ConvGeom& g, const Operands& o, const char* call) {
  const size_t e = dataSize(g.type);
  const size_t xb = static_cast<size_t>(g.xElems) * e, yb = static_cast<size_t>(g.yElems) * e,
               wb = static_cast<size_t>(g.wElems) * e;
  switch (dir) {
  case ConvDir::Fwd:
    operand(o.in1, xb, call, "x");
    operand(o.in2, wb, call, "w");
    operand(o.out, yb, call, "y");
    break;
  case ConvDir::BwdData:
    operand(o.in1, yb, call, "dy");
    operand(o.in2, wb, call, "w");
    operand(o.out, xb, call, "dx");
    break;
  case ConvDir::BwdFilter:
    operand(o.in1, xb, call, "x");
    operand(o.in2, yb, call, "dy");
    operand(o.out, wb, call, "dw");
    break;
  }
}

/// cudnnConvolution{Forward,BackwardData,BackwardFilter}.
cudnnStatus_t execute(ConvDir dir, cudnnHandle_t h, const void* alpha, const Descs& d,
                      const Operands& o, int algo, void* ws, size_t wsBytes, const void* beta) {
  const char* call = kExec[static_cast<int>(dir)];
  ConvGeom g;
  if (!alpha || !beta || !o.in1 || !o.in2 || !o.out)
    return CUDNN_STATUS_BAD_PARAM;
  if (cudnnStatus_t s = prepare(call, h, d, g); s != CUDNN_STATUS_SUCCESS)
    return s;
  if (algo < 0 || algo >= kAlgoCount[static_cast<int>(dir)])
    return CUDNN_STATUS_BAD_PARAM;
  const ConvAlgo info = convAlgo(dir, algo, g);
  if (!info.supported)
    return CUDNN_STATUS_NOT_SUPPORTED;
  if (info.workspace > 0 && (!ws || wsBytes < info.workspace))
    return CUDNN_STATUS_BAD_PARAM;
  checkOperands(dir, g, o, call);
  if (info.workspace > 0)
    operand(ws, info.workspace, call, "workSpace");
  const Scale sc = readScale(alpha, beta, g.type);
  return submit(h, call, [=] { runConv(dir, g, info, o.in1, o.in2, o.out, sc, ws, runSeed()); });
}

/// Fills one perf result; `status` is the algorithm's, `ms` its time.
template <typename Perf>
void fill(Perf& q, int algo, cudnnStatus_t status, float ms, const ConvAlgo& a, const ConvGeom& g) {
  q = Perf{};
  q.algo = static_cast<decltype(q.algo)>(algo);
  q.status = status;
  q.time = ms;
  q.memory = a.workspace;
  q.determinism = a.deterministic ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
  q.mathType = convMath(a, g);
}

/// cudnnGetConvolution*Algorithm_v7: the fixed preference order, the
/// supported algorithms first, nothing run.
template <typename Perf>
cudnnStatus_t heuristics(ConvDir dir, cudnnHandle_t h, const Descs& d, int requested, int* returned,
                         Perf* results, const char* call) {
  ConvGeom g;
  if (!returned || !results || requested < 1)
    return CUDNN_STATUS_BAD_PARAM;
  if (cudnnStatus_t s = prepare(call, h, d, g); s != CUDNN_STATUS_SUCCESS)
    return s;
  const int* prefer = dir == ConvDir::Fwd       ? kPreferFwd
                      : dir == ConvDir::BwdData ? kPreferData
                                                : kPreferFilter;
  const int count = kAlgoCount[static_cast<int>(dir)];
  std::vector<int> order(prefer, prefer + count);
  std::stable_partition(order.begin(), order.end(),
                        [&](int a) { return convAlgo(dir, a, g).supported; });
  *returned = std::min(requested, count);
  for (int i = 0; i < *returned; ++i) {
    ConvAlgo a = convAlgo(dir, order[static_cast<size_t>(i)], g);
    fill(results[i], order[static_cast<size_t>(i)],
         a.supported ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED, -1.0f, a, g);
  }
  return CUDNN_STATUS_SUCCESS;
}

/// cudnnFindConvolution*AlgorithmEx: every algorithm run and timed on the
/// caller's buffers (see the top).
template <typename Perf>
cudnnStatus_t find(ConvDir dir, cudnnHandle_t h, const Descs& d, const Operands& o, int requested,
                   int* returned, Perf* results, void* ws, size_t wsBytes) {
  const char* call = kFind[static_cast<int>(dir)];
  ConvGeom g;
  if (!returned || !results || requested < 1 || !o.in1 || !o.in2 || !o.out)
    return CUDNN_STATUS_BAD_PARAM;
  if (cudnnStatus_t s = prepare(call, h, d, g); s != CUDNN_STATUS_SUCCESS)
    return s;
  checkOperands(dir, g, o, call);
  // It synchronizes: refused while a capture forbids that (which invalidates it).
  if (captureForbids(call) || cudaStreamSynchronize(h->stream) != cudaSuccess)
    return CUDNN_STATUS_EXECUTION_FAILED_CUDART;
  const size_t have = ws ? wsBytes : 0;
  const int count = kAlgoCount[static_cast<int>(dir)];
  std::vector<Perf> all(static_cast<size_t>(count));
  for (int algo = 0; algo < count; ++algo) {
    const ConvAlgo a = convAlgo(dir, algo, g);
    cudnnStatus_t status = !a.supported         ? CUDNN_STATUS_NOT_SUPPORTED
                           : a.workspace > have ? CUDNN_STATUS_BAD_PARAM
                                                : CUDNN_STATUS_SUCCESS;
    auto ms = std::make_shared<float>(-1.0f);
    if (status == CUDNN_STATUS_SUCCESS) {
      if (a.workspace > 0)
        operand(ws, a.workspace, call, "workSpace");
      // Run and timed on the stream, as on a GPU; waited for at once.
      cudnnStatus_t ran = submit(h, call, [=] {
        auto start = std::chrono::steady_clock::now();
        runConv(dir, g, a, o.in1, o.in2, o.out, Scale{}, ws, runSeed());
        *ms = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - start)
                  .count();
      });
      if (ran != CUDNN_STATUS_SUCCESS || cudaStreamSynchronize(h->stream) != cudaSuccess)
        return CUDNN_STATUS_EXECUTION_FAILED_CUDART;
    }
    fill(all[static_cast<size_t>(algo)], algo, status, *ms, a, g);
  }
  std::stable_sort(all.begin(), all.end(), [](const Perf& a, const Perf& b) {
    bool okA = a.status == CUDNN_STATUS_SUCCESS, okB = b.status == CUDNN_STATUS_SUCCESS;
    if (okA != okB)
      return okA;
    return okA && a.time < b.time;
  });
  *returned = std::min(requested, count);
  std::copy(all.begin(), all.begin() + *returned, results);
  return CUDNN_STATUS_SUCCESS;
}

/// cudnnGetConvolution*WorkspaceSize.
cudnnStatus_t workspaceSize(ConvDir dir, cudnnHandle_t h, const Descs& d, int algo, size_t* bytes,
                            const char* call) {
  ConvGeom g;
  if (!bytes)
    return CUDNN_STATUS_BAD_PARAM;
  if (cudnnStatus_t s = prepare(call, h, d, g); s != CUDNN_STATUS_SUCCESS)
    return s;
  if (algo < 0 || algo >= kAlgoCount[static_cast<int>(dir)])
    return CUDNN_STATUS_BAD_PARAM;
  const ConvAlgo a = convAlgo(dir, algo, g);
  if (!a.supported)
    return CUDNN_STATUS_NOT_SUPPORTED;
  *bytes = a.workspace;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t maxCount(cudnnHandle_t h, int* count, ConvDir dir, const char* call) {
  if (!h || !count)
    return CUDNN_STATUS_BAD_PARAM;
  checkLive(h, Kind::Handle, call, "handle");
  *count = kAlgoCount[static_cast<int>(dir)];
  return CUDNN_STATUS_SUCCESS;
}

} // namespace
} // namespace lwemu::dnn

using namespace lwemu::dnn;

extern "C" {

//===--- Forward ----------------------------------------------------------===//

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  return maxCount(handle, count, ConvDir::Fwd, "cudnnGetConvolutionForwardAlgorithmMaxCount");
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnFilterDescriptor_t filterDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount, int* returnedAlgoCount,
    cudnnConvolutionFwdAlgoPerf_t* perfResults) {
  return heuristics(ConvDir::Fwd, handle, {srcDesc, filterDesc, convDesc, destDesc},
                    requestedAlgoCount, returnedAlgoCount, perfResults,
                    "cudnnGetConvolutionForwardAlgorithm_v7");
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void* x,
    const cudnnFilterDescriptor_t wDesc, const void* w, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t yDesc, void* y, const int requestedAlgoCount,
    int* returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t* perfResults, void* workSpace,
    size_t workSpaceSizeInBytes) {
  return find(ConvDir::Fwd, handle, {xDesc, wDesc, convDesc, yDesc}, {x, w, y}, requestedAlgoCount,
              returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnFilterDescriptor_t wDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc,
    cudnnConvolutionFwdAlgo_t algo, size_t* sizeInBytes) {
  return workspaceSize(ConvDir::Fwd, handle, {xDesc, wDesc, convDesc, yDesc}, algo, sizeInBytes,
                       "cudnnGetConvolutionForwardWorkspaceSize");
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha,
                                      const cudnnTensorDescriptor_t xDesc, const void* x,
                                      const cudnnFilterDescriptor_t wDesc, const void* w,
                                      const cudnnConvolutionDescriptor_t convDesc,
                                      cudnnConvolutionFwdAlgo_t algo, void* workSpace,
                                      size_t workSpaceSizeInBytes, const void* beta,
                                      const cudnnTensorDescriptor_t yDesc, void* y) {
  return execute(ConvDir::Fwd, handle, alpha, {xDesc, wDesc, convDesc, yDesc}, {x, w, y}, algo,
                 workSpace, workSpaceSizeInBytes, beta);
}

//===--- Backward data ----------------------------------------------------===//

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  return maxCount(handle, count, ConvDir::BwdData,
                  "cudnnGetConvolutionBackwardDataAlgorithmMaxCount");
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount, int* returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t* perfResults) {
  return heuristics(ConvDir::BwdData, handle, {gradDesc, filterDesc, convDesc, diffDesc},
                    requestedAlgoCount, returnedAlgoCount, perfResults,
                    "cudnnGetConvolutionBackwardDataAlgorithm_v7");
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const void* w,
    const cudnnTensorDescriptor_t dyDesc, const void* dy,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, void* dx,
    const int requestedAlgoCount, int* returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t* perfResults, void* workSpace, size_t workSpaceSizeInBytes) {
  return find(ConvDir::BwdData, handle, {dxDesc, wDesc, convDesc, dyDesc}, {dy, w, dx},
              requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc,
    cudnnConvolutionBwdDataAlgo_t algo, size_t* sizeInBytes) {
  return workspaceSize(ConvDir::BwdData, handle, {dxDesc, wDesc, convDesc, dyDesc}, algo,
                       sizeInBytes, "cudnnGetConvolutionBackwardDataWorkspaceSize");
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha,
                                           const cudnnFilterDescriptor_t wDesc, const void* w,
                                           const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                           size_t workSpaceSizeInBytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxDesc, void* dx) {
  return execute(ConvDir::BwdData, handle, alpha, {dxDesc, wDesc, convDesc, dyDesc}, {dy, w, dx},
                 algo, workSpace, workSpaceSizeInBytes, beta);
}

//===--- Backward filter --------------------------------------------------===//

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  return maxCount(handle, count, ConvDir::BwdFilter,
                  "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount");
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnFilterDescriptor_t gradDesc, const int requestedAlgoCount, int* returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t* perfResults) {
  return heuristics(ConvDir::BwdFilter, handle, {srcDesc, gradDesc, convDesc, diffDesc},
                    requestedAlgoCount, returnedAlgoCount, perfResults,
                    "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void* x,
    const cudnnTensorDescriptor_t dyDesc, const void* y,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t dwDesc, void* dw,
    const int requestedAlgoCount, int* returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t* perfResults, void* workSpace,
    size_t workSpaceSizeInBytes) {
  return find(ConvDir::BwdFilter, handle, {xDesc, dwDesc, convDesc, dyDesc}, {x, y, dw},
              requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t* sizeInBytes) {
  return workspaceSize(ConvDir::BwdFilter, handle, {xDesc, gradDesc, convDesc, dyDesc}, algo,
                       sizeInBytes, "cudnnGetConvolutionBackwardFilterWorkspaceSize");
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void* x,
                                             const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workSpace,
                                             size_t workSpaceSizeInBytes, const void* beta,
                                             const cudnnFilterDescriptor_t dwDesc, void* dw) {
  return execute(ConvDir::BwdFilter, handle, alpha, {xDesc, dwDesc, convDesc, dyDesc}, {x, dy, dw},
                 algo, workSpace, workSpaceSizeInBytes, beta);
}

} // extern "C"
