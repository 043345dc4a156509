// ddpd_torch._C: the one function the Python package needs to build a "ddpd" backend. The
// creator, the Gloo fallback and the logging stay in Python (ddpd_torch/__init__.py).

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
// After pybind11: declares c10::intrusive_ptr as a holder, so `Store` arguments convert and a
// returned Backend takes torch's own Python type (whose holder drops the GIL in its destructor).
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <functional>
#include <string>

#include "comm/transport.h"
#include "ddpd_backend.h"
#include "shm/segment.h"
#include "shm/shm_process_group.h"

namespace py = pybind11;

namespace {

void without_gil(const std::function<void()>& run) {
  if (PyGILState_Check()) {
    py::gil_scoped_release no_gil;
    run();
  } else {
    run();
  }
}

// (backend, "") when every rank of the group maps one shm segment, else (None, why): the same
// decision and the same words on every rank (comm/transport.h). `required`: shm or an error.
// `companion`: the Gloo group of the same ranks the backend keeps for send/recv and all-to-all
// (taken by reference: torch binds Backend with its own holder, not intrusive_ptr).
py::tuple shm_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                      std::chrono::milliseconds timeout, int ranks_on_host, bool required,
                      c10d::Backend& companion) {
  ddpd::TransportChoice choice;
  {
    // The store waits for every rank; Python threads (and torchrun's agent) keep running.
    py::gil_scoped_release no_gil;
    // Segments left by ranks that were killed before unlinking theirs (only after a crash
    // between create and the last rank's map; ddpd's own launch does the same).
    if (rank == 0) ddpd::shm::remove_stale_segments();
    choice = ddpd::choose_transport(required ? ddpd::Transport::kShm : ddpd::Transport::kAuto,
                                    *store, rank, size, ddpd::shm::kDefaultSlotBytes);
  }
  if (choice.transport != ddpd::GroupTransport::kShm)
    return py::make_tuple(py::none(), choice.note);
  auto shm = c10::make_intrusive<ddpd::shm::ShmProcessGroup>(std::move(*choice.segment), rank, size,
                                                             timeout, ranks_on_host);
  c10::intrusive_ptr<c10d::Backend> backend = c10::make_intrusive<ddpd_torch::DdpdBackend>(
      std::move(shm), c10::intrusive_ptr<c10d::Backend>::unsafe_reclaim_from_nonowning(&companion),
      timeout, without_gil);
  return py::make_tuple(backend, std::string());
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "ddpd's shared-memory c10d backend (see ddpd_torch)";
  m.def("shm_backend", &shm_backend, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout"), py::arg("ranks_on_host"), py::arg("required"), py::arg("companion"),
        "(Backend, '') when every rank maps one shared-memory segment, else (None, reason).");
}
