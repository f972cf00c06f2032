// The adapter: values cross as std::vector<char> on Gloo's side and bytes on ours; every
// failure becomes the exception type Gloo's connect path already handles.
#include "comm/gloo_store.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/store.h>

namespace cann::comm {
namespace {

class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<comm::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    check(store_->set(key, std::string_view(data.data(), data.size())));
  }

  std::vector<char> get(const std::string& key) override {
    auto v = store_->get(key, timeout_);
    check(v.status());
    return std::vector<char>(v->begin(), v->end());
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    // Gloo passes kNoTimeout (zero) to mean "the default".
    check(store_->wait(keys, timeout.count() > 0 ? timeout : timeout_));
  }

 private:
  static void check(const Status& s) {
    if (!s.ok()) throw gloo::IoException(s.message());
  }

  const std::shared_ptr<comm::Store> store_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace

std::shared_ptr<gloo::rendezvous::Store> make_gloo_store(std::shared_ptr<Store> store,
                                                         std::chrono::milliseconds timeout) {
  return std::make_shared<GlooStoreAdapter>(std::move(store), timeout);
}

}  // namespace cann::comm
