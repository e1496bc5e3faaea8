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
  for (std::size_t i = 0; i < params_.size(); ++i)
    ops::adamw_step(params_[i]->data, params_[i]->grad, m_[i], v_[i], options_, step_);
}

}  // namespace tidal::optim
