// A rank that dies or hangs makes the others fail with an error naming the cause, timed from
// the moment of the fault, not hang. Faults hit rank 0 (which hosts the TCPStore) as well as a
// non-zero rank, under every kind of synchronisation: per-parameter (naive), hooks during
// backward (overlap), sharded parameters (fsdp) and ZeRO-1's owner broadcasts.
#include <cstdio>
#include <cstdlib>

#include "ddpd/core/communicator.h"
#include "multirank/multirank_test_util.h"

namespace ddpd::testing {
namespace {

constexpr double kTimeoutSeconds = 5;

struct Fault {
  std::string kind;      // die | hang
  std::string strategy;  // a strategy, or zero1 (flat with the sharded optimizer)
  int rank;
};

void PrintTo(const Fault& f, std::ostream* os) {
  *os << "rank " << f.rank << " " << (f.kind == "die" ? "dies" : "hangs") << " under "
      << f.strategy;
}

std::string fault_name(const ::testing::TestParamInfo<Fault>& info) {
  return info.param.kind + "_" + info.param.strategy + "_rank" + std::to_string(info.param.rank);
}

// "ddpd: inject KIND rank R step S at unix T", which the product's --inject prints as it fires
// → T (0: not found).
double injected_at(const ProcessOutcome& rank) {
  const auto at = rank.err.find(" at unix ", rank.err.find("ddpd: inject "));
  return at == std::string::npos ? 0 : std::strtod(rank.err.c_str() + at + 9, nullptr);
}

// The hung rank stops for three collective timeouts: its survivor fails after one, and the hung
// rank then fails in its next collective.
std::string injection(const Fault& f) {
  const std::string where = ":rank=" + std::to_string(f.rank) + ",step=2";
  return f.kind == "die" ? "exit" + where
                         : "hang" + where + ",seconds=" + std::to_string(3 * kTimeoutSeconds);
}

std::vector<ProcessOutcome> run_faulty(const Fault& f) {
  const std::string prefix = temp_dir() + "/fault-" + fault_name({f, 0});
  std::vector<std::string> argv{rank_helper(), "train",     "--out",     prefix,    "--model",
                                "tiny",        "--context", "16",        "--batch", "4",
                                "--steps",     "50",        "--timeout", "5",       "--threads",
                                "1",           "--inject",  injection(f)};
  if (f.strategy == "zero1") {
    argv.insert(argv.end(), {"--strategy", "flat", "--shard-optimizer"});
  } else {
    argv.insert(argv.end(), {"--strategy", f.strategy});
  }
  with_test_transport(argv);
  return run_ranks(argv, 2, std::chrono::seconds(90));
}

class RankFailure : public ::testing::TestWithParam<Fault> {};

TEST_P(RankFailure, SurvivorFailsWithTheCauseSoonAfterTheFault) {
  const Fault f = GetParam();
  const int survivor = 1 - f.rank;
  const auto outcomes = run_faulty(f);
  const ProcessOutcome& faulty = outcomes[f.rank];
  const ProcessOutcome& alive = outcomes[survivor];

  // --inject exit ends the process with status 3; a hung rank fails (1) once it resumes.
  EXPECT_EQ(faulty.exit_code, f.kind == "die" ? 3 : 1) << faulty.err;
  const double fault_at = injected_at(faulty);
  ASSERT_GT(fault_at, 0) << "the faulty rank never reached the fault:\n" << faulty.err;
  EXPECT_FALSE(alive.timed_out) << "rank " << survivor << " hung after the fault";
  EXPECT_EQ(alive.exit_code, 1) << alive.err;
  const double detected_after = alive.exited_unix_s - fault_at;
  std::printf("[ fault    ] %s: rank %d failed %.2f s after the fault\n",
              fault_name({f, 0}).c_str(), survivor, detected_after);

  // The cause and the rank as data (CollectiveError: tests/support/rank_main.cpp prints them):
  // the survivor names the faulty rank, whether its transport saw the peer end (shm), the group
  // of two has no other peer to have closed its connection (Gloo, whose words name no rank:
  // with rank 0 gone, so is the store the cross-rank analysis runs through), or the analysis
  // found the rank that never reported.
  const std::string cause = f.kind == "die" ? "peer_exited" : "timed_out";
  EXPECT_NE(alive.err.find("FAILED (cause " + cause + ", rank " + std::to_string(f.rank) + ")"),
            std::string::npos)
      << alive.err;
  if (f.kind == "die") {
    // A closed connection is noticed at once, long before the collective timeout.
    EXPECT_NE(alive.err.find("a peer rank closed its connection"), std::string::npos) << alive.err;
    EXPECT_EQ(alive.err.find("timed out"), std::string::npos) << alive.err;
    EXPECT_LT(detected_after, kTimeoutSeconds) << alive.err;
    if (test_transport() != "gloo") {  // shm (auto's choice here) names the rank that is gone
      EXPECT_NE(alive.err.find("shm: rank " + std::to_string(f.rank) + " (pid "), std::string::npos)
          << alive.err;
      EXPECT_LT(detected_after, 2.0) << alive.err;
    }
  } else {
    // Nothing closes: the survivor waits out the collective timeout, then names it. The hung
    // rank may already be inside its previous step's collectives, so allow one timeout more.
    EXPECT_NE(alive.err.find("timed out after 5000 ms"), std::string::npos) << alive.err;
    EXPECT_GE(detected_after, kTimeoutSeconds - 0.5) << "failed before the timeout elapsed";
    EXPECT_LT(detected_after, 2 * kTimeoutSeconds + 3) << alive.err;
  }
}

// A dying rank: how a closed connection surfaces differs by transport.
std::vector<Fault> dying_ranks() {
  std::vector<Fault> faults;
  for (const std::string strategy : {"naive", "overlap", "bucketed", "fsdp", "zero1"}) {
    for (int rank : {0, 1}) faults.push_back({"die", strategy, rank});
  }
  return faults;
}

// A hung rank: the collective timeout, the same on every transport.
std::vector<Fault> hung_ranks() {
  std::vector<Fault> faults;
  faults.push_back({"hang", "naive", 1});
  faults.push_back({"hang", "overlap", 0});
  faults.push_back({"hang", "fsdp", 1});
  faults.push_back({"hang", "zero1", 0});
  return faults;
}

INSTANTIATE_TEST_SUITE_P(OnEachTransport, RankFailure, ::testing::ValuesIn(dying_ranks()),
                         fault_name);
INSTANTIATE_TEST_SUITE_P(Faults, RankFailure, ::testing::ValuesIn(hung_ranks()), fault_name);

// Standalone runs (torchrun-style, no coordinator): ddpd-train with the product's --inject.
std::vector<std::string> standalone_train(const std::vector<std::string>& extra) {
  std::vector<std::string> argv{binary_dir() + "/ddpd-train",
                                "--model",
                                "tiny",
                                "--batch",
                                "6",
                                "--context",
                                "16",
                                "--steps",
                                "20",
                                "--threads",
                                "1",
                                "--timeout",
                                "5",
                                "--strategy",
                                "flat"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// Rank 1 hangs in compute; ranks 0 and 2 time out in the step's all-reduce, exchange their
// positions through the TCPStore, and both print the same analysis naming rank 1.
TEST(StandaloneAnalysis, HangNamesTheRankThatDidNotJoin) {
  const auto outcomes = run_ranks(standalone_train({"--inject", "hang:rank=1,step=3,seconds=12"}),
                                  3, std::chrono::seconds(90));
  const double fault_at = injected_at(outcomes[1]);
  ASSERT_GT(fault_at, 0) << outcomes[1].err;
  for (int r : {0, 2}) {
    const auto& o = outcomes[r];
    EXPECT_EQ(o.exit_code, 1) << o.err;
    EXPECT_NE(o.err.find("timed out after 5000 ms"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("cross-rank analysis: stall: ranks 0,2 wait in all_reduce #"),
              std::string::npos)
        << o.err;
    EXPECT_NE(o.err.find("rank 1 has not joined it: did not report"), std::string::npos) << o.err;
    // The collective timeout, then at most the 5 s wait for reports (the hung rank may already
    // be inside its previous step's collectives, so allow one timeout more).
    const double after = o.exited_unix_s - fault_at;
    std::printf("[ analysis ] rank %d named rank 1 %.2f s after the hang\n", r, after);
    EXPECT_LT(after, 3 * kTimeoutSeconds + 3) << o.err;
  }
}

// Rank 1 drops the first collective of step 2; with --check-collectives every rank fails at the
// next collective, naming rank 1's collective and the one ranks 0 and 2 launched under the same
// sequence number. Each rank's journal ends with that collective, failed: refused at launch, it
// is not left looking in flight.
TEST(StandaloneAnalysis, CheckCollectivesNamesBothSidesOfADesync) {
  const std::string dumps = temp_dir() + "/desync-journals";
  const auto outcomes =
      run_ranks(standalone_train({"--inject", "skip-collective:rank=1,step=2",
                                  "--check-collectives", "--journal-dump", dumps}),
                3, std::chrono::seconds(60));
  for (int r = 0; r < 3; ++r) {
    const auto& o = outcomes[r];
    EXPECT_EQ(o.exit_code, 1) << o.err;
    EXPECT_NE(o.err.find("collective desync (--check-collectives): rank 1 launched all_reduce(1 × "
                         "float32) as #"),
              std::string::npos)
        << o.err;
    EXPECT_NE(o.err.find("where ranks 0,2 launched all_reduce("), std::string::npos) << o.err;
    const nlohmann::json journal =
        load_json(dumps + "/journal-rank" + std::to_string(r) + ".json").at("journal");
    ASSERT_FALSE(journal.at("entries").empty()) << "rank " << r;
    EXPECT_EQ(journal.at("entries").back().at("state"), "failed") << "rank " << r;
  }
}

}  // namespace
}  // namespace ddpd::testing
