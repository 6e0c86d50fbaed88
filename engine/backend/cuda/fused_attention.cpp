// Causal attention on cuDNN's fused flash-attention engines, through the backend graph
// API. cuDNN recognises attention as a graph of primitive ops (batched products,
// pointwise ops, row reductions) in one pattern, the one its own frontend builds for
// scaled dot-product attention, and runs the whole graph as one kernel:
//
//   forward:  S = Q K^T * scale, masked to keys <= query (-inf above the diagonal);
//             M = rowmax S, Z = rowsum exp(S - M), stats = M + log Z, O = (exp(S - M) / Z) V
//   backward: D = rowsum(dO * O); P = exp(S - stats); dV = P^T dO;
//             dS = P * (dO V^T - D) * scale; dK = dS^T Q; dQ = dS K (accumulated in fp32)
//
// Q, K and V are read in place from the fused projection qkv (N, T, 3C) through strides
// (head h of q is columns h*D..h*D+D-1), O and dO are (N, T, C), and dQ, dK, dV are
// written in place into dqkv (N, T, 3C), so no head is split out or merged back.
// The graphs are built per (shape, stream) once and cached in the device context.
#include "engine/backend/cuda/fused_attention.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "engine/backend/cuda/cudnn_util.h"
#include "engine/core/log.h"

namespace dpb::cuda {

namespace {

using Dims = std::vector<int64_t>;

// A step of building a graph that cuDNN refused, in its words.
struct Refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void ok(cudnnStatus_t s, const std::string& what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof detail);
  throw Refused(fmt::format("{}: {}{}{}", what, cudnnGetErrorString(s), detail[0] ? " (" : "",
                            detail[0] ? std::string(detail) + ")" : std::string()));
}

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) { ok(cudnnBackendCreateDescriptor(type, &d_), "create descriptor"); }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  template <typename T>
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values, int64_t count = 1) {
    ok(cudnnBackendSetAttribute(d_, name, type, count, values), fmt::format("attribute {}", static_cast<int>(name)));
    return *this;
  }
  Desc& set_desc(cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t d) {
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &d);
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

Dims packed_strides(const Dims& dims) {
  Dims s(dims.size());
  int64_t m = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    s[i] = m;
    m *= dims[i];
  }
  return s;
}

// Where plans are built for: a cuDNN handle (its GPU), or a described GPU without one
// (a device-properties descriptor: cuDNN's deviceless ahead-of-time compilation).
struct Target {
  cudnnHandle_t handle = nullptr;
  cudnnBackendDescriptor_t device = nullptr;
};

// An execution plan and every descriptor it was built from (kept alive with it).
struct Plan {
  std::vector<std::unique_ptr<Desc>> descs;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace_bytes = 0;
};

// Builds one operation graph op by op, then the first execution plan cuDNN finalizes.
class GraphBuilder {
 public:
  // A tensor bound to memory at run time by its uid.
  cudnnBackendDescriptor_t io(int64_t uid, const Dims& dims, const Dims& strides, cudnnDataType_t t) {
    return tensor(uid, dims, strides, t, false, false);
  }
  // A float scalar passed by value (its host address goes in the variant pack).
  cudnnBackendDescriptor_t scalar(int64_t uid) {
    return tensor(uid, {1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, false, true);
  }
  // An intermediate the fused kernel keeps to itself.
  cudnnBackendDescriptor_t virt(const Dims& dims, cudnnDataType_t t = CUDNN_DATA_FLOAT) {
    return tensor(next_virtual_++, dims, packed_strides(dims), t, true, false);
  }
  cudnnBackendDescriptor_t virt(const Dims& dims, const Dims& strides, cudnnDataType_t t) {
    return tensor(next_virtual_++, dims, strides, t, true, false);
  }

  // y = mode(x[, b][, t]); GEN_INDEX takes `axis`.
  void pointwise(const char* what, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                 cudnnBackendDescriptor_t y, cudnnDataType_t precision = CUDNN_DATA_FLOAT,
                 cudnnBackendDescriptor_t t = nullptr, int64_t axis = -1) {
    Desc& pw = own(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode);
    pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &precision);
    if (axis >= 0) pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, &axis);
    finalize(pw, what);
    Desc& op = own(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw.get());
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    add(op, what);
  }

  // y (..., 1) = op over the last dimension of x.
  void reduction(const char* what, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    Desc& r = own(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &mode);
    r.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &f32);
    finalize(r, what);
    Desc& op = own(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r.get());
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    add(op, what);
  }

  // c (B.., M, N) = a (B.., M, K) b (B.., K, N), accumulated in fp32.
  void matmul(const char* what, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    Desc& mm = own(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &f32);
    finalize(mm, what);
    Desc& op = own(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm.get());
    add(op, what);
  }

  // y: the same elements as x, seen with y's dimensions and strides (a transpose).
  void reshape(const char* what, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    Desc& op = own(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    add(op, what);
  }

  // The operation graph and the first engine configuration the heuristics offer whose
  // plan finalizes; Refused naming what each configuration said when none does.
  std::unique_ptr<Plan> build(const Target& target, const char* which) {
    Desc& graph = own(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (target.handle) graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &target.handle);
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops_.data(),
              static_cast<int64_t>(ops_.size()));
    finalize(graph, fmt::format("{} operation graph", which));
    std::string tried;
    // Without a GPU (a described device), an engine may take the graph and still fail to
    // finalize its plan for want of the CUDA driver: the graph is accepted, its
    // workspace unknown.
    bool needs_driver = false;
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      Desc& heur = own(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
      heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph.get());
      heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
      if (target.device) heur.set_desc(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, target.device);
      const char* mode_name = mode == CUDNN_HEUR_MODE_A ? "heuristics A" : "fallback heuristics";
      if (cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) {
        tried += fmt::format("{}{}: no result", tried.empty() ? "" : "; ", mode_name);
        continue;
      }
      int64_t count = 0;
      ok(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                  nullptr),
         "count engine configurations");
      std::vector<cudnnBackendDescriptor_t> configs;
      for (int64_t i = 0; i < count; ++i) configs.push_back(own(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).get());
      int64_t got = 0;
      if (count > 0) {
        ok(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                    &got, configs.data()),
           "read engine configurations");
      }
      tried += fmt::format("{}{}: {} configuration(s)", tried.empty() ? "" : "; ", mode_name, got);
      for (int64_t i = 0; i < got; ++i) {
        auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        if (target.handle) plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &target.handle);
        if (target.device) plan->set_desc(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, target.device);
        plan->set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i]);
        const cudnnStatus_t s = cudnnBackendFinalize(plan->get());
        if (s != CUDNN_STATUS_SUCCESS) {
          needs_driver |= target.device && s == CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER;
          tried += fmt::format(", #{} {}", i, cudnnGetErrorString(s));
          continue;
        }
        auto out = std::make_unique<Plan>();
        int64_t n = 0;
        ok(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                    &out->workspace_bytes),
           "plan workspace size");
        out->plan = plan->get();
        out->descs = std::move(descs_);
        out->descs.push_back(std::move(plan));
        return out;
      }
    }
    if (needs_driver) {
      auto out = std::make_unique<Plan>();
      out->workspace_bytes = -1;
      out->descs = std::move(descs_);
      return out;
    }
    throw Refused(fmt::format("{}: no engine runs the graph ({})", which, tried));
  }

 private:
  cudnnBackendDescriptor_t tensor(int64_t uid, const Dims& dims, const Dims& strides, cudnnDataType_t t,
                                  bool is_virtual, bool by_value) {
    Desc& d = own(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16;
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &t);
    d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(), static_cast<int64_t>(dims.size()));
    d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), static_cast<int64_t>(strides.size()));
    d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid);
    d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment);
    if (is_virtual) d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &is_virtual);
    if (by_value) d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, &by_value);
    finalize(d, fmt::format("tensor {}", uid));
    return d.get();
  }
  Desc& own(cudnnBackendDescriptorType_t type) {
    descs_.push_back(std::make_unique<Desc>(type));
    return *descs_.back();
  }
  static void finalize(Desc& d, const std::string& what) { ok(cudnnBackendFinalize(d.get()), what); }
  void add(Desc& op, const char* what) {
    finalize(op, what);
    ops_.push_back(op.get());
  }

  std::vector<std::unique_ptr<Desc>> descs_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_ = 1000;
};

// The uids the variant packs bind.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kNegInf,
  kOne,
  kDO,
  kDQ,
  kDK,
  kDV,
  kDotSum,
  kDQAccum,
};

struct AttnShape {
  int64_t N, T, H, D;
  int64_t C() const { return H * D; }
  // Head views of (N, T, width) rows: (N, H, T, D) and its transpose (N, H, D, T).
  Dims heads() const { return {N, H, T, D}; }
  Dims heads_t() const { return {N, H, D, T}; }
  Dims strides(int64_t width) const { return {T * width, D, width, 1}; }
  Dims strides_t(int64_t width) const { return {T * width, D, 1, width}; }
  Dims scores() const { return {N, H, T, T}; }
  Dims rows() const { return {N, H, T, 1}; }
};

// scores with every key after its query set to the lowest float: row index >= column
// index keeps the score (the causal mask as cuDNN's frontend writes it). The indices are
// int32 in cuDNN 9's frontend and float in its first versions; both are tried.
cudnnBackendDescriptor_t causal_mask(GraphBuilder& g, const AttnShape& s, cudnnBackendDescriptor_t scores,
                                     cudnnBackendDescriptor_t lowest, cudnnDataType_t index) {
  auto row = g.virt(s.scores(), index);
  auto col = g.virt(s.scores(), index);
  auto keep = g.virt(s.scores(), CUDNN_DATA_BOOLEAN);
  auto masked = g.virt(s.scores());
  g.pointwise("row index", CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, row, index, nullptr, 2);
  g.pointwise("column index", CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, col, index, nullptr, 3);
  g.pointwise("row >= column", CUDNN_POINTWISE_CMP_GE, row, col, keep, CUDNN_DATA_BOOLEAN);
  g.pointwise("causal mask", CUDNN_POINTWISE_BINARY_SELECT, scores, lowest, masked, CUDNN_DATA_FLOAT, keep);
  return masked;
}

std::unique_ptr<Plan> forward_plan(const Target& target, const AttnShape& s, cudnnDataType_t index) {
  GraphBuilder g;
  const int64_t w3 = 3 * s.C();
  auto q = g.io(kQ, s.heads(), s.strides(w3), CUDNN_DATA_BFLOAT16);
  auto kt = g.io(kK, s.heads_t(), s.strides_t(w3), CUDNN_DATA_BFLOAT16);
  auto v = g.io(kV, s.heads(), s.strides(w3), CUDNN_DATA_BFLOAT16);
  auto o = g.io(kO, s.heads(), s.strides(s.C()), CUDNN_DATA_BFLOAT16);
  auto stats = g.io(kStats, s.rows(), packed_strides(s.rows()), CUDNN_DATA_FLOAT);
  auto scale = g.scalar(kScale);
  auto lowest = g.scalar(kNegInf);

  auto scores = g.virt(s.scores());
  g.matmul("S = Q K^T", q, kt, scores);
  auto scaled = g.virt(s.scores());
  g.pointwise("S * scale", CUDNN_POINTWISE_MUL, scores, scale, scaled);
  auto masked = causal_mask(g, s, scaled, lowest, index);
  auto row_max = g.virt(s.rows());
  g.reduction("M = rowmax S", CUDNN_REDUCE_TENSOR_MAX, masked, row_max);
  auto shifted = g.virt(s.scores());
  g.pointwise("S - M", CUDNN_POINTWISE_SUB, masked, row_max, shifted);
  auto e = g.virt(s.scores());
  g.pointwise("exp(S - M)", CUDNN_POINTWISE_EXP, shifted, nullptr, e);
  auto z = g.virt(s.rows());
  g.reduction("Z = rowsum exp", CUDNN_REDUCE_TENSOR_ADD, e, z);
  auto log_z = g.virt(s.rows());
  g.pointwise("log Z", CUDNN_POINTWISE_LOG, z, nullptr, log_z);
  g.pointwise("stats = M + log Z", CUDNN_POINTWISE_ADD, row_max, log_z, stats);
  auto p = g.virt(s.scores(), CUDNN_DATA_BFLOAT16);
  g.pointwise("P = exp / Z", CUDNN_POINTWISE_DIV, e, z, p);
  g.matmul("O = P V", p, v, o);
  return g.build(target, "attention forward");
}

std::unique_ptr<Plan> backward_plan(const Target& target, const AttnShape& s, cudnnDataType_t index) {
  GraphBuilder g;
  const int64_t w3 = 3 * s.C();
  auto q = g.io(kQ, s.heads(), s.strides(w3), CUDNN_DATA_BFLOAT16);
  auto kt = g.io(kK, s.heads_t(), s.strides_t(w3), CUDNN_DATA_BFLOAT16);
  auto vt = g.io(kV, s.heads_t(), s.strides_t(w3), CUDNN_DATA_BFLOAT16);
  auto o = g.io(kO, s.heads(), s.strides(s.C()), CUDNN_DATA_BFLOAT16);
  auto dout = g.io(kDO, s.heads(), s.strides(s.C()), CUDNN_DATA_BFLOAT16);
  auto stats = g.io(kStats, s.rows(), packed_strides(s.rows()), CUDNN_DATA_FLOAT);
  auto dq = g.io(kDQ, s.heads(), s.strides(w3), CUDNN_DATA_BFLOAT16);
  auto dk = g.io(kDK, s.heads(), s.strides(w3), CUDNN_DATA_BFLOAT16);
  auto dv = g.io(kDV, s.heads(), s.strides(w3), CUDNN_DATA_BFLOAT16);
  auto dot_sum = g.io(kDotSum, s.rows(), packed_strides(s.rows()), CUDNN_DATA_FLOAT);
  auto dq_accum = g.io(kDQAccum, s.heads(), packed_strides(s.heads()), CUDNN_DATA_FLOAT);
  auto scale = g.scalar(kScale);
  auto lowest = g.scalar(kNegInf);
  auto one = g.scalar(kOne);

  // D = rowsum(dO * O), kept in memory for the kernel's passes.
  auto d_o = g.virt(s.heads());
  g.pointwise("dO * O", CUDNN_POINTWISE_MUL, dout, o, d_o);
  auto d_sum = g.virt(s.rows());
  g.reduction("rowsum(dO * O)", CUDNN_REDUCE_TENSOR_ADD, d_o, d_sum);
  g.pointwise("D", CUDNN_POINTWISE_MUL, d_sum, one, dot_sum);

  // P = exp(S * scale - stats), masked.
  auto scores = g.virt(s.scores());
  g.matmul("S = Q K^T", q, kt, scores);
  auto scaled = g.virt(s.scores());
  g.pointwise("S * scale", CUDNN_POINTWISE_MUL, scores, scale, scaled);
  auto shifted = g.virt(s.scores());
  g.pointwise("S - stats", CUDNN_POINTWISE_SUB, scaled, stats, shifted);
  auto masked = causal_mask(g, s, shifted, lowest, index);
  auto p = g.virt(s.scores());
  g.pointwise("P = exp", CUDNN_POINTWISE_EXP, masked, nullptr, p);

  // dV = P^T dO
  const Dims transposed = {s.N, s.H, s.T, s.T};
  const Dims transposed_strides = {s.H * s.T * s.T, s.T * s.T, 1, s.T};
  auto p_t = g.virt(transposed, transposed_strides, CUDNN_DATA_BFLOAT16);
  g.reshape("P^T", p, p_t);
  g.matmul("dV = P^T dO", p_t, dout, dv);

  // dS = P * (dO V^T - D) * scale
  auto dp = g.virt(s.scores());
  g.matmul("dP = dO V^T", dout, vt, dp);
  auto dp1 = g.virt(s.scores());
  g.pointwise("dP * 1", CUDNN_POINTWISE_MUL, dp, one, dp1);
  auto dp2 = g.virt(s.scores());
  g.pointwise("dP - D", CUDNN_POINTWISE_SUB, dp1, dot_sum, dp2);
  auto ds = g.virt(s.scores());
  g.pointwise("P * (dP - D)", CUDNN_POINTWISE_MUL, dp2, p, ds);
  auto ds_scaled = g.virt(s.scores());
  g.pointwise("dS * scale", CUDNN_POINTWISE_MUL, ds, scale, ds_scaled);

  // dK = dS^T Q
  auto ds_t = g.virt(transposed, transposed_strides, CUDNN_DATA_BFLOAT16);
  g.reshape("dS^T", ds_scaled, ds_t);
  g.matmul("dK = dS^T Q", ds_t, q, dk);

  // dQ = dS K, accumulated in fp32, then rounded into dqkv.
  auto k = g.virt(s.heads(), s.strides(w3), CUDNN_DATA_BFLOAT16);
  g.reshape("K", kt, k);
  g.matmul("dQ = dS K", ds_scaled, k, dq_accum);
  g.pointwise("dQ", CUDNN_POINTWISE_IDENTITY, dq_accum, nullptr, dq);
  return g.build(target, "attention backward");
}

// The plans of one shape on one stream, or why cuDNN refused them.
struct FusedPlans {
  std::shared_ptr<Plan> forward, backward;
  std::string refused;
};

enum class Choice { automatic, cudnn, cublas };

Choice choice() {
  static const Choice c = [] {
    const char* e = std::getenv("DPB_CUDA_ATTENTION");
    const std::string v = e ? e : "";
    if (v.empty() || v == "auto") return Choice::automatic;
    if (v == "cudnn") return Choice::cudnn;
    if (v == "cublas") return Choice::cublas;
    DPB_FAIL() << "DPB_CUDA_ATTENTION='" << v << "' (valid: auto, cudnn, cublas)";
  }();
  return c;
}

AttnShape shape_of(const Tensor& qkv, int64_t heads) {
  return {qkv.size(0), qkv.size(1), heads, qkv.size(2) / 3 / heads};
}

// Why this shape cannot run fused, before asking cuDNN.
std::string precondition(const Tensor& qkv, const AttnShape& s) {
  if (choice() == Choice::cublas) return "DPB_CUDA_ATTENTION=cublas";
  if (qkv.dtype() != DType::bf16) return fmt::format("{} (the fused kernels take bf16)", dtype_name(qkv.dtype()));
  if (s.D % 8 != 0 || s.D > 128) return fmt::format("head width {} (fused: a multiple of 8, at most 128)", s.D);
  const size_t version = cudnnGetVersion();
  if (version < 90000) return fmt::format("cuDNN {} (fused attention here needs 9.0 or newer)", version);
  int major = 0;
  DPB_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, qkv.device().index));
  if (major < 8) return fmt::format("compute capability {}.x (fused: 8.0 or newer)", major);
  return {};
}

// Both plans for `target`, or cuDNN's refusal. The mask's indices are tried as int32,
// then float.
std::string build_plans(const Target& target, const AttnShape& s, FusedPlans& plans) {
  std::string refusals;
  for (cudnnDataType_t index : {CUDNN_DATA_INT32, CUDNN_DATA_FLOAT}) {
    try {
      plans.forward = forward_plan(target, s, index);
      plans.backward = backward_plan(target, s, index);
      return {};
    } catch (const Refused& e) {
      plans.forward.reset();
      refusals += fmt::format("{}{} indices: {}", refusals.empty() ? "" : "; ",
                              index == CUDNN_DATA_INT32 ? "int32" : "float", e.what());
    }
  }
  return "cuDNN refused the graph: " + refusals;
}

std::shared_ptr<FusedPlans> plans_for(const Tensor& qkv, int64_t heads) {
  OpEnv env = op_env(qkv);
  const AttnShape s = shape_of(qkv, heads);
  const std::string key = fmt::format("fused-attention n{} t{} h{} d{} stream {}", s.N, s.T, s.H, s.D,
                                      static_cast<const void*>(env.stream));
  std::shared_ptr<FusedPlans> plans;
  if (env.ctx.find_cached(key, &plans)) return plans;
  plans = std::make_shared<FusedPlans>();
  plans->refused = precondition(qkv, s);
  if (plans->refused.empty()) plans->refused = build_plans(Target{env.res.cudnn, nullptr}, s, *plans);
  if (plans->refused.empty()) {
    log::info("attention (T {}, {} heads of {}) fused by cuDNN: workspace {} + {} bytes", s.T, s.H, s.D,
              plans->forward->workspace_bytes, plans->backward->workspace_bytes);
  } else {
    DPB_CHECK(choice() != Choice::cudnn) << "DPB_CUDA_ATTENTION=cudnn, but attention (N " << s.N << ", T " << s.T
                                         << ", " << s.H << " heads of " << s.D << ") cannot run fused: "
                                         << plans->refused;
    if (choice() != Choice::cublas && qkv.dtype() == DType::bf16) {
      log::info("attention (T {}, {} heads of {}) on cuBLAS products: {}", s.T, s.H, s.D, plans->refused);
    }
  }
  env.ctx.store_cached(key, plans);
  return plans;
}

// Runs a plan with each uid bound to its memory (the graphs declare 16-byte alignment;
// the scalars are host addresses, read when the kernel is launched).
void execute(OpEnv& env, const Plan& plan, const std::vector<std::pair<int64_t, void*>>& bindings) {
  std::vector<int64_t> uids;
  std::vector<void*> pointers;
  for (const auto& [uid, p] : bindings) {
    const bool host_scalar = uid == kScale || uid == kNegInf || uid == kOne;
    DPB_CHECK(host_scalar || reinterpret_cast<uintptr_t>(p) % 16 == 0)
        << "fused attention: tensor " << uid << " at " << p << " is not 16-byte aligned";
    uids.push_back(uid);
    pointers.push_back(p);
  }
  void* workspace = plan.workspace_bytes > 0
                        ? env.ctx.workspace(env.stream, static_cast<size_t>(plan.workspace_bytes))
                        : nullptr;
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), static_cast<int64_t>(uids.size()));
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers.data(),
           static_cast<int64_t>(pointers.size()));
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace);
  ok(cudnnBackendFinalize(pack.get()), "variant pack");
  DPB_CUDNN_CHECK(cudnnBackendExecute(env.res.cudnn, plan.plan, pack.get())) << "fused attention";
}

char* at_column(const Tensor& t, int64_t column) { return static_cast<char*>(t.raw()) + column * 2; }

}  // namespace

std::string fused_attention_unsupported(const Tensor& qkv, int64_t heads) { return plans_for(qkv, heads)->refused; }

std::string fused_attention_compile_for(const std::string& device_json, int64_t N, int64_t T, int64_t heads,
                                        int64_t head_width, int64_t* workspace_bytes) {
  const AttnShape s{N, T, heads, head_width};
  try {
    Desc device(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
    device.set(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, device_json.data(),
               static_cast<int64_t>(device_json.size()));
    ok(cudnnBackendFinalize(device.get()), "device properties");
    FusedPlans plans;
    std::string refused = build_plans(Target{nullptr, device.get()}, s, plans);
    if (refused.empty() && workspace_bytes) {
      workspace_bytes[0] = plans.forward->workspace_bytes;
      workspace_bytes[1] = plans.backward->workspace_bytes;
    }
    return refused;
  } catch (const Refused& e) {
    return e.what();
  }
}

void fused_attention_forward(const Tensor& qkv, int64_t heads, Tensor& y, Tensor& stats) {
  const auto plans = plans_for(qkv, heads);
  DPB_CHECK(plans->refused.empty()) << "fused attention: " << plans->refused;
  DPB_CHECK(y.dtype() == DType::bf16 && stats.dtype() == DType::f32) << "fused attention: y bf16, stats fp32";
  OpEnv env = op_env(qkv);
  const AttnShape s = shape_of(qkv, heads);
  float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  float lowest = std::numeric_limits<float>::lowest();
  execute(env, *plans->forward,
          {{kQ, qkv.raw()}, {kK, at_column(qkv, s.C())}, {kV, at_column(qkv, 2 * s.C())}, {kO, y.raw()},
           {kStats, stats.raw()}, {kScale, &scale}, {kNegInf, &lowest}});
}

void fused_attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& stats, const Tensor& dy,
                              int64_t heads, Tensor& dqkv) {
  const auto plans = plans_for(qkv, heads);
  DPB_CHECK(plans->refused.empty()) << "fused attention: " << plans->refused;
  OpEnv env = op_env(qkv);
  const AttnShape s = shape_of(qkv, heads);
  const Tensor dyc = dy.to_dtype(DType::bf16);
  Tensor dc = dqkv.dtype() == DType::bf16 ? dqkv : Tensor::empty(dqkv.shape(), dqkv.device(), DType::bf16);
  Tensor dot_sum = Tensor::empty({s.N, s.H, s.T}, qkv.device());
  Tensor dq_accum = Tensor::empty({s.N, s.H, s.T, s.D}, qkv.device());
  // Zeroed here: cuDNN before 9.6 expects it so, and 9.6 on no longer needs it.
  DPB_CUDA_CHECK(cudaMemsetAsync(dq_accum.raw(), 0, dq_accum.nbytes(), env.stream));
  float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  float lowest = std::numeric_limits<float>::lowest();
  float one = 1.0f;
  execute(env, *plans->backward,
          {{kQ, qkv.raw()},
           {kK, at_column(qkv, s.C())},
           {kV, at_column(qkv, 2 * s.C())},
           {kO, y.raw()},
           {kDO, dyc.raw()},
           {kStats, stats.raw()},
           {kDQ, dc.raw()},
           {kDK, at_column(dc, s.C())},
           {kDV, at_column(dc, 2 * s.C())},
           {kDotSum, dot_sum.raw()},
           {kDQAccum, dq_accum.raw()},
           {kScale, &scale},
           {kNegInf, &lowest},
           {kOne, &one}});
  if (!dc.shares_storage_with(dqkv)) dqkv.copy_from(dc.to_dtype(dqkv.dtype()));
}

}  // namespace dpb::cuda
