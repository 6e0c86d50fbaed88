// ReLU on oneDNN eltwise over the stored elements (any layout; zero channel padding
// stays zero); the backward reads the forward's output, so the forward
// can run in place and the layer keeps only one tensor.
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/dnnl_util.h"

namespace dpb::cpu {

namespace {
using namespace dnnl;
struct ReluFwd {
  eltwise_forward::primitive_desc pd;
  eltwise_forward prim;
};
struct ReluBwd {
  eltwise_backward prim;
};

std::shared_ptr<ReluFwd> get_forward(CpuContext& ctx, int64_t n) {
  return ctx.cached<ReluFwd>(key("relu_fwd", n), [&] {
    eltwise_forward::desc d(prop_kind::forward_training, algorithm::eltwise_relu_use_dst_for_bwd, md({n}, tag::a),
                            0.0f, 0.0f);
    eltwise_forward::primitive_desc pd(d, user_scratchpad(), ctx.engine());
    return ReluFwd{pd, eltwise_forward(pd)};
  });
}
}  // namespace

void relu_forward(const Tensor& x, Tensor& y) {
  auto& ctx = context(x.device().index);
  const int64_t n = x.storage_numel();
  auto f = get_forward(ctx, n);
  run(ctx, f->prim, {{DNNL_ARG_SRC, mem(md({n}, tag::a), ctx, x)}, {DNNL_ARG_DST, mem(md({n}, tag::a), ctx, y)}});
}

void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  auto& ctx = context(y.device().index);
  const int64_t n = y.storage_numel();
  auto b = ctx.cached<ReluBwd>(key("relu_bwd", n), [&] {
    eltwise_backward::desc d(algorithm::eltwise_relu_use_dst_for_bwd, md({n}, tag::a), md({n}, tag::a), 0.0f, 0.0f);
    eltwise_backward::primitive_desc pd(d, user_scratchpad(), ctx.engine(), get_forward(ctx, n)->pd);
    return ReluBwd{eltwise_backward(pd)};
  });
  run(ctx, b->prim,
      {{DNNL_ARG_DST, mem(md({n}, tag::a), ctx, y)},
       {DNNL_ARG_DIFF_DST, mem(md({n}, tag::a), ctx, dy)},
       {DNNL_ARG_DIFF_SRC, mem(md({n}, tag::a), ctx, dx)}});
}

}  // namespace dpb::cpu
