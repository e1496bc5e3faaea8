#include "nn/tp/shard.h"

#include "core/error.h"
#include "ops/grad_norm.h"

#include <map>

namespace tidal::nn::tp {
namespace {

// The view of `full` that p's block (or its segment m's block) occupies.
Tensor block_in(const Parameter& p, Tensor full, int m) {
  const std::int64_t s = p.shape[0] / p.segments, S = full.dim(0) / p.segments;
  Tensor v = full.slice(0, m * S + (p.offset.size() ? p.offset[0] : 0), m * S + (p.offset.size() ? p.offset[0] : 0) + s);
  for (int d = 1; d < p.shape.size(); ++d) {
    const std::int64_t o = p.offset.size() ? p.offset[d] : 0;
    v = v.slice(d, o, o + p.shape[d]);
  }
  return v;
}

Tensor segment(const Tensor& local, const Parameter& p, int m) {
  const std::int64_t s = p.shape[0] / p.segments;
  return local.slice(0, m * s, (m + 1) * s);
}

}  // namespace

Tensor gather_parameter(const Parameter& p, const Tensor& local, comm::Communicator& tensor_group) {
  TIDAL_ASSERT(local.shape() == p.shape, "{}: gathering {} for a block {}", p.name, local.str(), p.shape.str());
  if (p.full_shape.size() == 0) return local.clone();
  Tensor full = Tensor::zeros(p.full_shape), count = Tensor::zeros(p.full_shape);
  for (int m = 0; m < p.segments; ++m) {
    block_in(p, full, m).copy_from(segment(local, p, m));
    block_in(p, count, m).copy_from(Tensor::full(segment(local, p, m).shape(), 1.0f));
  }
  tensor_group.all_reduce(full)->wait();
  tensor_group.all_reduce(count)->wait();
  float* f = full.data<float>();
  const float* c = count.data<float>();
  for (std::int64_t i = 0; i < full.numel(); ++i) {
    TIDAL_ASSERT(c[i] > 0, "{}: element {} is held by no rank of tensor group '{}'", p.name, i, tensor_group.name());
    f[i] /= c[i];
  }
  return full;
}

Tensor shard_of(const Parameter& p, const Tensor& full) {
  if (p.full_shape.size() == 0) return full.clone();
  TIDAL_CHECK(full.shape() == p.full_shape, "{}: {} for a parameter of shape {}", p.name, full.str(),
              p.full_shape.str());
  Tensor local = Tensor::empty(p.shape, full.dtype());
  for (int m = 0; m < p.segments; ++m) {
    Tensor dst = segment(local, p, m);
    dst.copy_from(block_in(p, full, m));
  }
  return local;
}

void reduce_replicated_gradients(std::span<Parameter* const> params) {
  std::map<comm::Communicator*, std::vector<Parameter*>> by_group;
  for (Parameter* p : params)
    for (comm::Communicator* g : p->replicas)
      if (g->size() > 1) by_group[g].push_back(p);
  for (auto& [group, members] : by_group) {
    std::int64_t n = 0;
    for (Parameter* p : members) n += p->grad.numel();
    Tensor flat = Tensor::empty({n});
    std::int64_t at = 0;
    for (Parameter* p : members) {
      flat.slice(0, at, at + p->grad.numel()).copy_from(p->grad.reshape({-1}));
      at += p->grad.numel();
    }
    group->all_reduce(flat)->wait();
    at = 0;
    for (Parameter* p : members) {
      Tensor g = p->grad.reshape({-1});
      g.copy_from(flat.slice(0, at, at + p->grad.numel()));
      at += p->grad.numel();
    }
  }
}

double squared_gradient_norm(std::span<Parameter* const> params, comm::Communicator& tensor_group) {
  double local = 0;
  for (const Parameter* p : params) local += ops::sum_of_squares(p->grad) / double(p->copies);
  Tensor v = Tensor::empty({1}, DType::f32);
  // Summed in fp32 over a handful of ranks: the relative error (1e-7) is far below clipping's needs.
  v.data<float>()[0] = float(local);
  tensor_group.all_reduce(v)->wait();
  return double(v.data<float>()[0]);
}

}  // namespace tidal::nn::tp
