// How sequence parallelism runs attention (parallel.sequence_mode): ring self-attention
// (colossal-ai.txt sec. II-B-3: key/value blocks travel the ring, every rank keeps its positions)
// or DeepSpeed-Ulysses (an all-to-all turns the sequence split into a head split for attention and
// back); the names are the config's (config/choices.h).
#pragma once

namespace tidal::parallel {

enum class SequenceMode { ring, ulysses };

}  // namespace tidal::parallel
