#pragma once
// Slurm's task variables read as torchrun's, so `srun ddpd-worker run ...` needs no wrapper.
// Plain string parsing; the caller reads the environment (once, at the program's entry point).

#include <string>
#include <vector>

namespace ddpd {

// The first host of a Slurm hostlist expression, as `scontrol show hostnames LIST | head -n1`:
// "n[1-2]" -> "n1", "gpu[07-09,12],cpu3" -> "gpu07", "a[1-2]-ib[3-4]" -> "a1-ib3", "host" ->
// "host". Throws std::invalid_argument for an empty list or an unclosed bracket.
std::string first_host_of_nodelist(const std::string& nodelist);

// Tasks per node from SLURM_STEP_TASKS_PER_NODE's compressed form: "2(x3),1" -> {2, 2, 2, 1}.
// Throws std::invalid_argument naming the text when it is malformed.
std::vector<int> tasks_per_node(const std::string& compressed);

}  // namespace ddpd
