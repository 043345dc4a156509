// Healing in the training core (docs/healing.md), with real processes: rank 1 of 3 exits at the
// start of step 3 (--inject exit), the survivors regroup into generation 1, where a spare started
// beside them takes rank 1's number, every rank takes rank 0's state, and the run goes on at
// step 3. Same data order, same ranks, same bucket layouts: the final parameters must equal an
// uninterrupted run's bit for bit, on every rank.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <atomic>
#include <thread>

#include "ddpd/core/communicator.h"
#include "ddpd/core/rendezvous.h"
#include "multirank/multirank_test_util.h"

namespace ddpd::testing {
namespace {

constexpr int kWorld = 3;
constexpr int kLostRank = 1;
constexpr int kLostAtStep = 3;

// A case is a strategy, where "zero1" is bucketed with ZeRO-1 and --shard-replicas 1 (the lost
// rank's optimizer shard comes from its successor's replica), and "+after-update" has rank 1
// exit right after its optimizer update of step 3 (--inject exit-after-update) instead of at the
// start of the step: its peers have updated too, and under ZeRO-1 fail mid-broadcast.
// "fsdp" is fsdp with --shard-replicas 1: the lost rank's shards of parameters and moments come
// from its successor's copy, which stepped them with the same gradient bits.
// "+resumed" first runs steps 0-1 and checkpoints, and the healed run resumes from it: a replica
// must come from the checkpoint too.
bool exits_after_update(const std::string& name) {
  return name.find("+after-update") != std::string::npos;
}

bool resumes(const std::string& name) { return name.find("+resumed") != std::string::npos; }

// "+world2": two ranks instead of three (fsdp's ring is then the group itself, comm/ring_shift.h).
int world_of(const std::string& name) {
  return name.find("+world2") != std::string::npos ? 2 : kWorld;
}

// The processes that must succeed, by index: the survivors, then the spare (index world).
std::vector<int> surviving_processes(int world) {
  std::vector<int> out;
  for (int index = 0; index <= world; ++index) {
    if (index != kLostRank) out.push_back(index);
  }
  return out;
}

bool sharded(const std::string& name) {
  return name.rfind("zero1", 0) == 0 || name.rfind("fsdp", 0) == 0;
}

std::string strategy_of(const std::string& name) {
  const std::string base = name.substr(0, name.find('+'));
  return base == "zero1" ? "bucketed" : base;
}

std::vector<std::string> job_flags(const std::string& name, int steps = 6) {
  // Batch 6: two rows per rank at world 3. A bucket cap of 0.05 MiB splits the tiny model into
  // several buckets, so the launch order the spare adopts matters.
  std::vector<std::string> flags{
      "--strategy", strategy_of(name), "--steps", std::to_string(steps), "--batch",
      "6",          "--seed",          "11",      "--bucket-mb",         "0.05"};
  if (name.rfind("zero1", 0) == 0) {
    flags.insert(flags.end(), {"--shard-optimizer", "--shard-replicas", "1"});
  }
  // Clipping scales the gradients the replica steps too (by the same global coefficient).
  if (name.rfind("fsdp", 0) == 0) {
    flags.insert(flags.end(), {"--shard-replicas", "1", "--clip-grad-norm", "0.1"});
  }
  return flags;
}

std::vector<std::string> rank_command(const std::string& prefix, std::vector<std::string> flags) {
  std::vector<std::string> argv{rank_helper(), "train",     "--out", prefix,      "--model",
                                "tiny",        "--context", "16",    "--threads", "1"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  with_test_transport(argv);
  return argv;
}

bool bitwise_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

// The healed run: the three ranks with --heal and the fault, and the spare joining generation 1.
std::vector<ProcessOutcome> run_healed(const std::string& prefix, const std::string& strategy) {
  std::vector<std::string> flags = job_flags(strategy);
  if (resumes(strategy)) {
    const std::string checkpoints = prefix + "-checkpoints";
    std::vector<std::string> first = job_flags(strategy, 2);
    first.insert(first.end(), {"--checkpoint-dir", checkpoints, "--checkpoint-every", "2"});
    const auto outcomes = run_ranks(rank_command(prefix + "-first", first), world_of(strategy),
                                    std::chrono::seconds(120));
    for (const auto& o : outcomes) EXPECT_EQ(o.exit_code, 0) << o.err;
    flags.insert(flags.end(), {"--checkpoint-dir", checkpoints, "--resume", "latest"});
  }
  std::vector<std::string> spare_flags = flags;
  const std::string kind = exits_after_update(strategy) ? "exit-after-update" : "exit";
  flags.insert(flags.end(), {"--heal", "--inject",
                             kind + ":rank=" + std::to_string(kLostRank) +
                                 ",step=" + std::to_string(kLostAtStep)});
  spare_flags.insert(spare_flags.end(), {"--join-generation", "1"});
  return run_ranks_with_spares(rank_command(prefix, flags), world_of(strategy),
                               std::chrono::seconds(120),
                               {{kLostRank, rank_command(prefix, spare_flags)}});
}

void expect_healed_bitwise(const std::string& strategy) {
  const int world = world_of(strategy);
  const std::string reference =
      run_helper("heal-reference-" + strategy, job_flags(strategy), world);
  const std::string prefix = temp_dir() + "/healed-" + strategy;
  const std::vector<ProcessOutcome> outcomes = run_healed(prefix, strategy);
  ASSERT_EQ(outcomes.size(), static_cast<size_t>(world + 1));
  EXPECT_EQ(outcomes[kLostRank].exit_code, 3) << "--inject exit ends rank 1 with status 3\n"
                                              << outcomes[kLostRank].err;
  for (int index : surviving_processes(world)) {
    ASSERT_EQ(outcomes[index].exit_code, 0) << "process " << index << ":\n" << outcomes[index].err;
  }
  for (int index : surviving_processes(world)) {
    if (index == world) continue;  // the spare
    EXPECT_NE(outcomes[index].err.find("ddpd: healed into generation 1 (rank "), std::string::npos)
        << outcomes[index].err;
    EXPECT_NE(outcomes[index].err.find(" lost): state of rank 0, "), std::string::npos)
        << outcomes[index].err;
  }

  const auto expected = load_tensors(rank_file(reference, 0, "final.pt"));
  for (int rank = 0; rank < world; ++rank) {
    // Rank 1's files are the spare's: the lost process wrote none.
    EXPECT_TRUE(bitwise_equal(load_tensors(rank_file(prefix, rank, "final.pt")), expected))
        << strategy << ": rank " << rank << "'s final parameters differ from the uninterrupted "
        << "run's by " << max_abs_diff(load_tensors(rank_file(prefix, rank, "final.pt")), expected);
  }
  for (int rank = 0; rank < world; ++rank) {
    const auto heals = load_json(rank_file(prefix, rank, "json"))["result"]["heals"];
    ASSERT_EQ(heals.size(), 1u) << "rank " << rank;
    EXPECT_EQ(heals[0]["generation"], 1);
    EXPECT_EQ(heals[0]["source_rank"], 0) << "the lowest rank with the most completed steps";
    // Past the interrupted step where every survivor had updated: its update is not done twice.
    EXPECT_EQ(heals[0]["resumed_step"], kLostAtStep + (exits_after_update(strategy) ? 1 : 0));
    // A replicated strategy's survivors both completed the source's steps, so the state goes
    // to the rank that joined alone, over a group of two (state_transfer.h, step 4): rank 2
    // receives nothing. ZeRO-1's moments and fsdp's shards move over the pair of each shard's
    // owner and holder, where rank 2 sends rank 1's own shard.
    if (rank == 2 && !sharded(strategy)) {
      EXPECT_EQ(heals[0]["state_bytes"], 0) << strategy << ": rank 2 held the state already";
    } else {
      EXPECT_GT(heals[0]["state_bytes"].get<int64_t>(), 0) << "rank " << rank;
    }
    // Every rank names the rank replaced, the one that joined without state, even a survivor
    // aborted by the other's regroup, or whose Gloo error named only an address.
    EXPECT_EQ(heals[0]["lost_rank"], kLostRank) << "rank " << rank;
  }
  // Rank 0 reports every step it ran once: the steps before the loss, then the rest after it; a
  // step whose update every survivor made, but whose collectives after it failed, is not
  // reported. A resumed run starts at step 2.
  const auto steps = load_json(rank_file(prefix, 0, "json"))["result"]["steps"];
  std::vector<int> reported;
  for (const auto& s : steps) reported.push_back(s["step"]);
  std::vector<int> expected_steps;
  for (int s = resumes(strategy) ? 2 : 0; s < 6; ++s) {
    if (!(exits_after_update(strategy) && s == kLostAtStep)) expected_steps.push_back(s);
  }
  EXPECT_EQ(reported, expected_steps);
}

class Healing : public ::testing::TestWithParam<std::string> {};

TEST_P(Healing, HealedRunEqualsTheUninterruptedRunBitwise) { expect_healed_bitwise(GetParam()); }

// The default strategy on shared memory and again over Gloo (tests/CMakeLists.txt); the other
// replicated strategies on the default transport.
INSTANTIATE_TEST_SUITE_P(OnEachTransport, Healing, ::testing::Values("bucketed"));
INSTANTIATE_TEST_SUITE_P(ReplicatedStrategies, Healing,
                         ::testing::Values("naive", "flat", "overlap"));
INSTANTIATE_TEST_SUITE_P(AfterTheUpdate, Healing,
                         ::testing::Values("bucketed+after-update", "zero1+after-update",
                                           "fsdp+after-update"));
INSTANTIATE_TEST_SUITE_P(ShardedWithReplicas, Healing,
                         ::testing::Values("zero1", "zero1+resumed", "fsdp", "fsdp+resumed",
                                           "fsdp+world2"));

// Shrinking in place: rank 1 of 3 exits at the start of step 3 and no replacement comes. Ranks 0
// and 2 go on as ranks 0 and 1 of a group of 2, each reading 3 of the batch's 6 rows instead of
// 2. The reference is today's reshard-resume path at that step: 3 steps at world 3 with a
// checkpoint, resumed at world 2. Both take the same state (rank 0's, whole: the survivors had
// not begun step 3's update) into the same world-2 steps, and a sum over two ranks is exact in
// either order, so the bound derived for a resume at another world size is 0 here.
struct LedgerEntry {
  int64_t step, first_sample, samples;
};

std::vector<LedgerEntry> read_ledger(const std::string& path) {
  std::ifstream in(path);
  std::vector<LedgerEntry> entries;
  LedgerEntry e{};
  while (in >> e.step >> e.first_sample >> e.samples) entries.push_back(e);
  return entries;
}

// World 3 to 2, and 2 to 1 (the last survivor goes on alone); bucketed, and ZeRO-1 with
// replicas, whose optimizer shards are laid out again for the smaller world from their owners
// and replicas (state_transfer.h, steps 1''-5''), as the resume reshards them from its checkpoint.
class ShrinkingFrom : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(ShrinkingFrom, SurvivorsGoOnAsAResumeAtTheSmallerWorldWouldAndTrainEverySampleOnce) {
  constexpr int kSteps = 6, kBatch = 6;
  const auto& [world, strategy] = GetParam();
  // "+after-update": the survivors updated step 3 and failed in its broadcasts; they go on at 4.
  const int resumed = kLostAtStep + (exits_after_update(strategy) ? 1 : 0);
  const std::string tag = "-" + strategy + "-from" + std::to_string(world);
  const std::string checkpoints = temp_dir() + "/shrink-reference-checkpoints" + tag;
  run_helper("shrink-reference-a" + tag,
             with(job_flags(strategy, resumed),
                  {"--checkpoint-dir", checkpoints, "--checkpoint-every", std::to_string(resumed)}),
             world);
  const std::string reference = run_helper(
      "shrink-reference-b" + tag,
      with(job_flags(strategy, kSteps), {"--checkpoint-dir", checkpoints, "--resume", "latest"}),
      world - 1);

  // The shrunk run also checkpoints at step 5, after the shrink: a resume from it at the smaller
  // world must give the same final parameters (fsdp shrunk to one rank still writes shards).
  const std::string prefix = temp_dir() + "/shrunk" + tag;
  const std::string shrunk_checkpoints = prefix + "-checkpoints";
  const auto outcomes = run_ranks(
      rank_command(prefix,
                   with(job_flags(strategy, kSteps),
                        {"--heal", "--shrink-without", std::to_string(kLostRank), "--inject",
                         (exits_after_update(strategy) ? "exit-after-update" : "exit") +
                             std::string(":rank=1,step=") + std::to_string(kLostAtStep),
                         "--checkpoint-dir", shrunk_checkpoints, "--checkpoint-every", "5"})),
      world, std::chrono::seconds(120));
  ASSERT_EQ(outcomes.size(), static_cast<size_t>(world));
  EXPECT_EQ(outcomes[kLostRank].exit_code, 3) << outcomes[kLostRank].err;
  const auto expected = load_tensors(rank_file(reference, 0, "final.pt"));
  for (int survivor = 0; survivor < world; ++survivor) {
    if (survivor == kLostRank) continue;
    ASSERT_EQ(outcomes[survivor].exit_code, 0) << outcomes[survivor].err;
    EXPECT_NE(outcomes[survivor].err.find("going on at step " + std::to_string(resumed) + " with " +
                                          std::to_string(world - 1) + " ranks"),
              std::string::npos)
        << outcomes[survivor].err;
    const auto final_params = load_tensors(rank_file(prefix, survivor, "final.pt"));
    EXPECT_EQ(max_abs_diff(final_params, expected), 0.0)
        << "survivor " << survivor << " differs from the resume at world " << world - 1;
    const auto heals = load_json(rank_file(prefix, survivor, "json"))["result"]["heals"];
    ASSERT_EQ(heals.size(), 1u);
    EXPECT_EQ(heals[0]["world_size"], world - 1);
    EXPECT_EQ(heals[0]["lost_rank"], kLostRank);
    EXPECT_EQ(heals[0]["resumed_step"], resumed);
    // The survivors stopped at the same step boundary, with the same bits: nothing moves but,
    // under ZeRO-1 from 3 ranks, the moments that a new owner or its successor lacked. From 2,
    // the survivor held both shards (its own and its replica).
    if (sharded(strategy) && world > 2) {
      EXPECT_GT(heals[0]["state_bytes"].get<int64_t>(), 0);
    } else if (!exits_after_update(strategy)) {
      EXPECT_EQ(heals[0]["state_bytes"], 0);
    }
  }

  const std::string from_shrunk =
      run_helper("shrunk-resumed" + tag,
                 with(job_flags(strategy, kSteps),
                      {"--checkpoint-dir", shrunk_checkpoints, "--resume", "latest"}),
                 world - 1);
  EXPECT_EQ(max_abs_diff(load_tensors(rank_file(from_shrunk, 0, "final.pt")), expected), 0.0)
      << "a resume from the shrunk run's checkpoint differs";

  // The ledger: every sample of the 6 global batches trained exactly once, over all the
  // processes' completed steps; a rank's share grows from 6 / world rows to 6 / (world - 1).
  std::vector<int> trained(kSteps * kBatch, 0);
  for (int rank = 0; rank < world; ++rank) {
    for (const LedgerEntry& e : read_ledger(rank_file(prefix, rank, "ledger"))) {
      EXPECT_EQ(e.samples, e.step < kLostAtStep ? kBatch / world : kBatch / (world - 1))
          << "rank " << rank << " step " << e.step;
      EXPECT_GE(e.first_sample, e.step * kBatch);
      EXPECT_LE(e.first_sample + e.samples, (e.step + 1) * kBatch);
      for (int64_t g = e.first_sample; g < e.first_sample + e.samples; ++g) ++trained.at(g);
    }
  }
  for (size_t g = 0; g < trained.size(); ++g) {
    // A step every survivor updated but whose broadcasts failed is trained once and reported by
    // no rank (docs/healing.md).
    const bool unreported = resumed > kLostAtStep && static_cast<int>(g) / kBatch == kLostAtStep;
    EXPECT_EQ(trained[g], unreported ? 0 : 1)
        << "sample " << g << " trained " << trained[g] << " times";
  }
}

INSTANTIATE_TEST_SUITE_P(Shrinking, ShrinkingFrom,
                         ::testing::Combine(::testing::Values(3, 2),
                                            ::testing::Values("bucketed", "zero1",
                                                              "zero1+after-update", "fsdp",
                                                              "fsdp+after-update")),
                         [](const auto& info) {
                           std::string name = "World" + std::to_string(std::get<0>(info.param)) +
                                              "_" + std::get<1>(info.param);
                           std::replace(name.begin(), name.end(), '+', '_');
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// A batch that does not split over the survivors: each refuses the same way before any
// collective of the new group, and fails, naming the flag.
TEST(Shrinking, ABatchThatDoesNotSplitOverTheSurvivorsFailsNamingIt) {
  std::vector<std::string> flags = job_flags("bucketed");
  flags[5] = "9";  // --batch 9: 3 rows a rank at world 3, 4.5 at 2
  ASSERT_EQ(flags[4], "--batch");
  flags.insert(flags.end(), {"--heal", "--shrink-without", "1", "--inject", "exit:rank=1,step=3"});
  const auto outcomes =
      run_ranks(rank_command(temp_dir() + "/shrink-odd", flags), kWorld, std::chrono::seconds(120));
  for (int survivor : {0, 2}) {
    EXPECT_NE(outcomes[survivor].exit_code, 0);
    EXPECT_NE(outcomes[survivor].err.find("shrinking in place from 3 to 2 ranks: --batch 9 does "
                                          "not split into 2 ranks x --grad-accum 1"),
              std::string::npos)
        << outcomes[survivor].err;
  }
}

// Without --shard-replicas, ZeRO-1's lost shards exist nowhere else: the survivors fail as a run
// without --heal does, naming the lost rank, and nothing waits for a spare.
TEST(HealingLimits, ShardedOptimizerStateFailsInsteadOfRegrouping) {
  std::vector<std::string> flags = job_flags("bucketed");
  flags.insert(flags.end(), {"--shard-optimizer", "--heal", "--inject", "exit:rank=1,step=3"});
  const auto outcomes =
      run_ranks(rank_command(temp_dir() + "/heal-zero1", flags), kWorld, std::chrono::seconds(120));
  EXPECT_EQ(outcomes[kLostRank].exit_code, 3);
  for (int rank : {0, 2}) {
    EXPECT_EQ(outcomes[rank].exit_code, 1) << outcomes[rank].err;
    EXPECT_NE(outcomes[rank].err.find("FAILED (cause peer_exited, rank 1)"), std::string::npos)
        << outcomes[rank].err;
    EXPECT_EQ(outcomes[rank].err.find("ddpd: healed"), std::string::npos) << outcomes[rank].err;
  }
}

// connect_generation's join barrier (rendezvous.h, protocol step 4): rank 0 of 2 forms
// generation 1 while rank 1 has connected to the store and never joins it, as a spare that died
// on its way in.
struct GenerationWait {
  RendezvousOptions options;
  std::atomic<bool> stop{false};
  std::exception_ptr error;
  std::thread rank0;
  c10::intrusive_ptr<c10d::TCPStore> rank1;

  explicit GenerationWait(std::chrono::milliseconds timeout) {
    options.master_port = unused_port();
    options.world_size = 2;
    options.timeout = timeout;
    rank0 = std::thread([this] {
      try {
        connect_generation(options, 1, nullptr, [this] { return stop.load(); });
      } catch (...) {
        error = std::current_exception();
      }
    });
    wait_for_port("127.0.0.1", options.master_port, std::chrono::seconds(30));
    c10d::TCPStoreOptions client;
    client.port = static_cast<std::uint16_t>(options.master_port);
    client.numWorkers = 2;
    client.waitWorkers = true;
    client.timeout = std::chrono::seconds(30);
    rank1 = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", client);
  }
  ~GenerationWait() {
    stop = true;
    if (rank0.joinable()) rank0.join();
  }
};

TEST(GenerationRendezvous, AStopLeavesTheWaitForAPeerThatNeverJoins) {
  GenerationWait wait(std::chrono::seconds(300));
  // Rank 0 is in its poll once its join key is in the store.
  const std::vector<std::string> joined{"ddpd/gen1/joined/0"};
  for (int i = 0; i < 3000 && !wait.rank1->check(joined); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(wait.rank1->check(joined));
  const auto stopped_at = std::chrono::steady_clock::now();
  wait.stop = true;
  wait.rank0.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
  ASSERT_TRUE(wait.error);
  try {
    std::rethrow_exception(wait.error);
  } catch (const RendezvousAbandoned& e) {
    EXPECT_NE(std::string(e.what()).find("group generation 1 at 127.0.0.1:"), std::string::npos)
        << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not RendezvousAbandoned: " << e.what();
  }
  // What ended the wait was the stop, not the 300 s timeout.
  EXPECT_LT(seconds, 150) << "the stop was not seen";
}

// Rank 0 was the one lost, and the spare that was to serve the new store never came: rank 1
// waits for the store's port, and a stop ends that wait too.
TEST(GenerationRendezvous, AStopLeavesTheWaitForAStoreThatNeverComesUp) {
  RendezvousOptions options;
  options.master_port = unused_port();
  options.rank = 1;
  options.world_size = 2;
  options.timeout = std::chrono::seconds(300);
  std::atomic<bool> stop{false};
  std::exception_ptr error;
  std::thread rank1([&] {
    try {
      connect_generation(options, 1, nullptr, [&] { return stop.load(); });
    } catch (...) {
      error = std::current_exception();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  stop = true;
  rank1.join();
  ASSERT_TRUE(error);
  try {
    std::rethrow_exception(error);
  } catch (const RendezvousAbandoned& e) {
    EXPECT_NE(std::string(e.what()).find("stopped while waiting for the store to come up"),
              std::string::npos)
        << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not RendezvousAbandoned: " << e.what();
  }
}

TEST(GenerationRendezvous, ATimeoutNamesTheRankThatDidNotJoin) {
  GenerationWait wait(std::chrono::seconds(5));
  wait.rank0.join();
  ASSERT_TRUE(wait.error);
  try {
    std::rethrow_exception(wait.error);
  } catch (const RendezvousAbandoned& e) {
    ADD_FAILURE() << "abandoned with no stop: " << e.what();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(", rank 0: rank(s) 1 did not join within 5 s"),
              std::string::npos)
        << e.what();
  }
}

// A job healed twice: ranks 0 and 1 form generations 0 and 1, then rank 1 is replaced by a
// spare that opens the store afresh and meets rank 0 in generation 2. Rank 0 derives each
// generation's prefix from the job's store: from generation 1's own it would wait under
// "gen1/gen2/" while the spare joined "gen2/", until the timeout (a second heal hung so).
TEST(GenerationRendezvous, ASpareMeetsASurvivorInItsThirdGeneration) {
  RendezvousOptions options;
  options.master_port = unused_port();
  options.world_size = 2;
  options.timeout = std::chrono::seconds(30);
  options.transport = Transport::kGloo;  // two ranks of one process
  std::vector<std::shared_ptr<Communicator>> gen0(2), gen1(2), gen2(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      RendezvousOptions mine = options;
      mine.rank = rank;
      try {
        gen0[rank] = connect(mine);
        gen1[rank] = connect_generation(mine, 1, gen0[rank].get());
        // Rank 1's process is gone; the spare that takes its number has no previous group.
        gen2[rank] = connect_generation(mine, 2, rank == 0 ? gen1[0].get() : nullptr);
        torch::Tensor value = torch::full({1}, static_cast<float>(rank + 1));
        gen2[rank]->all_reduce_sum(value, "all_reduce/third_generation").wait();
        if (value.item<float>() != 3.0f)
          errors[rank] = "sum " + std::to_string(value.item<float>());
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

}  // namespace
}  // namespace ddpd::testing
