#include "comm/transport.h"

#include <stdexcept>

namespace ddpd {
namespace {

// Rank 0's decision when every rank mapped the segment (else the first failure). A word of this
// file's protocol, not enum_name(GroupTransport::kShm): that would pull common's job model (CLI11
// and all) into every binary that links the transport, the "ddpd" torch module among them.
constexpr char kShmDecision[] = "shm";

void put(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

std::string take(c10d::Store& store, const std::string& key) {
  const std::vector<uint8_t> value = store.get(key);  // waits up to the store's timeout
  return std::string(value.begin(), value.end());
}

}  // namespace

TransportChoice choose_transport(Transport requested, c10d::Store& store, int rank, int world_size,
                                 int64_t slot_bytes) {
  TransportChoice choice;  // kGloo until every rank has mapped the segment
  if (requested == Transport::kGloo) return choice;
  auto give_up = [&](const std::string& reason) -> TransportChoice {
    if (requested == Transport::kShm) throw std::runtime_error("transport shm: " + reason);
    choice.note = "transport auto chose gloo: " + reason;
    return std::move(choice);  // a captured reference: moved, not copied
  };

  // 2. One host?
  put(store, "transport/host/" + std::to_string(rank), shm::host_identity());
  const std::string host0 = take(store, "transport/host/0");
  for (int r = 1; r < world_size; ++r) {
    const std::string host = take(store, "transport/host/" + std::to_string(r));
    if (host != host0) {
      return give_up("ranks run on more than one host (rank 0 on " + host0 + ", rank " +
                     std::to_string(r) + " on " + host + ")");
    }
  }

  // 3-5. The segment, and whether every rank can map it.
  if (rank == 0) {
    std::string failure;
    try {
      choice.segment = shm::Segment::create(world_size, slot_bytes);
      put(store, "transport/segment",
          choice.segment->name() + " " + std::to_string(choice.segment->nonce()));
    } catch (const std::exception& e) {
      failure = std::string("rank 0 cannot create the segment: ") + e.what();
      put(store, "transport/segment", "error " + failure);
    }
    for (int r = 1; r < world_size && failure.empty(); ++r) {
      const std::string opened = take(store, "transport/open/" + std::to_string(r));
      if (opened != "ok") failure = "rank " + std::to_string(r) + " " + opened;
    }
    if (choice.segment) choice.segment->unlink();  // mapped everywhere it will be: no leftovers
    put(store, "transport/decision", failure.empty() ? kShmDecision : failure);
    if (!failure.empty()) {
      choice.segment.reset();
      return give_up(failure);
    }
    choice.transport = GroupTransport::kShm;
    return choice;
  }
  const std::string published = take(store, "transport/segment");
  std::string opened = "ok";
  if (published.rfind("error ", 0) == 0) {
    opened = "skipped: rank 0 has no segment";
  } else {
    const size_t space = published.find(' ');
    try {
      choice.segment =
          shm::Segment::open(published.substr(0, space), std::stoull(published.substr(space + 1)),
                             world_size, slot_bytes);
    } catch (const std::exception& e) {
      opened = std::string("cannot open the segment: ") + e.what() +
               " (in containers, ranks need a shared /dev/shm: ipc: host)";
    }
  }
  put(store, "transport/open/" + std::to_string(rank), opened);
  const std::string decision = take(store, "transport/decision");
  if (decision != kShmDecision) {  // rank 0's word above
    choice.segment.reset();
    return give_up(decision);  // rank 0's verdict, naming the rank: every rank reports the same
  }
  choice.transport = GroupTransport::kShm;
  return choice;
}

}  // namespace ddpd
