#include "optim/adamw.h"

namespace tidal::optim {

AdamW::AdamW(std::vector<nn::Parameter*> params, const ops::AdamWOptions& options)
    : params_(std::move(params)), options_(options) {
  for (nn::Parameter* p : params_) {
    m_.push_back(Tensor::zeros(p->shape));
    v_.push_back(Tensor::zeros(p->shape));
  }
}

void AdamW::step() {
  ++step_;
  for (std::size_t i = 0; i < params_.size(); ++i)
    ops::adamw_step(params_[i]->data, params_[i]->grad, m_[i], v_[i], options_, step_);
}

}  // namespace tidal::optim
