// The memory policies a run chooses (config keys zero.fetch, memory.offload's kind and
// memory.eviction), apart from the machinery that carries them out (chunk_manager.h,
// dynamic_memory.h), so the config can hold them.
#pragma once

namespace tidal::memory {

// How a chunk group's sharded parameters reach every rank (chunk_manager.h): one all-gather of the
// group, or a broadcast per chunk from its owner.
enum class ChunkFetch { all_gather, broadcast };
// Which chunk leaves the device when room is needed (dynamic_memory.h): the one used again
// furthest ahead by the warm-up's trace (Belady), or the least recently used.
enum class Eviction { belady, lru };
// PatrickStar's chunks moving by tensor state, or ZeRO-Offload's static split.
enum class Partition { dynamic, fixed };

}  // namespace tidal::memory
