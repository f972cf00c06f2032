// The registry of user activations; see custom_op.h.
#include "model/custom_op.h"

#include <deque>
#include <mutex>

namespace cann::model {
namespace {

// A deque: pointers handed out stay valid as ops are added. Registration happens at start-up;
// the mutex keeps a late one from racing a lookup.
std::mutex registry_mutex;
std::deque<ActivationOp>& registry() {
  static std::deque<ActivationOp> ops;
  return ops;
}

bool built_in(std::string_view name) {
  for (const char* n : {"gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "silu", "swish"})
    if (name == n) return true;
  return false;
}

}  // namespace

Status register_activation(ActivationOp op) {
  if (op.name.empty() || built_in(op.name) || !op.forward || !op.backward)
    return InvalidArgument("register_activation: '" + op.name +
                           "' needs a name of its own (not a built-in activation's) and both a "
                           "forward and a backward; hint: name it after what it computes");
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (const ActivationOp& o : registry())
    if (o.name == op.name)
      return InvalidArgument("register_activation: '" + op.name +
                             "' is registered already; hint: register each op once");
  registry().push_back(std::move(op));
  return OkStatus();
}

const ActivationOp* find_activation(std::string_view name) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (const ActivationOp& o : registry())
    if (o.name == name) return &o;
  return nullptr;
}

}  // namespace cann::model
