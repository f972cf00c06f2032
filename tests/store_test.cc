// Tests of the Store backends. Every method's semantics on all three (memory, file, redis),
// including timeouts that name the missing keys, concurrent add and compare_set from threads
// and from forked processes, and prefix isolation; then what only one backend has: file names
// for awkward keys, redis URLs, passwords, databases, reconnection, and a server killed while a
// rank waits on it.
//
// The redis tests start a private redis-server on a free loopback port with a password and kill
// it at the end; they are skipped, saying so, when redis-server is not installed.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "comm/store.h"
#include "comm/store_backends.h"
#include "comm_test_util.h"
#include "test_util.h"

namespace cann::comm {
namespace {

using namespace std::chrono_literals;

// ---- A private redis-server ------------------------------------------------------------------

std::string redis_server_binary() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/usr/sbin"}) {
    const std::string p = std::string(dir) + "/redis-server";
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

class RedisServer {
 public:
  static constexpr const char* kPassword = "s3cret-pw";

  explicit RedisServer(int port = 0) : port_(port ? port : test::free_tcp_port()) {}
  ~RedisServer() { kill_now(); }

  // Starts the server and waits until it answers; false (with a reason) otherwise.
  bool start(std::string* why) {
    const std::string bin = redis_server_binary();
    if (bin.empty()) {
      *why = "redis-server is not installed";
      return false;
    }
    pid_ = fork();
    if (pid_ == 0) {
      const int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      dup2(null, 2);
      const std::string port = std::to_string(port_);
      execl(bin.c_str(), "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1",
            "--requirepass", kPassword, "--save", "", "--appendonly", "no", "--dir",
            dir_.path().c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (open_store(url(), 500ms).ok()) return true;
      std::this_thread::sleep_for(20ms);
    }
    *why = "redis-server did not start on port " + std::to_string(port_);
    return false;
  }

  void kill_now() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  int port() const { return port_; }
  std::string url(const std::string& db = "") const {
    return "redis://:" + std::string(kPassword) + "@127.0.0.1:" + std::to_string(port_) + db;
  }

 private:
  const int port_;
  pid_t pid_ = -1;
  test::TempDir dir_{"redis"};
};

// ---- Every backend ---------------------------------------------------------------------------

enum class Backend { kMemory, kFile, kRedis };

class StoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  static void SetUpTestSuite() {
    redis_ = std::make_unique<RedisServer>();
    if (!redis_->start(&redis_skip_reason_)) redis_.reset();
  }
  static void TearDownTestSuite() { redis_.reset(); }

  void SetUp() override {
    static std::atomic<int> counter{0};
    const std::string unique = "store-test-" + std::to_string(counter++);
    StatusOr<std::shared_ptr<Store>> s = Status(StatusCode::kInternal, "unset");
    switch (GetParam()) {
      case Backend::kMemory:
        s = open_store("memory://" + unique);
        break;
      case Backend::kFile:
        s = open_store(dir_.path() + "/store");
        break;
      case Backend::kRedis:
        if (!redis_) GTEST_SKIP() << redis_skip_reason_;
        s = open_store(redis_->url());
        // One server for the suite: each test gets keys of its own.
        if (s.ok()) s = prefix_store(*s, unique);
        break;
    }
    ASSERT_TRUE(s.ok()) << s.status().message();
    store_ = *s;
  }

  static std::unique_ptr<RedisServer> redis_;
  static std::string redis_skip_reason_;
  test::TempDir dir_{"store"};
  std::shared_ptr<Store> store_;
};

std::unique_ptr<RedisServer> StoreTest::redis_;
std::string StoreTest::redis_skip_reason_;

TEST_P(StoreTest, SetGetOverwriteAndBinaryValues) {
  const std::string binary("a\0b\xff\n", 5);
  ASSERT_TRUE(store_->set("k", binary).ok());
  auto v = store_->get("k", 1s);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(*v, binary);
  ASSERT_TRUE(store_->set("k", "").ok());
  EXPECT_EQ(*store_->get("k", 1s), "");
  ASSERT_TRUE(store_->set("k", "third").ok());
  EXPECT_EQ(*store_->get("k", 1s), "third");
}

TEST_P(StoreTest, TryGetAndRemove) {
  EXPECT_FALSE(store_->try_get("k")->has_value());
  ASSERT_TRUE(store_->set("k", "v").ok());
  EXPECT_EQ(store_->try_get("k")->value_or("?"), "v");
  EXPECT_TRUE(*store_->remove("k"));
  EXPECT_FALSE(*store_->remove("k"));  // deleting a missing key is not an error
  EXPECT_FALSE(store_->try_get("k")->has_value());
}

TEST_P(StoreTest, GetTimesOutNamingTheKey) {
  const auto t0 = std::chrono::steady_clock::now();
  auto v = store_->get("rank/3/address", 150ms);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(v.ok());
  EXPECT_GE(took, 140ms);
  EXPECT_LT(took, 3s);
  EXPECT_NE(v.status().message().find("rank/3/address"), std::string::npos) << v.status().message();
  EXPECT_NE(v.status().message().find("timed out after 150 ms"), std::string::npos)
      << v.status().message();
}

TEST_P(StoreTest, GetWaitsForALaterSet) {
  std::thread writer([&] {
    std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(store_->set("late", "here").ok());
  });
  auto v = store_->get("late", 10s);
  writer.join();
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(*v, "here");
}

TEST_P(StoreTest, WaitNamesOnlyTheMissingKeys) {
  ASSERT_TRUE(store_->set("a", "1").ok());
  const Status s = store_->wait({"a", "b", "c"}, 100ms);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().find("'a'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("b'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("c'"), std::string::npos) << s.message();
  std::thread writer([&] {
    std::this_thread::sleep_for(50ms);
    ASSERT_TRUE(store_->set("b", "2").ok());
    ASSERT_TRUE(store_->set("c", "3").ok());
  });
  EXPECT_TRUE(store_->wait({"a", "b", "c"}, 10s).ok());
  writer.join();
  EXPECT_TRUE(store_->wait({}, 10ms).ok());
}

TEST_P(StoreTest, AddCountsFromZero) {
  EXPECT_EQ(*store_->add("n", 5), 5);
  EXPECT_EQ(*store_->add("n", -7), -2);
  EXPECT_EQ(*store_->get("n", 1s), "-2");
  ASSERT_TRUE(store_->set("text", "not a number").ok());
  auto bad = store_->add("text", 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().message();
}

TEST_P(StoreTest, CompareSetSemantics) {
  // Absent key: matches only "expected absent".
  EXPECT_EQ(*store_->compare_set("k", std::string("x"), "y"), "");
  EXPECT_FALSE(store_->try_get("k")->has_value());
  EXPECT_EQ(*store_->compare_set("k", std::nullopt, "first"), "first");
  // Present key: "expected absent" no longer matches; the current value comes back.
  EXPECT_EQ(*store_->compare_set("k", std::nullopt, "other"), "first");
  EXPECT_EQ(*store_->compare_set("k", std::string("wrong"), "other"), "first");
  EXPECT_EQ(*store_->compare_set("k", std::string("first"), "second"), "second");
  EXPECT_EQ(*store_->get("k", 1s), "second");
}

TEST_P(StoreTest, ConcurrentAddFromThreads) {
  constexpr int kThreads = 8, kAdds = 100;
  test::run_ranks(kThreads, [&](int) {
    for (int i = 0; i < kAdds; ++i) ASSERT_TRUE(store_->add("counter", 1).ok());
  });
  EXPECT_EQ(*store_->get("counter", 1s), std::to_string(kThreads * kAdds));
}

TEST_P(StoreTest, CompareSetRaceHasOneWinner) {
  constexpr int kThreads = 8;
  std::atomic<int> winners{0};
  test::run_ranks(kThreads, [&](int t) {
    const std::string mine = "thread-" + std::to_string(t);
    auto v = store_->compare_set("leader", std::nullopt, mine);
    ASSERT_TRUE(v.ok()) << v.status().message();
    if (*v == mine) winners++;
  });
  EXPECT_EQ(winners.load(), 1);
}

TEST_P(StoreTest, PrefixesIsolateKeys) {
  auto a = prefix_store(store_, "job/1/gen/0");
  auto b = prefix_store(store_, "job/1/gen/1");
  ASSERT_TRUE(a->set("rank/0", "A").ok());
  ASSERT_TRUE(b->set("rank/0", "B").ok());
  EXPECT_EQ(*a->get("rank/0", 1s), "A");
  EXPECT_EQ(*b->get("rank/0", 1s), "B");
  EXPECT_EQ(*store_->get("job/1/gen/0/rank/0", 1s), "A");
  EXPECT_FALSE(store_->try_get("rank/0")->has_value());
  EXPECT_EQ(*a->add("count", 2), 2);
  EXPECT_FALSE(b->try_get("count")->has_value());
  EXPECT_TRUE(a->wait({"rank/0", "count"}, 1s).ok());
  const Status s = b->wait({"count"}, 50ms);
  EXPECT_NE(s.message().find("job/1/gen/1/count"), std::string::npos) << s.message();
  EXPECT_TRUE(*a->remove("rank/0"));
  EXPECT_EQ(*b->get("rank/0", 1s), "B");
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest,
                         ::testing::Values(Backend::kMemory, Backend::kFile, Backend::kRedis),
                         [](const auto& info) {
                           switch (info.param) {
                             case Backend::kMemory:
                               return std::string("memory");
                             case Backend::kFile:
                               return std::string("file");
                             case Backend::kRedis:
                               return std::string("redis");
                           }
                           return std::string("?");
                         });

// ---- Several processes -----------------------------------------------------------------------

// Four processes each add 1 a hundred times and race once on compare_set. The child exits 10 if
// it won the race, 11 if it lost, 1 on any error.
void add_and_race_from_processes(const std::string& url) {
  constexpr int kProcs = 4, kAdds = 100;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    const pid_t pid = fork();
    if (pid == 0) {
      auto s = open_store(url, 10s);
      if (!s.ok()) _exit(1);
      for (int i = 0; i < kAdds; ++i)
        if (!(*s)->add("counter", 1).ok()) _exit(1);
      const std::string mine = "proc-" + std::to_string(p);
      auto v = (*s)->compare_set("winner", std::nullopt, mine);
      _exit(!v.ok() ? 1 : *v == mine ? 10 : 11);
    }
    pids.push_back(pid);
  }
  int winners = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_NE(WEXITSTATUS(status), 1) << "a child failed";
    winners += WEXITSTATUS(status) == 10;
  }
  EXPECT_EQ(winners, 1);
  auto store = open_store(url);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(*(*store)->get("counter", 1s), std::to_string(kProcs * kAdds));
}

TEST(MultiProcStore, FileAddAndCompareSetAreAtomicAcrossProcesses) {
  test::TempDir dir("store-procs");
  add_and_race_from_processes(dir.path() + "/store");
}

TEST(MultiProcStore, RedisAddAndCompareSetAreAtomicAcrossProcesses) {
  RedisServer server;
  std::string why;
  if (!server.start(&why)) GTEST_SKIP() << why;
  add_and_race_from_processes(server.url());
}

// ---- File store ------------------------------------------------------------------------------

TEST(FileStore, AwkwardKeysGetDistinctFiles) {
  test::TempDir dir("file-store");
  auto store = open_store("file://" + dir.path() + "/s");
  ASSERT_TRUE(store.ok()) << store.status().message();
  const std::vector<std::string> keys = {
      "a/b", "a%2Fb", ".lock", "..", "", "a b", std::string(300, 'k'), std::string(300, 'k') + "1"};
  for (size_t i = 0; i < keys.size(); ++i)
    ASSERT_TRUE((*store)->set(keys[i], std::to_string(i)).ok());
  for (size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ(*(*store)->get(keys[i], 1s), std::to_string(i)) << "key '" << keys[i] << "'";
  for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/s"))
    EXPECT_TRUE(e.is_regular_file()) << e.path();
  // A second handle on the same directory sees the same data.
  auto again = open_store(dir.path() + "/s");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*(*again)->get("a/b", 1s), "0");
}

// A process stopped while it holds the directory's lock (SIGSTOP in the middle of a mutation)
// must not hang every writer: set() fails after the lock timeout naming the lock, and works
// again once the holder is gone.
TEST(FileStore, AStoppedLockHolderGivesAnErrorNotAHang) {
  test::TempDir dir("file-store");
  auto store = open_store("file://" + dir.path());
  ASSERT_TRUE(store.ok()) << store.status().message();
  const std::string lock = dir.path() + "/.lock";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) _exit(1);
    raise(SIGSTOP);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, WUNTRACED), child);
  ASSERT_TRUE(WIFSTOPPED(status));
  const auto t0 = std::chrono::steady_clock::now();
  Status s = (*store)->set("k", "v");
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(".lock has been held"), std::string::npos) << s.message();
  EXPECT_GE(waited, 9.0);
  EXPECT_LT(waited, 20.0);
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  EXPECT_TRUE((*store)->set("k", "v").ok());
  EXPECT_EQ(*(*store)->get("k", 1s), "v");
}

TEST(FileStore, RefusesADirectoryOfAnotherFormat) {
  test::TempDir dir("file-store");
  test::write_text(dir.file(".cann-store"), "something else\n");
  auto store = open_store(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss);
}

TEST(OpenStore, DispatchesOnTheUrl) {
  auto m1 = open_store("memory://same-name");
  auto m2 = open_store("memory://same-name");
  ASSERT_TRUE(m1.ok() && m2.ok());
  ASSERT_TRUE((*m1)->set("k", "v").ok());
  EXPECT_EQ(*(*m2)->get("k", 1s), "v");
  EXPECT_EQ((*m1)->address(), "memory://same-name");
  for (const char* bad : {"", "ftp://host/x", "tcp://host", "tcp://host:99999"}) {
    auto s = open_store(bad);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

// ---- Redis -----------------------------------------------------------------------------------

TEST(RedisUrl, ParsesEveryPart) {
  auto u = parse_redis_url("redis://node7");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "node7");
  EXPECT_EQ(u->port, 6379);
  EXPECT_EQ(u->db, 0);
  u = parse_redis_url("redis://:p%40ss@10.0.0.2:7000/3");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->password, "p@ss");
  EXPECT_EQ(u->port, 7000);
  EXPECT_EQ(u->db, 3);
  EXPECT_EQ(u->address(), "redis://10.0.0.2:7000/3");
  u = parse_redis_url("redis://admin:pw@[::1]:7001");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->user, "admin");
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->address(), "redis://[::1]:7001");
  for (const char* bad :
       {"redis://", "redis://:secret@h:notaport", "redis://h:0", "redis://h/x", "http://h"}) {
    auto b = parse_redis_url(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().message().find("secret"), std::string::npos) << b.status().message();
  }
}

TEST(RedisStore, PasswordErrorsNameTheServerButNotThePassword) {
  RedisServer server;
  std::string why;
  if (!server.start(&why)) GTEST_SKIP() << why;
  const std::string where = "127.0.0.1:" + std::to_string(server.port());
  auto wrong = open_store("redis://:wrong-horse@" + where);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find(where), std::string::npos) << wrong.status().message();
  EXPECT_NE(wrong.status().message().find("password"), std::string::npos);
  EXPECT_EQ(wrong.status().message().find("wrong-horse"), std::string::npos);
  auto none = open_store("redis://" + where);
  ASSERT_TRUE(none.ok());
  const Status s = (*none)->set("k", "v");
  EXPECT_NE(s.message().find("requires a password"), std::string::npos) << s.message();
}

// A server in protected mode (no password, reached from another host) answers every command
// with a DENIED paragraph: the error says what that is and what to do, not that a counter holds
// a non-integer.
TEST(RedisStore, ProtectedModeRefusalSaysSo) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int port = test::free_tcp_port();
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 8), 0);
  std::atomic<bool> done{false};
  std::thread server([&] {
    const std::string denied =
        "-DENIED Redis is running in protected mode because protected mode is enabled and no "
        "password is set for the default user.\r\n";
    while (!done) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int c = accept(fd, nullptr, nullptr);
      if (c < 0) continue;
      char buf[512];
      if (read(c, buf, sizeof(buf)) > 0) (void)!write(c, denied.data(), denied.size());
      close(c);
    }
  });
  auto store = open_store("redis://127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(store.ok()) << store.status().message();
  for (const Status& s : {(*store)->set("k", "v"), (*store)->add("n", 1).status()}) {
    EXPECT_NE(s.message().find("protected mode"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("--requirepass"), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find("not an integer"), std::string::npos) << s.message();
  }
  done = true;
  server.join();
  close(fd);
}

TEST(RedisStore, AddOnANonCounterNamesTheKey) {
  RedisServer server;
  std::string why;
  if (!server.start(&why)) GTEST_SKIP() << why;
  auto store = open_store(server.url());
  ASSERT_TRUE(store.ok()) << store.status().message();
  ASSERT_TRUE((*store)->set("word", "abc").ok());
  auto n = (*store)->add("word", 1);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("key 'word'"), std::string::npos) << n.status().message();
  EXPECT_NE(n.status().message().find("not an integer"), std::string::npos);
}

TEST(RedisStore, SelectsTheDatabase) {
  RedisServer server;
  std::string why;
  if (!server.start(&why)) GTEST_SKIP() << why;
  auto db0 = open_store(server.url());
  auto db3 = open_store(server.url("/3"));
  ASSERT_TRUE(db0.ok() && db3.ok());
  ASSERT_TRUE((*db3)->set("k", "in three").ok());
  EXPECT_FALSE((*db0)->try_get("k")->has_value());
  EXPECT_EQ(*(*db3)->get("k", 1s), "in three");
  EXPECT_NE((*db3)->address().find("/3"), std::string::npos);
}

TEST(RedisStore, UnreachableServerIsNamed) {
  const int port = test::free_tcp_port();
  auto s = open_store("redis://:pw@127.0.0.1:" + std::to_string(port), 1s);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(
      s.status().message().find("cannot connect to redis://127.0.0.1:" + std::to_string(port)),
      std::string::npos)
      << s.status().message();
}

TEST(RedisStore, ReconnectsToARestartedServer) {
  auto server = std::make_unique<RedisServer>();
  std::string why;
  if (!server->start(&why)) GTEST_SKIP() << why;
  const int port = server->port();
  auto store = open_store(server->url());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->set("k", "before").ok());
  server.reset();  // killed
  server = std::make_unique<RedisServer>(port);
  ASSERT_TRUE(server->start(&why)) << why;
  EXPECT_TRUE((*store)->set("k", "after").ok());
  EXPECT_EQ(*(*store)->add("n", 1), 1);  // add is safe: the dead connection is noticed first
  EXPECT_EQ(*(*store)->get("k", 1s), "after");
}

TEST(RedisStore, ServerKilledDuringAWaitGivesAClearErrorQuickly) {
  RedisServer server;
  std::string why;
  if (!server.start(&why)) GTEST_SKIP() << why;
  auto store = open_store(server.url(), 2s);
  ASSERT_TRUE(store.ok());
  std::thread killer([&] {
    std::this_thread::sleep_for(300ms);
    server.kill_now();
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto v = (*store)->get("never/written", 60s);
  const auto took = std::chrono::steady_clock::now() - t0;
  killer.join();
  ASSERT_FALSE(v.ok());
  EXPECT_LT(took, 10s);
  const std::string& m = v.status().message();
  EXPECT_NE(m.find("lost connection to redis://127.0.0.1:" + std::to_string(server.port())),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("timed out"), std::string::npos) << m;
  EXPECT_EQ(m.find(RedisServer::kPassword), std::string::npos) << m;
}

}  // namespace
}  // namespace cann::comm
