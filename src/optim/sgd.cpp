#include "optim/sgd.h"

namespace tidal::optim {

Sgd::Sgd(std::vector<nn::Parameter*> params, const ops::SgdOptions& options)
    : params_(std::move(params)), options_(options) {
  for (nn::Parameter* p : params_) buffers_.push_back(Tensor::zeros(p->shape));
}

void Sgd::step() {
  for (std::size_t i = 0; i < params_.size(); ++i)
    ops::sgd_step(params_[i]->data, params_[i]->grad, buffers_[i], options_, first_);
  first_ = false;
}

}  // namespace tidal::optim
