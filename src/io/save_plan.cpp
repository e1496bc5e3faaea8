#include "io/save_plan.h"

#include <algorithm>

namespace tidal::io {

std::vector<std::vector<std::string>> assign_writers(const std::vector<std::vector<HeldBlockKey>>& held) {
  struct Block {
    std::int64_t bytes = 0;
    std::vector<int> holders;  // ascending
  };
  std::map<std::string, Block> blocks;
  for (std::size_t r = 0; r < held.size(); ++r)
    for (const HeldBlockKey& b : held[r]) {
      Block& block = blocks[b.key];
      block.bytes = b.bytes;
      block.holders.push_back(int(r));
    }
  std::vector<const std::pair<const std::string, Block>*> order;
  for (const auto& b : blocks) order.push_back(&b);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->second.bytes > b->second.bytes; });
  std::vector<std::int64_t> load(held.size(), 0);
  std::vector<std::vector<std::string>> out(held.size());
  for (const auto* b : order) {
    int owner = b->second.holders.front();
    for (int r : b->second.holders)
      if (load[std::size_t(r)] < load[std::size_t(owner)]) owner = r;
    load[std::size_t(owner)] += b->second.bytes;
    out[std::size_t(owner)].push_back(b->first);
  }
  return out;
}

}  // namespace tidal::io
