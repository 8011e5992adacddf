#include "worker/comm/controller_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "worker/comm/in_memory_kv_client.h"

namespace dhp::comm {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

// The message of the c10::Error `f` throws ("" if none).
template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(ControllerStoreTest, SetGetUnderThePrefix) {
  InMemoryKvClient kv;
  ControllerStore store(kv, "text.tp0/store/", 1000ms);
  store.set("k", Bytes("value"));
  EXPECT_EQ(store.get("k"), Bytes("value"));
  EXPECT_EQ(*kv.Get("text.tp0/store/k", 0ms), "value");
  // Another prefix does not see it.
  ControllerStore other(kv, "text.tp1/store/", 50ms);
  EXPECT_FALSE(other.check({"k"}));
}

TEST(ControllerStoreTest, GetBlocksUntilSet) {
  InMemoryKvClient kv;
  ControllerStore store(kv, "g/", 5000ms);
  std::thread setter([&] {
    std::this_thread::sleep_for(20ms);
    ControllerStore(kv, "g/").set("late", Bytes("x"));
  });
  EXPECT_EQ(store.get("late"), Bytes("x"));
  setter.join();
}

TEST(ControllerStoreTest, GetTimesOutWithTheStoreTimeoutNamingTheKey) {
  InMemoryKvClient kv;
  ControllerStore store(kv, "world/store/", 100ms);
  auto start = std::chrono::steady_clock::now();
  std::string err = ErrorOf([&] { store.get("rank_1"); });
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_THAT(err, HasSubstr("ControllerStore \"world/store/\": get [\"rank_1\"]"));
  EXPECT_THAT(err, HasSubstr("DEADLINE_EXCEEDED"));
  EXPECT_THAT(err, HasSubstr("world/store/rank_1"));
  EXPECT_GE(elapsed, 100ms);
  EXPECT_LT(elapsed, 3000ms);
}

TEST(ControllerStoreTest, AddCountsFromZero) {
  InMemoryKvClient kv;
  ControllerStore store(kv, "p/");
  EXPECT_EQ(store.add("n", 3), 3);
  EXPECT_EQ(store.add("n", 4), 7);
  EXPECT_EQ(store.get("n"), Bytes("7"));
  store.set("s", Bytes("not a number"));
  EXPECT_THAT(ErrorOf([&] { store.add("s", 1); }), HasSubstr("FAILED_PRECONDITION"));
}

TEST(ControllerStoreTest, WaitCheckAndDelete) {
  InMemoryKvClient kv;
  ControllerStore store(kv, "p/", 5000ms);
  store.set("a", Bytes("1"));
  EXPECT_TRUE(store.check({"a"}));
  EXPECT_FALSE(store.check({"a", "b"}));
  std::thread setter([&] {
    std::this_thread::sleep_for(20ms);
    store.set("b", Bytes("2"));
  });
  store.wait({"a", "b"});  // default timeout: the store's
  setter.join();
  EXPECT_TRUE(store.deleteKey("a"));
  EXPECT_FALSE(store.deleteKey("a"));
  EXPECT_FALSE(store.check({"a"}));
}

TEST(ControllerStoreTest, WaitWithExplicitTimeoutListsMissingKeys) {
  InMemoryKvClient kv;
  ControllerStore store(kv, "p/", 60000ms);
  store.set("a", Bytes("1"));
  auto start = std::chrono::steady_clock::now();
  std::string err = ErrorOf([&] { store.wait({"a", "b", "c"}, 50ms); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3000ms);
  EXPECT_THAT(err, HasSubstr("wait for [\"a\", \"b\", \"c\"]"));
  EXPECT_THAT(err, HasSubstr("still missing \"p/b\", \"p/c\" after 50 ms"));
}

TEST(ControllerStoreTest, TimeoutIsAdjustable) {
  InMemoryKvClient kv;
  ControllerStore store(kv, "p/", 60000ms);
  store.setTimeout(30ms);
  EXPECT_EQ(store.getTimeout(), 30ms);
  EXPECT_THAT(ErrorOf([&] { store.get("never"); }), HasSubstr("after 30 ms"));
}

TEST(ControllerStoreTest, GetNumKeysIsUnsupported) {
  InMemoryKvClient kv;
  ControllerStore store(kv, "p/");
  EXPECT_THAT(ErrorOf([&] { store.getNumKeys(); }), HasSubstr("getNumKeys is not supported"));
}

TEST(ControllerStoreTest, CompareSetFollowsC10dSemantics) {
  InMemoryKvClient kv;
  ControllerStore store(kv, "p/", 1000ms);
  // Absent key, non-empty expectation: unchanged, the expectation is returned.
  EXPECT_EQ(store.compareSet("k", Bytes("x"), Bytes("y")), Bytes("x"));
  EXPECT_FALSE(store.check({"k"}));
  // Absent key, empty expectation: created.
  EXPECT_EQ(store.compareSet("k", {}, Bytes("v1")), Bytes("v1"));
  // Match: swapped.
  EXPECT_EQ(store.compareSet("k", Bytes("v1"), Bytes("v2")), Bytes("v2"));
  // Mismatch: the current value is returned, nothing changes.
  EXPECT_EQ(store.compareSet("k", Bytes("v1"), Bytes("v3")), Bytes("v2"));
  EXPECT_EQ(store.get("k"), Bytes("v2"));
  EXPECT_EQ(*kv.Get("p/k/cas_lock", 0ms), "0");  // lock released
}

TEST(ControllerStoreTest, CompareSetIsAtomicAcrossThreads) {
  InMemoryKvClient kv;
  ControllerStore store(kv, "p/", 10000ms);
  store.set("counter", Bytes("0"));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        while (true) {  // optimistic increment; values "<count>:<writer>" are unique per writer
          std::vector<uint8_t> cur = store.get("counter");
          const int count = std::stoi(std::string(cur.begin(), cur.end()));
          const std::string next = std::to_string(count + 1) + ":" + std::to_string(t);
          if (store.compareSet("counter", cur, Bytes(next)) == Bytes(next)) break;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<uint8_t> final_value = store.get("counter");
  EXPECT_EQ(std::stoi(std::string(final_value.begin(), final_value.end())), 100);
}

TEST(ControllerStoreTest, CloneSharesTheKv) {
  InMemoryKvClient kv;
  ControllerStore store(kv, "p/", 1234ms);
  c10::intrusive_ptr<c10d::Store> copy = store.clone();
  copy->set("x", Bytes("1"));
  EXPECT_EQ(store.get("x"), Bytes("1"));
  EXPECT_EQ(copy->getTimeout(), 1234ms);
}

}  // namespace
}  // namespace dhp::comm
