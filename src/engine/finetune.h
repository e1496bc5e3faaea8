// Fine-tuning a pretrained model (the [finetune] section): the model a run trains, with low-rank
// adapters on its frozen base under finetune.method = "lora" (models/lora.h), and the adapters in
// Hugging Face PEFT's files (adapter_config.json, adapter_model.safetensors), which peft's
// PeftModel.from_pretrained loads onto the base model.
#pragma once

#include "config/config.h"
#include "engine/checkpoint/reader.h"
#include "engine/hf_checkpoint.h"
#include "memory/frozen_stream.h"
#include "models/model.h"
#include "nn/layer_factory.h"

#include <memory>
#include <optional>
#include <span>
#include <string>

namespace tidal::engine {

// The run's model from `layers`: the family's, with its adapters attached and the rest frozen
// under finetune.method = "lora" (split as their linears are: models/lora.h).
std::unique_ptr<models::Model> build_model(const config::Config& cfg, nn::LayerFactory& layers);

// This rank's frozen base as hold_frozen_base left it: what came from model.init_from (nothing
// without it), and the stream that brings it to each module (null when it is on the device tier).
struct HeldBase {
  std::optional<HfLoadReport> loaded;
  std::unique_ptr<memory::FrozenBaseStream> stream;
};

// Makes this rank's frozen base (finetune.method = "lora") one parameter at a time, so the host
// never holds more of it than one parameter beside it: in the compute precision from model.init_from's
// tensor (else initialised from the seed), quantized to NF4 under finetune.base_dtype = "nf4" (its
// linears), then held where finetune.base_offload says - the device tier, the host tier, or a file
// in memory.disk_dir (the last two streamed).
HeldBase hold_frozen_base(const config::Config& cfg, std::span<nn::Parameter* const> frozen, int rank);

// The bytes the frozen base holds as hold_frozen_base left it: NF4 codes, or the compute-dtype tensors.
std::int64_t frozen_base_bytes(std::span<nn::Parameter* const> frozen);

// Fills the adapters among `params` (this rank's, materialized) from the PEFT directory `dir`,
// whose adapter_config.json must agree with the [finetune] section (rank, alpha, targets); returns
// a progress line. A directory that disagrees or lacks a tensor is a tidal::Error naming it.
std::string load_peft_adapters(const std::string& dir, const config::Config& cfg,
                               std::span<nn::Parameter* const> params);

// The whole model of an adapted run's checkpoint (finetune.method = "lora"), on the host in fp32:
// the base from the stored config's model.init_from (else its seed's initialisation, as the run
// had it), the adapters from the checkpoint.
std::unique_ptr<models::Model> load_adapted_model(CheckpointReader& reader);

// Writes an adapted run's checkpoint as PEFT's adapter directory in out_dir: adapter_config.json
// and adapter_model.safetensors (B's query rows in Hugging Face's head order).
HfExportReport export_peft(const std::string& checkpoint, const std::string& out_dir);

}  // namespace tidal::engine
