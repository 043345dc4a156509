// What c10d's ProcessGroupGloo.hpp needs to know of gloo to compile, and no more: the names it
// holds pointers to, one member it names, and the rendezvous store interface its GlooStore
// derives from.
//
// Why not gloo's own headers: PyPI's torch wheel builds gloo into libtorch_cpu but ships none of
// its headers, and Debian's libgloo-dev (2022-05, 5b14351) is a different gloo from the wheel's
// (its Store lacks the v2 API the wheel's has), so its classes would describe objects that the
// wheel lays out otherwise. gloo_backend.cpp, the only file that includes these, creates the
// backend through the wheel's exported functions (Options, createDeviceForHostname, the
// constructor) and touches no gloo object: every gloo type there sits behind a std::shared_ptr
// or std::unique_ptr, whose size does not depend on the pointee. GlooStore's methods are never
// emitted here (nothing constructs one), so this interface's layout is never relied upon.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace gloo {

// Only the member that ProcessGroupGloo::setTimeout (inline in c10d's header) names; that
// function is emitted with the class's vtable inside the wheel, never here.
class Context {
 public:
  void setTimeout(std::chrono::milliseconds timeout);
};

namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport

namespace rendezvous {
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<char>& data) = 0;
  virtual std::vector<char> get(const std::string& key) = 0;
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) = 0;
};
}  // namespace rendezvous

}  // namespace gloo
