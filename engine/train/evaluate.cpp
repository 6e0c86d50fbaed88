#include "engine/train/evaluate.h"

#include <numeric>

#include "engine/core/clock.h"

namespace dpb {

EvalResult evaluate(Model& model, const Dataset& data, int64_t batch, Device device, const EvalLoss& loss) {
  DPB_CHECK(batch >= 1) << "evaluation batch must be >= 1, got " << batch;
  const bool was_training = model.is_training();
  model.eval();
  Stopwatch sw;
  EvalResult r;
  double loss_sum = 0;
  int64_t correct = 0;
  for (int64_t begin = 0; begin < data.size(); begin += batch) {
    std::vector<int64_t> idx(static_cast<size_t>(std::min(batch, data.size() - begin)));
    std::iota(idx.begin(), idx.end(), begin);
    Batch b = make_batch(data, idx);
    Tensor out = model.forward(b.x.to(device));
    // Under model parallelism the output comes from the last stage's device.
    const Tensor target = b.target.to(out.device());
    LossResult l = loss ? loss(out, target) : compute_loss(model.spec().loss, out, target, false);
    loss_sum += static_cast<double>(l.loss) * static_cast<double>(idx.size());
    correct += l.correct;
    r.samples += static_cast<int64_t>(idx.size());
  }
  model.train(was_training);
  r.loss = loss_sum / static_cast<double>(r.samples);
  // A language model is right or wrong once per token.
  const int64_t per_sample = model.spec().per_position ? model.spec().input[0] : 1;
  r.accuracy = static_cast<double>(correct) / static_cast<double>(r.samples * per_sample);
  r.seconds = sw.elapsed_s();
  return r;
}

}  // namespace dpb
