#include "engine/nn/init.h"

#include "engine/nn/module.h"

namespace dpb::init {

namespace {
thread_local bool deferring = false;

void defer(Tensor& t, DeferredValues::Kind kind, float scale, Generator& gen) {
  DPB_CHECK(t.dtype() == DType::f32 && t.layout() == Layout::plain)
      << "deferred initialisation of a " << dtype_name(t.dtype()) << " " << layout_name(t.layout()) << " tensor";
  auto v = std::make_shared<DeferredValues>();
  v->kind = kind;
  v->scale = scale;
  v->start = gen;
  if (kind == DeferredValues::Kind::uniform) gen.skip_uniforms(t.numel());
  else gen.skip_normals(t.numel());
  t = Tensor::deferred(t.shape(), t.device(), std::move(v));
}
}  // namespace

DeferredInit::DeferredInit() : outer_(deferring) { deferring = true; }
DeferredInit::~DeferredInit() { deferring = outer_; }
bool DeferredInit::active() { return deferring; }

void uniform(Tensor& t, float bound, Generator& gen) {
  if (deferring) return defer(t, DeferredValues::Kind::uniform, bound, gen);
  float* p = t.host_data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = gen.uniform(-bound, bound);
}

void normal(Tensor& t, float std, Generator& gen) {
  if (deferring) return defer(t, DeferredValues::Kind::normal, std, gen);
  float* p = t.host_data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = std * static_cast<float>(gen.normal());
}

void draw(const DeferredValues& v, int64_t first, int64_t count, Tensor out) {
  DPB_CHECK(first >= 0 && count >= 0 && out.numel() == count && out.dtype() == DType::f32)
      << "draw: " << count << " values from " << first << " into " << out.shape() << " " << dtype_name(out.dtype());
  if (count == 0) return;
  // Straight into a host tensor; through a host copy to a device.
  Tensor host = out.device().is_cpu() ? out : Tensor::empty(out.shape());
  float* p = host.host_data();
  Generator g = v.start;
  if (v.kind == DeferredValues::Kind::uniform) {
    g.skip_uniforms(first);
    for (int64_t i = 0; i < count; ++i) p[i] = g.uniform(-v.scale, v.scale);
  } else {
    g.skip_normals(first);
    for (int64_t i = 0; i < count; ++i) p[i] = v.scale * static_cast<float>(g.normal());
  }
  if (!out.device().is_cpu()) out.copy_from(host);
}

void materialize(Module& m) {
  for (Parameter* p : m.parameters()) {
    const DeferredValues* v = p->data().deferred_values();
    if (!v) continue;
    Tensor whole = Tensor::empty(p->data().shape(), p->data().device());
    draw(*v, 0, whole.numel(), whole);
    p->data() = whole;
  }
}

}  // namespace dpb::init
