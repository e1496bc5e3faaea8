// A model family's spec: what tidal knows of a model type, registered under its name
// (model.type): how to build it from the layer factory of the run's layout, the task that picks
// its data, and its decoder for text generation. A built-in family is one folder,
// models/<family>/, whose family.cpp gives its spec, listed in models/builtin_families.cpp; a
// program registers its own model the same way, before the config is loaded, and trains it with
// everything the engine has - data, pipeline, tensor (every mode the layers it uses support) and
// sequence parallelism, chunks, ZeRO, offload, mixed precision, checkpoints.
// examples/parallel_block_gpt.cpp is one.
#pragma once

#include "models/decoder.h"
#include "models/hf_adapter.h"
#include "models/model.h"
#include "models/model_config.h"
#include "nn/layer_factory.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tidal::models {

// What a builder gets: the [model] section, the layers of this rank's layout (build every layer
// that holds parameters or meets the batch through them), and the run's activation
// checkpointing of blocks (Model::add_blocks takes it) and memory.embedding_on_host.
struct ModelBuild {
  const ModelConfig& config;
  nn::LayerFactory& layers;
  nn::CheckpointPolicy checkpointing;
  bool embedding_on_host = false;
};
using ModelBuilder = std::function<std::unique_ptr<Model>(const ModelBuild&)>;
// The decoder of a model of the family held whole by one process in fp32 (models/decoder.h).
using DecoderBuilder = std::function<std::unique_ptr<Decoder>(Model&, const ModelConfig&)>;

// What code outside models/ must know of a model that its family's own keys decide: the layout's
// checks, the data, sampling, the metrics and the planner read it here, never a family's key.
struct ModelTraits {
  int n_kv_head = 0;           // key / value heads of its attention; 0 = model.n_head
  std::int64_t positions = 0;  // the positions it attends over (sampling's context); 0 = model.seq_len
  bool tied_head = false;      // its LM head multiplies by the token embedding's table
  int experts = 0;             // experts in each block's mixture (nn/moe.h), whose routing the metrics report; 0 = none
  // An image classifier's input (channels x image_size x image_size, in patch_size patches) and
  // its classes; 0 for a language model.
  std::int64_t channels = 0, image_size = 0, patch_size = 0, classes = 0;
};

struct Family {
  std::string name;   // model.type
  std::string title;  // for people ("GPT", "Llama"); "" = the name
  // causal_lm trains on next-token targets of token data (markov, tokens, text) as GPT does,
  // masked_lm on BERT's masked tokens, image_classification on images.
  ModelTask task = ModelTask::causal_lm;
  // The [model] keys the family reads beyond every family's (ModelConfig's), declared by a table
  // over its options (models/family_keys.h): a config that sets one of another family's keys,
  // which this one would ignore, is an error naming both. A key two families declare has one type
  // (each may give its own default). Empty: a program's family, which may read any.
  std::vector<FamilyKey> keys{};
  ModelBuilder build;
  DecoderBuilder decoder{};  // empty: the family does not generate text (tidal sample, train.sample_every)
  // model.ln_eps = 0 means this epsilon of the family's norms.
  double norm_eps = 1e-5;
  // Checks the family's own keys of [model] (a tidal::Error naming the key and the fix); load_config
  // runs it after the checks every model gets.
  std::function<void(const ModelConfig&)> validate{};
  // What its keys decide that the engine must know (empty: ModelTraits' defaults).
  std::function<ModelTraits(const ModelConfig&)> traits{};
  HfAdapter hf{};  // Hugging Face checkpoints both ways (model.init_from, tidal export); empty: none
};

// Registers `family` under its name. A name already taken is an error naming it.
void register_family(Family family);
// register_family({type, task, build}): a model of one's own, without a decoder.
void register_model(const std::string& type, ModelTask task, ModelBuilder build);
// The family model.type = `type` names; a tidal::Error listing the known types otherwise.
const Family& find_family(const std::string& type);
// "GPT and Llama": the titles of the families that generate text, for messages.
std::string generating_families();
// "gpt | bert | vit | llama" and the registered ones.
std::string model_type_names();
// The registered families of `task`, in the order registered.
std::vector<std::string> families_for(ModelTask task);
// The registered families whose own keys (Family::keys) include `key` (without "model.").
std::vector<std::string> families_reading(const std::string& key);
// Every registered family's own keys, each once (as its first family declares it), in the order
// registered, with the families that read it.
struct DeclaredKey {
  FamilyKey key;
  std::vector<std::string> readers;
};
std::vector<DeclaredKey> declared_keys();
// How many families are registered (the config's schema grows with them).
std::size_t registered_families();
// Family key `name` of `m`: as given, else the default of m.type's family, or when that family
// does not read it the default of the first family that declares it.
KeyValue family_key(const ModelConfig& m, const std::string& name);
// "gpt2 for GPT2LMHeadModel, ...": the Hugging Face architectures the families read and write.
std::string hf_architecture_names();
// Reads the Hugging Face directory `dir`'s config.json through the family whose model_type it
// names into `m` (model.type included); returns the keys it decided, which a config may not
// contradict. Another architecture, or a value the family cannot build, is a tidal::Error.
std::vector<std::string> read_hf_config(const std::string& dir, ModelConfig& m);
// The Hugging Face adapter of `m`'s family; a tidal::Error naming the type when it has none.
const HfAdapter& hf_adapter(const ModelConfig& m);

// model.ln_eps, or the family's own when 0.
double norm_eps(const ModelConfig& m);
// What `m`'s family keys decide that the engine must know.
ModelTraits model_traits(const ModelConfig& m);
// Positions per sample: tokens, or for an image classifier its patches and the class token.
std::int64_t positions_per_sample(const ModelConfig& m);

}  // namespace tidal::models
