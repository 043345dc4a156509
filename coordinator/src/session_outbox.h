#pragma once
// What the coordinator sends on one worker session, queued so that no sender ever waits on the
// worker: a worker that stops reading fills its HTTP/2 flow-control window, after which gRPC's
// synchronous Write blocks, and the coordinator writes assignments and cancels under its one
// mutex. The queue is bounded; past the bound the session is cancelled (the worker is lost)
// rather than the coordinator's memory growing.

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "ddpd/v1/ddpd.grpc.pb.h"

namespace ddpd::coordinator {

// Thread contract: send() from any thread, never blocking on the network; one writer thread,
// owned by the outbox, alone calls stream->Write. close() is called once, by the session's RPC
// handler before it returns (the stream must outlive the writer); it joins the writer.
class SessionOutbox {
 public:
  using Stream = grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>;
  SessionOutbox(grpc::ServerContext* context, Stream* stream, std::string worker_id,
                int64_t max_queued_bytes);
  ~SessionOutbox();
  SessionOutbox(const SessionOutbox&) = delete;
  SessionOutbox& operator=(const SessionOutbox&) = delete;

  // Queues `message`. Returns false when the session is closed, or when the queue would pass
  // max_queued_bytes: then the session is cancelled and overflowed() describes why.
  bool send(const v1::CoordinatorMessage& message);
  // Stops the writer (cancelling the stream if a write is stuck) and joins it.
  void close();
  // Empty, or why the queue overflowed ("stopped reading: ...").
  std::string overflowed() const;

 private:
  void write_loop();

  grpc::ServerContext* const context_;
  Stream* const stream_;
  const std::string worker_id_;
  const int64_t max_queued_bytes_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<v1::CoordinatorMessage> queue_;  // not yet handed to gRPC, oldest first
  int64_t queued_bytes_ = 0;                  // their serialized sizes (not the one in Write)
  bool writing_ = false;                      // the writer is inside stream->Write
  bool closed_ = false;
  std::string overflowed_;
  std::thread writer_;
};

}  // namespace ddpd::coordinator
