// emu/CudnnGraph.cpp - the emulated cuDNN's backend (graph) API: descriptors without engines
//
// What the emulator does: it does not emulate cuDNN's engines. The backend
// descriptors lwcc's runtime builds (runtime/cuda/ConvGraph.cu: tensors,
// convolutions, pointwise operations, convolution operations, operation
// graphs, engine heuristics, engine configurations, engines, execution
// plans, variant packs) are created, their attributes checked against the
// types and counts cuDNN documents and stored, and finalized after the
// checks cuDNN makes (required attributes, matching counts, a convolution
// operation's shapes). But the heuristics descriptor finalizes with zero
// engine configurations (CUDNN_ATTR_ENGINEHEUR_RESULTS has 0 elements in
// every mode), an engine descriptor never finalizes (no engine exists at any
// global index: CUDNN_STATUS_NOT_SUPPORTED), so no execution plan can be
// finalized either, and cudnnBackendExecute returns
// CUDNN_STATUS_NOT_SUPPORTED. lwcc's runtime sees "no engine takes this
// configuration", which it handles without recording an error, and runs
// every convolution on the legacy API (CudnnConv.cpp).
//
// Statuses: a null argument is CUDNN_STATUS_BAD_PARAM_NULL_POINTER; an
// attribute of the wrong type BAD_PARAM_ATTRIBUTE_TYPE; a descriptor of the
// wrong kind where one is expected BAD_PARAM_DESCRIPTOR_TYPE, one not yet
// finalized BAD_PARAM_NOT_FINALIZED; setting an attribute of a finalized
// descriptor, or reading one of a descriptor not finalized,
// NOT_INITIALIZED; an attribute the emulator does not model (cuDNN's
// optional ones that lwcc never sets) and a descriptor type it does not
// model, NOT_SUPPORTED.
#include "CudnnInternal.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <vector>

namespace lwemu::dnn {
namespace {

struct Attr {
  cudnnBackendAttributeType_t type;
  int64_t count = 0;
  std::vector<unsigned char> bytes;
  template <typename T> T get(int64_t i = 0) const {
    T v;
    std::memcpy(&v, bytes.data() + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    return v;
  }
};

struct Backend {
  cudnnBackendDescriptorType_t type;
  bool finalized = false;
  std::map<int, Attr> attrs;
  bool has(cudnnBackendAttributeName_t n) const { return attrs.count(n) != 0; }
  const Attr& at(cudnnBackendAttributeName_t n) const { return attrs.at(n); }
};

/// What a descriptor attribute is: its type (or either of two), its count,
/// for a descriptor-typed one the kind of descriptor (kAnyOperation: any
/// operation), and whether finalizing needs it.
constexpr int kAnyOperation = -1;
struct Spec {
  cudnnBackendAttributeName_t name;
  cudnnBackendAttributeType_t type;
  int64_t minCount, maxCount;
  bool required;
  int descType = 0;
  int altType = -1;
};

constexpr auto kDesc = CUDNN_TYPE_BACKEND_DESCRIPTOR;

std::vector<Spec> convOpSpecs(cudnnBackendAttributeName_t alpha, cudnnBackendAttributeName_t beta,
                              cudnnBackendAttributeName_t conv, cudnnBackendAttributeName_t a,
                              cudnnBackendAttributeName_t b, cudnnBackendAttributeName_t c) {
  return {{alpha, CUDNN_TYPE_FLOAT, 1, 1, false, 0, CUDNN_TYPE_DOUBLE},
          {beta, CUDNN_TYPE_FLOAT, 1, 1, false, 0, CUDNN_TYPE_DOUBLE},
          {conv, kDesc, 1, 1, true, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR},
          {a, kDesc, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
          {b, kDesc, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
          {c, kDesc, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR}};
}

/// The attributes the emulator models per descriptor type; a type absent
/// here cannot be created.
const std::map<int, std::vector<Spec>>& specs() {
  static const std::map<int, std::vector<Spec>> table = {
      {CUDNN_BACKEND_TENSOR_DESCRIPTOR,
       {{CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, 1, true},
        {CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, 1, true},
        {CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 1, 8, true},
        {CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 1, 8, true},
        {CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, 1, true},
        {CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, 1, false},
        {CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, 1, false}}},
      {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR,
       {{CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, 1, true},
        {CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, 1, true},
        {CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, 1, true},
        {CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 1, 3, true},
        {CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 1, 3, true},
        {CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 1, 3, true},
        {CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 1, 3, true}}},
      {CUDNN_BACKEND_POINTWISE_DESCRIPTOR,
       {{CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, 1, true},
        {CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, 1, true}}},
      {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
       {{CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, kDesc, 1, 1, true,
         CUDNN_BACKEND_POINTWISE_DESCRIPTOR},
        {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, kDesc, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
        {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, kDesc, 1, 1, false, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
        {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, kDesc, 1, 1, true,
         CUDNN_BACKEND_TENSOR_DESCRIPTOR}}},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
       convOpSpecs(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                   CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                   CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                   CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                   CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                   CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y)},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
       convOpSpecs(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY)},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
       convOpSpecs(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                   CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY)},
      {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
       {{CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, 1, true},
        {CUDNN_ATTR_OPERATIONGRAPH_OPS, kDesc, 1, 1 << 16, true, kAnyOperation}}},
      {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR,
       {{CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, 1, true},
        {CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, kDesc, 1, 1, true,
         CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR},
        {CUDNN_ATTR_ENGINEHEUR_SM_COUNT_TARGET, CUDNN_TYPE_INT32, 1, 1, false}}},
      {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
       {{CUDNN_ATTR_ENGINECFG_ENGINE, kDesc, 1, 1, true, CUDNN_BACKEND_ENGINE_DESCRIPTOR}}},
      {CUDNN_BACKEND_ENGINE_DESCRIPTOR,
       {{CUDNN_ATTR_ENGINE_OPERATION_GRAPH, kDesc, 1, 1, true,
         CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR},
        {CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, 1, true},
        {CUDNN_ATTR_ENGINE_SM_COUNT_TARGET, CUDNN_TYPE_INT32, 1, 1, false}}},
      {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
       {{CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, 1, true},
        {CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, kDesc, 1, 1, true,
         CUDNN_BACKEND_ENGINECFG_DESCRIPTOR}}},
      {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR,
       {{CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 0, 1 << 16, true},
        {CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 0, 1 << 16, true},
        {CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, 1, false}}},
  };
  return table;
}

const Spec* findSpec(cudnnBackendDescriptorType_t type, cudnnBackendAttributeName_t name) {
  auto it = specs().find(type);
  if (it == specs().end())
    return nullptr;
  for (const Spec& s : it->second)
    if (s.name == name)
      return &s;
  return nullptr;
}

/// Bytes of one element of an attribute type the emulator models (0: not modeled).
size_t elementSize(cudnnBackendAttributeType_t t) {
  switch (t) {
  case CUDNN_TYPE_HANDLE:
    return sizeof(cudnnHandle_t);
  case CUDNN_TYPE_DATA_TYPE:
    return sizeof(cudnnDataType_t);
  case CUDNN_TYPE_BOOLEAN:
    return sizeof(bool);
  case CUDNN_TYPE_INT64:
    return sizeof(int64_t);
  case CUDNN_TYPE_FLOAT:
    return sizeof(float);
  case CUDNN_TYPE_DOUBLE:
    return sizeof(double);
  case CUDNN_TYPE_VOID_PTR:
  case CUDNN_TYPE_BACKEND_DESCRIPTOR:
    return sizeof(void*);
  case CUDNN_TYPE_CONVOLUTION_MODE:
    return sizeof(cudnnConvolutionMode_t);
  case CUDNN_TYPE_HEUR_MODE:
    return sizeof(cudnnBackendHeurMode_t);
  case CUDNN_TYPE_NUMERICAL_NOTE:
    return sizeof(cudnnBackendNumericalNote_t);
  case CUDNN_TYPE_BEHAVIOR_NOTE:
    return sizeof(cudnnBackendBehaviorNote_t);
  case CUDNN_TYPE_POINTWISE_MODE:
    return sizeof(cudnnPointwiseMode_t);
  case CUDNN_TYPE_INT32:
    return sizeof(int32_t);
  default:
    return 0;
  }
}

bool isOperation(int type) {
  switch (type) {
  case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
  case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
  case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
  case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
    return true;
  default:
    return false;
  }
}

Backend* backend(cudnnBackendDescriptor_t d, const char* call, const char* what) {
  checkLive(d, Kind::Backend, call, what);
  return static_cast<Backend*>(d);
}

/// The values of a set attribute, checked (handles live, enums in range).
cudnnStatus_t checkValues(const Spec& s, cudnnBackendAttributeType_t type, int64_t n,
                          const void* values, const char* call) {
  for (int64_t i = 0; i < n; ++i) {
    const auto* p = static_cast<const unsigned char*>(values) + i * elementSize(type);
    switch (type) {
    case CUDNN_TYPE_HANDLE: {
      cudnnHandle_t h;
      std::memcpy(&h, p, sizeof h);
      if (!h)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
      checkLive(h, Kind::Handle, call, "a handle attribute");
      break;
    }
    case CUDNN_TYPE_DATA_TYPE: {
      cudnnDataType_t t;
      std::memcpy(&t, p, sizeof t);
      if (typeStatus(t) == CUDNN_STATUS_BAD_PARAM)
        return CUDNN_STATUS_BAD_PARAM;
      break;
    }
    case CUDNN_TYPE_CONVOLUTION_MODE: {
      cudnnConvolutionMode_t m;
      std::memcpy(&m, p, sizeof m);
      if (m != CUDNN_CONVOLUTION && m != CUDNN_CROSS_CORRELATION)
        return CUDNN_STATUS_BAD_PARAM;
      break;
    }
    case CUDNN_TYPE_HEUR_MODE: {
      cudnnBackendHeurMode_t m;
      std::memcpy(&m, p, sizeof m);
      if (m < 0 || m >= CUDNN_HEUR_MODES_COUNT)
        return CUDNN_STATUS_BAD_PARAM;
      break;
    }
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: {
      void* d;
      std::memcpy(&d, p, sizeof d);
      if (!d)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
      const Backend* b = backend(d, call, "a descriptor attribute");
      if (s.descType == kAnyOperation ? !isOperation(b->type) : b->type != s.descType)
        return CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE;
      if (!b->finalized)
        return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
      break;
    }
    default:
      break;
    }
  }
  return CUDNN_STATUS_SUCCESS;
}

std::vector<int64_t> ints(const Attr& a) {
  std::vector<int64_t> v(static_cast<size_t>(a.count));
  for (int64_t i = 0; i < a.count; ++i)
    v[static_cast<size_t>(i)] = a.get<int64_t>(i);
  return v;
}

const Backend& ref(const Backend& d, cudnnBackendAttributeName_t n) {
  return *static_cast<const Backend*>(d.at(n).get<void*>());
}

/// A convolution operation's tensors fit its convolution: dims, channels
/// (groups = C / w's C), the output size of every spatial dimension, one
/// data type. names: x, w, y as the direction calls them, and the conv.
bool convolutionFits(const Backend& op, cudnnBackendAttributeName_t xn,
                     cudnnBackendAttributeName_t wn, cudnnBackendAttributeName_t yn,
                     cudnnBackendAttributeName_t cn) {
  const Backend &x = ref(op, xn), &w = ref(op, wn), &y = ref(op, yn), &conv = ref(op, cn);
  const std::vector<int64_t> xd = ints(x.at(CUDNN_ATTR_TENSOR_DIMENSIONS)),
                             wd = ints(w.at(CUDNN_ATTR_TENSOR_DIMENSIONS)),
                             yd = ints(y.at(CUDNN_ATTR_TENSOR_DIMENSIONS));
  const int64_t spatial = conv.at(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS).get<int64_t>();
  const size_t rank = static_cast<size_t>(spatial + 2);
  if (xd.size() != rank || wd.size() != rank || yd.size() != rank)
    return false;
  auto dt = [](const Backend& t) {
    return t.at(CUDNN_ATTR_TENSOR_DATA_TYPE).get<cudnnDataType_t>();
  };
  if (dt(x) != dt(w) || dt(x) != dt(y))
    return false;
  if (wd[1] <= 0 || xd[1] % wd[1] != 0)
    return false;
  const int64_t groups = xd[1] / wd[1];
  if (wd[0] % groups != 0 || yd[1] != wd[0] || yd[0] != xd[0])
    return false;
  const auto pre = ints(conv.at(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS)),
             post = ints(conv.at(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS)),
             dil = ints(conv.at(CUDNN_ATTR_CONVOLUTION_DILATIONS)),
             str = ints(conv.at(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES));
  for (size_t i = 0; i < static_cast<size_t>(spatial); ++i) {
    const int64_t room = xd[i + 2] + pre[i] + post[i] - (dil[i] * (wd[i + 2] - 1) + 1);
    if (room < 0 || yd[i + 2] != room / str[i] + 1)
      return false;
  }
  return true;
}

/// The checks of cudnnBackendFinalize beyond the required attributes.
cudnnStatus_t finalizeChecks(const Backend& d) {
  switch (d.type) {
  case CUDNN_BACKEND_TENSOR_DESCRIPTOR: {
    const auto dims = ints(d.at(CUDNN_ATTR_TENSOR_DIMENSIONS));
    const auto strides = ints(d.at(CUDNN_ATTR_TENSOR_STRIDES));
    if (dims.size() != strides.size() || d.at(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT).get<int64_t>() <= 0)
      return CUDNN_STATUS_BAD_PARAM;
    for (size_t i = 0; i < dims.size(); ++i)
      if (dims[i] <= 0 || strides[i] <= 0)
        return CUDNN_STATUS_BAD_PARAM;
    return CUDNN_STATUS_SUCCESS;
  }
  case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR: {
    const int64_t n = d.at(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS).get<int64_t>();
    for (auto name : {CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
                      CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS}) {
      if (d.at(name).count != n)
        return CUDNN_STATUS_BAD_PARAM;
      const bool positive =
          name == CUDNN_ATTR_CONVOLUTION_DILATIONS || name == CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES;
      for (int64_t v : ints(d.at(name)))
        if (positive ? v < 1 : v < 0)
          return CUDNN_STATUS_BAD_PARAM;
    }
    return CUDNN_STATUS_SUCCESS;
  }
  case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
    const auto mode = ref(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR)
                          .at(CUDNN_ATTR_POINTWISE_MODE)
                          .get<cudnnPointwiseMode_t>();
    const bool binary = mode <= CUDNN_POINTWISE_SUB && mode != CUDNN_POINTWISE_SQRT;
    return binary && !d.has(CUDNN_ATTR_OPERATION_POINTWISE_BDESC) ? CUDNN_STATUS_BAD_PARAM
                                                                  : CUDNN_STATUS_SUCCESS;
  }
  case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    return convolutionFits(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                           CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                           CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                           CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC)
               ? CUDNN_STATUS_SUCCESS
               : CUDNN_STATUS_BAD_PARAM;
  case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
    return convolutionFits(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                           CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                           CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                           CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC)
               ? CUDNN_STATUS_SUCCESS
               : CUDNN_STATUS_BAD_PARAM;
  case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
    return convolutionFits(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                           CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                           CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                           CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC)
               ? CUDNN_STATUS_SUCCESS
               : CUDNN_STATUS_BAD_PARAM;
  case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
  case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
    return CUDNN_STATUS_NOT_SUPPORTED; // the emulator has no engine (see the top)
  case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: {
    const Attr& ids = d.at(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
    if (ids.count != d.at(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS).count)
      return CUDNN_STATUS_BAD_PARAM;
    const auto v = ints(ids);
    return std::set<int64_t>(v.begin(), v.end()).size() == v.size()
               ? CUDNN_STATUS_SUCCESS
               : CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES;
  }
  default:
    return CUDNN_STATUS_SUCCESS;
  }
}

/// An attribute cuDNN computes at finalization: its type and values (all
/// empty or zero in an emulator without engines). False: not computed.
bool computed(const Backend& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t& type,
              std::vector<int64_t>& values) {
  values.clear();
  switch (name) {
  case CUDNN_ATTR_ENGINEHEUR_RESULTS: // no engine configuration, in every mode
    type = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    return d.type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR;
  case CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT:
    type = CUDNN_TYPE_INT64;
    values.push_back(0);
    return d.type == CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR;
  case CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE:
    type = CUDNN_TYPE_INT64;
    values.push_back(0);
    return d.type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR;
  case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE:
    type = CUDNN_TYPE_INT64;
    values.push_back(0);
    return d.type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR;
  case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE:
    type = CUDNN_TYPE_NUMERICAL_NOTE;
    return d.type == CUDNN_BACKEND_ENGINE_DESCRIPTOR;
  case CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE:
    type = CUDNN_TYPE_BEHAVIOR_NOTE;
    return d.type == CUDNN_BACKEND_ENGINE_DESCRIPTOR;
  default:
    return false;
  }
}

} // namespace
} // namespace lwemu::dnn

using namespace lwemu;
using namespace lwemu::dnn;

extern "C" {

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t descriptorType,
                                           cudnnBackendDescriptor_t* descriptor) {
  if (!descriptor)
    return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (!specs().count(descriptorType))
    return CUDNN_STATUS_NOT_SUPPORTED;
  auto* d = new Backend;
  d->type = descriptorType;
  addLive(d, Kind::Backend);
  *descriptor = d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  if (!descriptor)
    return CUDNN_STATUS_SUCCESS;
  if (!removeLive(descriptor, Kind::Backend))
    fatal("cudnnBackendDestroyDescriptor: not a live backend descriptor (destroyed twice, or "
          "never created)");
  delete static_cast<Backend*>(descriptor);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                       cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType,
                                       int64_t elementCount, const void* arrayOfElements) {
  const char* call = "cudnnBackendSetAttribute";
  if (!descriptor || (elementCount > 0 && !arrayOfElements))
    return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  Backend* d = backend(descriptor, call, "descriptor");
  if (d->finalized)
    return CUDNN_STATUS_NOT_INITIALIZED;
  const Spec* s = findSpec(d->type, attributeName);
  if (!s)
    return CUDNN_STATUS_NOT_SUPPORTED;
  if (attributeType != s->type && static_cast<int>(attributeType) != s->altType)
    return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
  if (elementCount < s->minCount || elementCount > s->maxCount)
    return CUDNN_STATUS_BAD_PARAM;
  if (cudnnStatus_t st = checkValues(*s, attributeType, elementCount, arrayOfElements, call);
      st != CUDNN_STATUS_SUCCESS)
    return st;
  Attr a;
  a.type = attributeType;
  a.count = elementCount;
  const size_t bytes = static_cast<size_t>(elementCount) * elementSize(attributeType);
  a.bytes.resize(bytes);
  if (bytes)
    std::memcpy(a.bytes.data(), arrayOfElements, bytes);
  d->attrs[attributeName] = std::move(a);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  if (!descriptor)
    return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  Backend* d = backend(descriptor, "cudnnBackendFinalize", "descriptor");
  if (d->finalized)
    return CUDNN_STATUS_BAD_PARAM;
  for (const Spec& s : specs().at(d->type))
    if (s.required && !d->has(s.name))
      return CUDNN_STATUS_BAD_PARAM;
  // The descriptors it refers to must still live (they were finalized when set).
  for (const auto& [name, a] : d->attrs)
    if (a.type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
      for (int64_t i = 0; i < a.count; ++i)
        checkLive(a.get<void*>(i), Kind::Backend, "cudnnBackendFinalize",
                  "a descriptor it refers to");
  if (cudnnStatus_t s = finalizeChecks(*d); s != CUDNN_STATUS_SUCCESS)
    return s;
  d->finalized = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType,
                                       int64_t requestedElementCount, int64_t* elementCount,
                                       void* arrayOfElements) {
  const char* call = "cudnnBackendGetAttribute";
  if (!descriptor || !elementCount || (requestedElementCount > 0 && !arrayOfElements))
    return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (requestedElementCount < 0)
    return CUDNN_STATUS_BAD_PARAM;
  const Backend* d = backend(descriptor, call, "descriptor");
  if (!d->finalized)
    return CUDNN_STATUS_NOT_INITIALIZED;
  cudnnBackendAttributeType_t type;
  std::vector<int64_t> values;
  if (computed(*d, attributeName, type, values)) {
    if (attributeType != type)
      return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
    const int64_t n = std::min<int64_t>(requestedElementCount, static_cast<int64_t>(values.size()));
    if (n > 0)
      std::memcpy(arrayOfElements, values.data(), static_cast<size_t>(n) * sizeof(int64_t));
    *elementCount = static_cast<int64_t>(values.size());
    return CUDNN_STATUS_SUCCESS;
  }
  auto it = d->attrs.find(attributeName);
  if (it == d->attrs.end())
    return findSpec(d->type, attributeName) ? CUDNN_STATUS_BAD_PARAM : CUDNN_STATUS_NOT_SUPPORTED;
  const Attr& a = it->second;
  if (attributeType != a.type)
    return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
  const int64_t n = std::min(requestedElementCount, a.count);
  if (a.type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    // cuDNN fills descriptors the caller created, of the same type.
    auto* out = static_cast<cudnnBackendDescriptor_t*>(arrayOfElements);
    for (int64_t i = 0; i < n; ++i) {
      if (!out[i])
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
      Backend* dst = backend(out[i], call, "a descriptor to fill");
      const Backend* src = backend(a.get<void*>(i), call, "a descriptor it refers to");
      if (dst->type != src->type)
        return CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE;
      *dst = *src;
    }
  } else if (n > 0) {
    std::memcpy(arrayOfElements, a.bytes.data(), static_cast<size_t>(n) * elementSize(a.type));
  }
  *elementCount = a.count;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t executionPlan,
                                  cudnnBackendDescriptor_t variantPack) {
  const char* call = "cudnnBackendExecute";
  if (!handle || !executionPlan || !variantPack)
    return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  checkLive(handle, Kind::Handle, call, "handle");
  const Backend* plan = backend(executionPlan, call, "executionPlan");
  const Backend* pack = backend(variantPack, call, "variantPack");
  if (plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR ||
      pack->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
    return CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE;
  // No execution plan can be finalized without an engine (see the top).
  return CUDNN_STATUS_NOT_SUPPORTED;
}

} // extern "C"
