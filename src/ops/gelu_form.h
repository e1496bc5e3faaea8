// The MLP's GELU (model.activation): the tanh approximation (GPT-2's "gelu_new") or the exact erf
// form (BERT's and ViT's "gelu"); ops/gelu.h computes both.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tidal::ops {

enum class GeluForm { tanh, erf };

// model.activation's name of each form.
inline std::vector<std::pair<GeluForm, std::string>> gelu_form_names() {
  return {{GeluForm::tanh, "gelu_tanh"}, {GeluForm::erf, "gelu_erf"}};
}

}  // namespace tidal::ops
