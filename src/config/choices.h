// The config keys whose value is one of a few names, each an enum named here once. The file,
// --set and a Python dict give names; load_config turns them into these enums (or stops with an
// error listing the names), and only enums travel inward. The names come back out in what
// people read: to_toml, messages, metrics.
#pragma once

#include "core/device.h"
#include "core/dtype.h"
#include "data/data_kind.h"
#include "memory/policies.h"
#include "ops/attention_kernels.h"
#include "parallel/gpu_collectives.h"
#include "parallel/sequence_mode.h"
#include "parallel/tensor_mode.h"
#include "pipeline/partition_by.h"
#include "pipeline/schedule.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace tidal::config {

using data::DataKind;  // data.kind
enum class Recompute { none, blocks, every_k, selective };  // train.activation_checkpointing
enum class ActivationOffload { none, host };           // train.activation_offload
// train.on_nonfinite: a step whose loss or gradient is not finite ends the run, or is dropped.
enum class OnNonfinite { stop, skip };
// memory.offload: none, PatrickStar's chunks moving by tensor state, or ZeRO-Offload's static split.
enum class Offload { none, chunk, static_split };
using parallel::GpuCollectives;  // parallel.gpu_collectives
// A switch whose default depends on the run (checkpoint.async: on with more than one rank): a
// TOML boolean, or "auto".
enum class Toggle { automatic, on, off };
// data.chat_template: the tokenizer directory's (tokenizer_config.json), or a built-in one.
enum class ChatFormat { tokenizer, chatml, llama3 };
// finetune.method: every parameter trained, or low-rank adapters on a frozen base (nn/lora.h).
enum class FinetuneMethod { full, lora };
// finetune.base_dtype: a LoRA run's frozen base in the compute precision, or its linears in NF4 (QLoRA).
enum class BaseDType { compute, nf4 };
// finetune.base_offload: a LoRA run's frozen base on the device tier, or on the host or disk, streamed.
enum class BaseOffload { none, host, disk };

// Names<E>::table: every value of E with its config name.
template <class E>
struct Names;

template <class E>
concept Choice = requires { Names<E>::table; };

template <>
struct Names<ops::AttentionKernels> {
  static constexpr std::pair<ops::AttentionKernels, std::string_view> table[] = {
      {ops::AttentionKernels::automatic, "auto"}, {ops::AttentionKernels::cudnn, "cudnn"},
      {ops::AttentionKernels::own, "own"}};
};
template <>
struct Names<Toggle> {
  static constexpr std::pair<Toggle, std::string_view> table[] = {
      {Toggle::automatic, "auto"}, {Toggle::on, "true"}, {Toggle::off, "false"}};
};
template <>
struct Names<FinetuneMethod> {
  static constexpr std::pair<FinetuneMethod, std::string_view> table[] = {{FinetuneMethod::full, "full"},
                                                                          {FinetuneMethod::lora, "lora"}};
};
template <>
struct Names<BaseDType> {
  static constexpr std::pair<BaseDType, std::string_view> table[] = {{BaseDType::compute, "compute"},
                                                                     {BaseDType::nf4, "nf4"}};
};
template <>
struct Names<ChatFormat> {
  static constexpr std::pair<ChatFormat, std::string_view> table[] = {
      {ChatFormat::tokenizer, "tokenizer"}, {ChatFormat::chatml, "chatml"}, {ChatFormat::llama3, "llama3"}};
};
template <>
struct Names<BaseOffload> {
  static constexpr std::pair<BaseOffload, std::string_view> table[] = {
      {BaseOffload::none, "none"}, {BaseOffload::host, "host"}, {BaseOffload::disk, "disk"}};
};
template <>
struct Names<DataKind> {
  static constexpr std::pair<DataKind, std::string_view> table[] = {
      {DataKind::markov, "markov"}, {DataKind::tokens, "tokens"}, {DataKind::indexed, "indexed"},
      {DataKind::text, "text"},     {DataKind::chat, "chat"},       {DataKind::images, "images"}};
};
template <>
struct Names<Device::Kind> {
  static constexpr std::pair<Device::Kind, std::string_view> table[] = {{Device::Kind::cpu, "cpu"},
                                                                        {Device::Kind::cuda, "cuda"}};
};
// train.precision: the element type training computes in (fp32 master weights beside bf16 / fp16).
template <>
struct Names<DType> {
  static constexpr std::pair<DType, std::string_view> table[] = {
      {DType::f32, "fp32"}, {DType::bf16, "bf16"}, {DType::f16, "fp16"}};
};
template <>
struct Names<Recompute> {
  static constexpr std::pair<Recompute, std::string_view> table[] = {
      {Recompute::none, "none"},
      {Recompute::blocks, "blocks"},
      {Recompute::every_k, "every_k"},
      {Recompute::selective, "selective"}};
};
template <>
struct Names<ActivationOffload> {
  static constexpr std::pair<ActivationOffload, std::string_view> table[] = {{ActivationOffload::none, "none"},
                                                                             {ActivationOffload::host, "host"}};
};
template <>
struct Names<OnNonfinite> {
  static constexpr std::pair<OnNonfinite, std::string_view> table[] = {{OnNonfinite::stop, "stop"},
                                                                       {OnNonfinite::skip, "skip"}};
};
template <>
struct Names<parallel::SequenceMode> {
  static constexpr std::pair<parallel::SequenceMode, std::string_view> table[] = {
      {parallel::SequenceMode::ring, "ring"}, {parallel::SequenceMode::ulysses, "ulysses"}};
};
template <>
struct Names<parallel::TensorMode> {
  static constexpr const auto& table = parallel::kTensorModeNames;
};
template <>
struct Names<pipeline::ScheduleKind> {
  static constexpr std::pair<pipeline::ScheduleKind, std::string_view> table[] = {
      {pipeline::ScheduleKind::gpipe, "gpipe"},
      {pipeline::ScheduleKind::one_f_one_b, "1f1b"},
      {pipeline::ScheduleKind::interleaved, "interleaved"},
      {pipeline::ScheduleKind::zb_h1, "zb-h1"},
      {pipeline::ScheduleKind::zb_v, "zb-v"}};
};
template <>
struct Names<pipeline::PartitionBy> {
  static constexpr std::pair<pipeline::PartitionBy, std::string_view> table[] = {
      {pipeline::PartitionBy::layers, "layers"},
      {pipeline::PartitionBy::parameters, "parameters"},
      {pipeline::PartitionBy::time, "time"}};
};
template <>
struct Names<memory::ChunkFetch> {
  static constexpr std::pair<memory::ChunkFetch, std::string_view> table[] = {
      {memory::ChunkFetch::all_gather, "all_gather"}, {memory::ChunkFetch::broadcast, "broadcast"}};
};
template <>
struct Names<Offload> {
  static constexpr std::pair<Offload, std::string_view> table[] = {
      {Offload::none, "none"}, {Offload::chunk, "chunk"}, {Offload::static_split, "static"}};
};
template <>
struct Names<GpuCollectives> {
  static constexpr std::pair<GpuCollectives, std::string_view> table[] = {
      {GpuCollectives::automatic, "auto"}, {GpuCollectives::nccl, "nccl"}, {GpuCollectives::staged, "staged"}};
};
template <>
struct Names<memory::Eviction> {
  static constexpr std::pair<memory::Eviction, std::string_view> table[] = {{memory::Eviction::belady, "belady"},
                                                                            {memory::Eviction::lru, "lru"}};
};

template <Choice E>
constexpr std::string_view name_of(E value) {
  for (const auto& [v, name] : Names<E>::table)
    if (v == value) return name;
  return "?";
}

template <Choice E>
constexpr std::optional<E> parse_choice(std::string_view name) {
  for (const auto& [v, n] : Names<E>::table)
    if (n == name) return v;
  return std::nullopt;
}

// "a | b | c".
template <Choice E>
std::string choice_names() {
  std::string out;
  for (const auto& [v, name] : Names<E>::table) (out += out.empty() ? "" : " | ") += name;
  return out;
}

}  // namespace tidal::config

// fmt prints a choice by its config name (a DType by dtype_name; train.precision's names come
// from name_of).
template <class E>
struct fmt::formatter<E, char, std::enable_if_t<tidal::config::Choice<E> && !std::is_same_v<E, tidal::DType>>>
    : fmt::formatter<std::string_view> {
  auto format(E value, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(tidal::config::name_of(value), ctx);
  }
};
