#include "optim/adamw.h"

namespace tidal::optim {

AdamW::AdamW(std::vector<nn::Parameter*> params, const ops::AdamWOptions& options)
    : params_(std::move(params)), options_(options) {
  // The moments live beside their parameter (GPU memory for a parameter on the GPU).
  for (nn::Parameter* p : params_) {
    Allocator& beside = p->data.allocator() ? *p->data.allocator() : default_allocator();
    m_.push_back(Tensor::zeros(p->shape, DType::f32, beside));
    v_.push_back(Tensor::zeros(p->shape, DType::f32, beside));
  }
}

void AdamW::step() {
  ++step_;
  // The parameters in runs of one device, each run one multi-tensor step (one launch a few dozen
  // parameters on a GPU).
  std::vector<ops::AdamWTensors> run;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!run.empty() && run.front().param.device() != params_[i]->data.device()) {
      ops::adamw_steps(run, options_, step_);
      run.clear();
    }
    run.push_back({.param = params_[i]->data, .grad = params_[i]->grad, .m = m_[i], .v = v_[i], .low = {}});
  }
  ops::adamw_steps(run, options_, step_);
}

}  // namespace tidal::optim
