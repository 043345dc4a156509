// What a newcomer meets first (issue 61): a coordinator without a token refuses to start unless
// told --insecure, ddpctl's refusals name the flag or variable to set, and `show --spec` prints
// numbers as they were typed. Real daemons and ddpctl.
#include <chrono>
#include <string>

#include "e2e/cluster.h"

namespace ddpd::testing {
namespace {

// Without a token every caller could submit and cancel: the coordinator refuses to start, and
// --insecure starts it with a warning, serving calls that carry no token.
TEST(Token, ACoordinatorWithoutATokenRefusesToStartUnlessInsecure) {
  const std::string address = "127.0.0.1:" + std::to_string(unused_port());
  const auto refused =
      run_process({"/usr/bin/env", "-u", "DDPD_TOKEN", bin("ddpd-coordinator"), "--listen", address,
                   "--db", temp_dir() + "/notoken.db", "--metrics-port", "0"},
                  {}, std::chrono::seconds(30));
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("--token: no token: set $DDPD_TOKEN or --token"), std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("--insecure"), std::string::npos) << refused.err;

  BackgroundProcess insecure(
      {"/usr/bin/env", "-u", "DDPD_TOKEN", bin("ddpd-coordinator"), "--insecure", "--listen",
       address, "--db", temp_dir() + "/insecure.db", "--metrics-port", "0"},
      {}, "insecure-coordinator");
  ProcessOutcome listed;
  for (int i = 0; i < 100; ++i) {
    listed = run_process(
        {"/usr/bin/env", "-u", "DDPD_TOKEN", bin("ddpctl"), "--coordinator", address, "list"}, {},
        std::chrono::seconds(30));
    if (listed.exit_code == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_NE(insecure.log().find("[warning] --insecure: no token; every RPC from anyone who "
                                "reaches " +
                                address + " is accepted"),
            std::string::npos)
      << insecure.log();

  // A token and --insecure contradict each other.
  const auto both = run_process({bin("ddpd-coordinator"), "--insecure", "--listen", address, "--db",
                                 temp_dir() + "/both.db", "--metrics-port", "0"},
                                {{"DDPD_TOKEN", kToken}}, std::chrono::seconds(30));
  EXPECT_EQ(both.exit_code, 2) << both.err;
  EXPECT_NE(both.err.find("--insecure: contradicts the token given"), std::string::npos)
      << both.err;
}

// A missing or wrong token names $DDPD_TOKEN and --token; no coordinator at the address names
// --coordinator and the address tried.
TEST(ClientErrors, ATokenOrCoordinatorRefusalNamesWhatToSet) {
  Cluster cluster(0, "clienterrors");
  const auto missing = run_process({"/usr/bin/env", "-u", "DDPD_TOKEN", bin("ddpctl"),
                                    "--coordinator", cluster.address(), "list"},
                                   {}, std::chrono::seconds(30));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("error: UNAUTHENTICATED: missing token (authorization metadata) "
                             "(set $DDPD_TOKEN or pass --token"),
            std::string::npos)
      << missing.err;
  const auto wrong = cluster.ctl({"list"}, "not-the-token");
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.err.find("invalid token (--token or $DDPD_TOKEN differs from the "
                           "coordinator's token)"),
            std::string::npos)
      << wrong.err;

  const std::string nowhere = "127.0.0.1:" + std::to_string(unused_port());
  const auto unreachable =
      run_process({bin("ddpctl"), "--coordinator", nowhere, "--wait", "0", "list"},
                  {{"DDPD_TOKEN", kToken}}, std::chrono::seconds(60));
  EXPECT_EQ(unreachable.exit_code, 1);
  EXPECT_NE(unreachable.err.find("(no coordinator answered at " + nowhere +
                                 ": pass --coordinator HOST:PORT"),
            std::string::npos)
      << unreachable.err;
}

// `show --spec` writes numbers as a user types them: --timeout 300, not 3e+02.
TEST(ShowSpec, NumbersArePrintedWithoutAnExponent) {
  Cluster cluster(0, "specnumbers");  // no workers: the job stays PENDING with its spec
  const std::string job = cluster.submit({"--timeout", "300", "--lr", "0.00003"});
  const auto spec = cluster.ctl({"show", job, "--spec"});
  EXPECT_EQ(spec.exit_code, 0) << spec.err;
  EXPECT_NE(spec.out.find("\ntimeout: 300\n"), std::string::npos) << spec.out;
  EXPECT_NE(spec.out.find("\nlr: 0.00003\n"), std::string::npos) << spec.out;
}

}  // namespace
}  // namespace ddpd::testing
