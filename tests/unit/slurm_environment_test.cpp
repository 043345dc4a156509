// Slurm's task variables read as torchrun's (rendezvous_from_environment), over a fake
// environment: the values are what `srun` sets in a 2-node, 4-task step.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>

#include "ddpd/core/rendezvous.h"

namespace {

ddpd::EnvironmentLookup environment(std::map<std::string, std::string> variables) {
  return [variables](const std::string& name) -> std::optional<std::string> {
    auto found = variables.find(name);
    if (found == variables.end()) return std::nullopt;
    return found->second;
  };
}

std::map<std::string, std::string> srun_task_3() {
  return {{"SLURM_STEP_ID", "0"},
          {"SLURM_PROCID", "3"},
          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_NTASKS", "4"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "1"},
          {"SLURM_STEP_NODELIST", "n[1-2]"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_JOB_ID", "123457"}};
}

TEST(SlurmEnvironment, SrunTaskMapsToTorchrunVariables) {
  ddpd::RendezvousOptions options = ddpd::rendezvous_from_environment(environment(srun_task_3()));
  EXPECT_EQ(options.rank, 3);
  EXPECT_EQ(options.world_size, 4);
  EXPECT_EQ(options.local_rank, 1);
  EXPECT_EQ(options.local_world_size, 2);
  EXPECT_EQ(options.master_addr, "n1");
  EXPECT_EQ(options.master_port, 23457);
}

TEST(SlurmEnvironment, TorchrunVariablesWin) {
  auto variables = srun_task_3();
  variables.insert({{"RANK", "1"},
                    {"WORLD_SIZE", "2"},
                    {"LOCAL_RANK", "0"},
                    {"MASTER_ADDR", "10.0.0.9"},
                    {"MASTER_PORT", "29500"}});
  ddpd::RendezvousOptions options = ddpd::rendezvous_from_environment(environment(variables));
  EXPECT_EQ(options.rank, 1);
  EXPECT_EQ(options.world_size, 2);
  EXPECT_EQ(options.master_addr, "10.0.0.9");
  EXPECT_EQ(options.master_port, 29500);
}

TEST(SlurmEnvironment, MasterPortSetByTheUserWinsInsideAStep) {
  auto variables = srun_task_3();
  variables["MASTER_PORT"] = "31000";
  EXPECT_EQ(ddpd::rendezvous_from_environment(environment(variables)).master_port, 31000);
}

TEST(SlurmEnvironment, TheBatchScriptIsNotAStep) {
  auto variables = srun_task_3();
  variables.erase("SLURM_STEP_ID");  // sbatch's batch script has SLURM_PROCID=0 but no step
  ddpd::RendezvousOptions options = ddpd::rendezvous_from_environment(environment(variables));
  EXPECT_EQ(options.rank, 0);
  EXPECT_EQ(options.world_size, 1);
}

TEST(SlurmEnvironment, UnevenTasksPerNode) {
  auto variables = srun_task_3();
  variables["SLURM_STEP_TASKS_PER_NODE"] = "3,1";
  variables["SLURM_STEP_NODELIST"] = "gpu[07-08],cpu3";
  ddpd::RendezvousOptions options = ddpd::rendezvous_from_environment(environment(variables));
  EXPECT_EQ(options.local_world_size, 1);
  EXPECT_EQ(options.master_addr, "gpu07");
}

TEST(SlurmEnvironment, FirstHostOfHostlists) {
  auto first = [](const std::string& list) {
    auto variables = srun_task_3();
    variables["SLURM_STEP_NODELIST"] = list;
    return ddpd::rendezvous_from_environment(environment(variables)).master_addr;
  };
  EXPECT_EQ(first("node17"), "node17");
  EXPECT_EQ(first("a,b"), "a");
  EXPECT_EQ(first("gpu-[5,7-9]"), "gpu-5");
  EXPECT_EQ(first("a[1-2]-ib[3-4]"), "a1-ib3");
  EXPECT_EQ(first("rack[01-02]n[001-004]"), "rack01n001");
}

TEST(SlurmEnvironment, MalformedVariablesNameThemselves) {
  auto expect_error = [](const std::string& name, const std::string& value) {
    auto variables = srun_task_3();
    variables[name] = value;
    try {
      ddpd::rendezvous_from_environment(environment(variables));
      ADD_FAILURE() << name << "=" << value << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  expect_error("SLURM_PROCID", "x");
  expect_error("SLURM_STEP_NODELIST", "n[1-2");
  expect_error("SLURM_STEP_TASKS_PER_NODE", "2(x2");
  expect_error("SLURM_STEP_TASKS_PER_NODE", "two");
}

}  // namespace

// torchrun (2.x) serves the store from its agent and says so: rank 0 must connect, not serve.
TEST(TorchrunEnvironment, AgentStoreMakesEveryRankAClient) {
  std::map<std::string, std::string> variables = {{"RANK", "0"},
                                                  {"WORLD_SIZE", "2"},
                                                  {"LOCAL_RANK", "0"},
                                                  {"MASTER_ADDR", "127.0.0.1"},
                                                  {"MASTER_PORT", "29400"},
                                                  {"LOCAL_WORLD_SIZE", "2"}};
  EXPECT_FALSE(ddpd::rendezvous_from_environment(environment(variables)).use_agent_store);
  variables["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  ddpd::RendezvousOptions options = ddpd::rendezvous_from_environment(environment(variables));
  EXPECT_TRUE(options.use_agent_store);
  EXPECT_EQ(options.rank, 0);
  EXPECT_EQ(options.master_port, 29400);
  variables["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_FALSE(ddpd::rendezvous_from_environment(environment(variables)).use_agent_store);
}

// LOCAL_RANK picks the GPU. RANK stands for it only when every rank is on this host: on the
// second of two hosts, rank 3 would take GPU 3 of a 2-GPU host.
TEST(TorchrunEnvironment, LocalRankIsRequiredAcrossHosts) {
  std::map<std::string, std::string> variables = {{"RANK", "3"},
                                                  {"WORLD_SIZE", "4"},
                                                  {"MASTER_ADDR", "10.0.0.1"},
                                                  {"MASTER_PORT", "29400"},
                                                  {"LOCAL_WORLD_SIZE", "2"}};
  try {
    ddpd::rendezvous_from_environment(environment(variables));
    FAIL() << "a missing LOCAL_RANK across hosts was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("LOCAL_RANK: not set", 0), 0u) << e.what();
  }
  variables["LOCAL_RANK"] = "1";
  EXPECT_EQ(ddpd::rendezvous_from_environment(environment(variables)).local_rank, 1);
  variables["LOCAL_RANK"] = "2";  // past LOCAL_WORLD_SIZE
  EXPECT_THROW(ddpd::rendezvous_from_environment(environment(variables)), std::invalid_argument);
  // One host (every rank local): RANK is the local rank.
  variables.erase("LOCAL_RANK");
  variables["LOCAL_WORLD_SIZE"] = "4";
  EXPECT_EQ(ddpd::rendezvous_from_environment(environment(variables)).local_rank, 3);
}
