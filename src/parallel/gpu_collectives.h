// How a group's GPU tensors travel (parallel.gpu_collectives): NCCL where every rank owns a GPU
// and the build has it (automatic), NCCL, or staged through pinned host buffers over MPI.
#pragma once

namespace tidal::parallel {

enum class GpuCollectives { automatic, nccl, staged };

}  // namespace tidal::parallel
