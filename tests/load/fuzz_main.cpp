// ddpd-fuzz: the coordinator's RPCs fuzzed for a bounded time against a running coordinator
// (docs/scale.md#fuzzing). Three kinds of input, in turns:
//  - random bytes sent as a request to every unary method (gRPC's generic stub);
//  - valid requests, serialised, with bytes flipped, inserted or cut;
//  - structured mutations through protobuf reflection: every field of SubmitJobRequest (and its
//    DdpSpec/CommSpec) set to extremes: huge, negative and zero numbers, NaN and infinities,
//    empty, 64 KB and invalid-UTF-8 strings, unknown enum values, thousands of repeated entries;
// and worker sessions that send mutated hellos, step reports and results for jobs they do not
// hold, or that never read what the coordinator writes.
// After the time is up it checks that the coordinator is alive, that every job it accepted
// passes validate_spec (it accepted no invalid job), and reports its RSS. Exit 0 when all hold.
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sys/wait.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ddpd/api/session_protocol.h"

#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "ddpd/api/spec_convert.h"
#include "ddpd/common/net.h"
#include "ddpd/v1/ddpd.grpc.pb.h"
#include "process_usage.h"
#include "support/process.h"

namespace {

namespace gp = google::protobuf;
using Clock = std::chrono::steady_clock;

class Fuzzer {
 public:
  Fuzzer(const std::string& address, const std::string& token, uint64_t seed)
      : channel_(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())),
        stub_(ddpd::v1::Coordinator::NewStub(channel_)),
        generic_(channel_),
        token_(token),
        random_(seed) {}

  // One call of each kind; updates the counters.
  void round() {
    raw_bytes();
    mutated_bytes();
    structured_submit();
    session();
  }

  nlohmann::json counters() const {
    nlohmann::json codes;
    for (const auto& [code, n] : codes_) codes[std::to_string(code)] = n;
    return {{"calls", calls_}, {"by_status_code", codes}, {"accepted_jobs", accepted_.size()}};
  }
  const std::vector<std::string>& accepted() const { return accepted_; }

 private:
  static constexpr const char* kUnary[] = {"SubmitJob", "GetJob", "ListJobs", "CancelJob",
                                           "ListWorkers"};

  void authorize(grpc::ClientContext& context) {
    if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  std::string random_bytes(size_t max) {
    std::string bytes(std::uniform_int_distribution<size_t>(0, max)(random_), '\0');
    for (auto& b : bytes) b = static_cast<char>(random_() & 0xff);
    return bytes;
  }

  // A unary call with `payload` as the serialised request; the reply is not parsed.
  void send_raw(const std::string& method, const std::string& payload) {
    grpc::ClientContext context;
    authorize(context);
    grpc::Slice slice(payload);
    grpc::ByteBuffer request(&slice, 1), reply;
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    grpc::Status status;
    generic_.UnaryCall(&context, "/ddpd.v1.Coordinator/" + method, grpc::StubOptions(), &request,
                       &reply, [&](grpc::Status s) {
                         std::lock_guard<std::mutex> lock(mutex);
                         status = s;
                         done = true;
                         done_cv.notify_one();
                       });
    std::unique_lock<std::mutex> lock(mutex);
    done_cv.wait(lock, [&] { return done; });
    count(status);
    if (method == "SubmitJob" && status.ok()) {
      std::vector<grpc::Slice> slices;
      std::string bytes;
      if (reply.Dump(&slices).ok()) {
        for (const auto& piece : slices) {
          bytes.append(reinterpret_cast<const char*>(piece.begin()), piece.size());
        }
      }
      ddpd::v1::Job job;
      if (job.ParseFromString(bytes)) accepted_.push_back(job.job_id());
    }
  }

  void count(const grpc::Status& status) {
    ++calls_;
    ++codes_[status.error_code()];
  }

  void raw_bytes() { send_raw(kUnary[random_() % std::size(kUnary)], random_bytes(4096)); }

  ddpd::v1::SubmitJobRequest valid_submit() {
    ddpd::v1::SubmitJobRequest request;
    request.mutable_spec()->set_world_size(2);
    if (random_() % 2) {
      auto* ddp = request.mutable_spec()->mutable_ddp();
      ddp->set_model("tiny");
      ddp->set_batch_size(4);
      ddp->set_steps(3);
      ddp->set_strategy("bucketed");
    } else {
      auto* comm = request.mutable_spec()->mutable_comm();
      comm->add_collectives("all_reduce");
      comm->add_sizes_bytes(1 << 20);
    }
    return request;
  }

  void mutated_bytes() {
    std::string bytes = valid_submit().SerializeAsString();
    const int edits = 1 + static_cast<int>(random_() % 8);
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      const size_t at = random_() % bytes.size();
      switch (random_() % 3) {
        case 0:
          bytes[at] = static_cast<char>(random_() & 0xff);
          break;
        case 1:
          bytes.insert(at, 1, static_cast<char>(random_() & 0xff));
          break;
        default:
          bytes.erase(at, 1 + random_() % 8);
          break;
      }
    }
    send_raw("SubmitJob", bytes);
  }

  void mutate_field(gp::Message& message, const gp::FieldDescriptor* f) {
    const gp::Reflection* r = message.GetReflection();
    const int pick = static_cast<int>(random_() % 6);
    if (f->is_repeated()) {
      const int n = pick == 0 ? 5000 : static_cast<int>(random_() % 4);
      for (int i = 0; i < n; ++i) {
        switch (f->cpp_type()) {
          case gp::FieldDescriptor::CPPTYPE_STRING:
            r->AddString(&message, f, random_bytes(16));
            break;
          case gp::FieldDescriptor::CPPTYPE_INT64:
            r->AddInt64(&message, f, static_cast<int64_t>(random_()));
            break;
          case gp::FieldDescriptor::CPPTYPE_INT32:
            r->AddInt32(&message, f, static_cast<int32_t>(random_()));
            break;
          default:
            break;
        }
      }
      return;
    }
    switch (f->cpp_type()) {
      case gp::FieldDescriptor::CPPTYPE_INT64: {
        const int64_t v[] = {
            std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(), -1, 0, 1,
            static_cast<int64_t>(random_())};
        r->SetInt64(&message, f, v[pick]);
        break;
      }
      case gp::FieldDescriptor::CPPTYPE_UINT64:
        r->SetUInt64(&message, f, random_());
        break;
      case gp::FieldDescriptor::CPPTYPE_INT32: {
        const int32_t v[] = {
            std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(), -1, 0, 1,
            static_cast<int32_t>(random_())};
        r->SetInt32(&message, f, v[pick]);
        break;
      }
      case gp::FieldDescriptor::CPPTYPE_DOUBLE: {
        const double v[] = {NAN, INFINITY, -INFINITY, 1e308, -1.0, 0.0};
        r->SetDouble(&message, f, v[pick]);
        break;
      }
      case gp::FieldDescriptor::CPPTYPE_BOOL:
        r->SetBool(&message, f, random_() % 2);
        break;
      case gp::FieldDescriptor::CPPTYPE_ENUM:
        r->SetEnumValue(&message, f, 9999);
        break;
      case gp::FieldDescriptor::CPPTYPE_STRING: {
        const std::string v[] = {"",     std::string(65536, 'x'), "tiny",
                                 "fsdp", "../../etc/passwd",      random_bytes(32)};
        r->SetString(&message, f, v[pick]);
        break;
      }
      default:
        break;
    }
  }

  void structured_submit() {
    auto request = valid_submit();
    gp::Message* targets[] = {&request, request.mutable_spec(),
                              request.spec().has_ddp()
                                  ? static_cast<gp::Message*>(request.mutable_spec()->mutable_ddp())
                                  : request.mutable_spec()->mutable_comm()};
    gp::Message& target = *targets[random_() % std::size(targets)];
    const gp::Descriptor* d = target.GetDescriptor();
    const int mutations = 1 + static_cast<int>(random_() % 3);
    for (int m = 0; m < mutations; ++m) {
      const gp::FieldDescriptor* f = d->field(static_cast<int>(random_() % d->field_count()));
      if (f->cpp_type() == gp::FieldDescriptor::CPPTYPE_MESSAGE) continue;
      mutate_field(target, f);
    }
    // Invalid UTF-8 in a proto3 string cannot be serialised by the checked path: send bytes.
    send_raw("SubmitJob", request.SerializePartialAsString());
  }

  // A worker session: a hello (maybe mutated), then random messages; half never read.
  void session() {
    grpc::ClientContext context;
    authorize(context);
    auto stream = stub_->WorkerSession(&context);
    ddpd::v1::WorkerMessage hello;
    hello.mutable_hello()->set_worker_id("fuzz-" + std::to_string(random_() % 64));
    hello.mutable_hello()->set_advertised_host("127.0.0.1");
    hello.mutable_hello()->set_rendezvous_port(static_cast<int32_t>(random_() % 70000) - 1000);
    hello.mutable_hello()->set_protocol_version(ddpd::kSessionProtocolVersion);
    if (random_() % 2)
      mutate_field(*hello.mutable_hello(), hello.hello().GetDescriptor()->field(random_() % 7));
    stream->Write(hello);
    for (int i = 0; i < 5; ++i) {
      ddpd::v1::WorkerMessage m;
      m.set_job_id(accepted_.empty() ? random_bytes(8) : accepted_[random_() % accepted_.size()]);
      switch (random_() % 3) {
        case 0:
          m.mutable_step()->set_rank(static_cast<int32_t>(random_()));
          m.mutable_step()->set_step(static_cast<int64_t>(random_()));
          m.mutable_step()->set_loss(NAN);
          break;
        case 1:
          m.mutable_result()->set_job_id(m.job_id());
          m.mutable_result()->set_rank(static_cast<int32_t>(random_() % 4));
          m.mutable_result()->set_succeeded(random_() % 2);
          m.mutable_result()->set_result_json(random_bytes(64));
          break;
        default:
          m.set_heartbeat(true);
          m.mutable_progress()->set_step(-1);
          break;
      }
      stream->Write(m);
    }
    if (random_() % 2) {  // reads what it was sent, then closes
      stream->WritesDone();
      ddpd::v1::CoordinatorMessage reply;
      while (stream->Read(&reply)) {
      }
      count(stream->Finish());
    } else {  // never reads: cancelled with its context
      context.TryCancel();
      ++calls_;
    }
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ddpd::v1::Coordinator::Stub> stub_;
  grpc::GenericStub generic_;
  std::string token_;
  std::mt19937_64 random_;
  int64_t calls_ = 0;
  std::map<int, int64_t> codes_;
  std::vector<std::string> accepted_;
};

int64_t rss_of(int pid) { return ddpd::load::usage_of(pid).rss_bytes; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ddpd-fuzz: the coordinator's RPCs fuzzed for a bounded time"};
  double seconds = 10;
  uint64_t seed = 1;
  int64_t max_rss_mb = 1024;
  app.add_option("--seconds", seconds, "How long to fuzz")->capture_default_str();
  app.add_option("--seed", seed, "Random seed (a failure reproduces with the same seed)")
      ->capture_default_str();
  app.add_option("--max-rss-mb", max_rss_mb, "Fail when the coordinator's RSS ends above this")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  // The structured mutations serialise invalid UTF-8 on purpose; protobuf's warning about each
  // would drown the report.
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char*, int, const std::string&) {});

  const std::string token = "fuzz-token";
  const int port = ddpd::free_port();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  ddpd::testing::BackgroundProcess coordinator(
      {self + "/ddpd-coordinator", "--listen", address, "--db",
       ddpd::testing::temp_dir() + "/fuzz.db", "--metrics-port", "0", "--log-level", "error"},
      {{"DDPD_TOKEN", token}}, "fuzz-coordinator");
  if (!ddpd::wait_for_port("127.0.0.1", port, std::chrono::seconds(30))) {
    std::fprintf(stderr, "error: the coordinator did not start\n%s", coordinator.log().c_str());
    return 1;
  }
  const int64_t rss_start = rss_of(coordinator.pid());
  Fuzzer fuzzer(address, token, seed);
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline && waitpid(coordinator.pid(), nullptr, WNOHANG) == 0) {
    fuzzer.round();
  }
  const bool alive = waitpid(coordinator.pid(), nullptr, WNOHANG) == 0;

  // Every accepted job must be a valid one.
  int64_t invalid = 0;
  std::string first_invalid;
  if (alive) {
    auto stub = ddpd::v1::Coordinator::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    for (const auto& id : fuzzer.accepted()) {
      grpc::ClientContext context;
      context.AddMetadata("authorization", "Bearer " + token);
      ddpd::v1::GetJobRequest request;
      request.set_job_id(id);
      ddpd::v1::GetJobReply reply;
      if (!stub->GetJob(&context, request, &reply).ok()) continue;
      try {
        ddpd::validate_spec(reply.job().spec(), ddpd::FieldNames::kProto);
      } catch (const std::exception& e) {
        if (invalid++ == 0) first_invalid = id + ": " + e.what();
      }
    }
  }
  const int64_t rss_end = alive ? rss_of(coordinator.pid()) : 0;
  nlohmann::json out = fuzzer.counters();
  out["seconds"] = seconds;
  out["seed"] = seed;
  out["coordinator_alive"] = alive;
  out["invalid_jobs_accepted"] = invalid;
  if (!first_invalid.empty()) out["first_invalid_job"] = first_invalid;
  out["coordinator_rss_start_bytes"] = rss_start;
  out["coordinator_rss_end_bytes"] = rss_end;
  std::cout << out.dump() << std::endl;
  if (!alive) std::fprintf(stderr, "the coordinator died:\n%s", coordinator.log().c_str());
  return alive && invalid == 0 && rss_end <= max_rss_mb * (int64_t{1} << 20) ? 0 : 1;
}
