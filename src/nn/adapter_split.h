// How a low-rank adapter (nn/lora.h) splits with the linear it adapts, as that linear's tensor
// mode says (Module::adapter_split): A [r, in] as the linear's input features, B [rows, r] as its
// output features (in the weight's segments), and the way h = x A^T, partial over the input's
// feature blocks, becomes whole for the output's samples.
//
//   single device, or a linear whose input and output are both replicated: all whole
//   1D column-parallel (rows split):    A whole; B's rows over the group; dh summed over it
//   1D row-parallel (columns split):    A's columns over the group; B whole; h summed over it
//   2D / 2.5D (optimus-2d.txt):         A's columns and B's rows over the row group (features
//                                       block j), each held by every grid row and depth layer;
//                                       h and dh summed over the row group
//   3D (colossal-ai.txt Table I):       A's columns over the linear's input group b, B's rows over
//                                       its output group c; the input's samples are split over c
//                                       and the output's over b, so h is gathered over c and
//                                       reduce-scattered over b (dh: gathered over b,
//                                       reduce-scattered over c)
#pragma once

#include <vector>

namespace tidal::comm {
class Communicator;
}

namespace tidal::nn {

struct AdapterSplit {
  // One of A's or B's features dimensions.
  struct Features {
    comm::Communicator* group = nullptr;  // the ranks holding the other blocks, ordered by block; null: whole
    std::vector<comm::Communicator*> replicas;  // the same block for other samples: gradients summed over them
    int copies = 1;  // how many ranks of the tensor group hold each block
  };
  Features in, out;  // A's columns (the input's features), B's rows (the output's)
  // 3D: the input's samples are split over out.group and the output's over in.group.
  bool samples_cross = false;
};

}  // namespace tidal::nn
