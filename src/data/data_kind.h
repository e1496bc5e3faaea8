// What a run's data is (data.kind): the synthetic Markov language, llm.c token shards, Megatron's
// indexed datasets, a text file's bytes, conversations (JSON lines), or labelled images.
#pragma once

namespace tidal::data {

enum class DataKind { markov, tokens, indexed, text, chat, images };

}  // namespace tidal::data
