#include "controller/rendezvous_kv.h"

#include <atomic>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "controller/store.h"
#include "dhp/v1/job.pb.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using std::chrono::milliseconds;

const KvScopeKey kRun1{"j-1", 1};
const KvScopeKey kRun2{"j-1", 2};

// A store holding job j-1 with its run attempt 1 in `state`.
std::unique_ptr<Store> StoreWithRun(v1::RunState state) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(":memory:");
  EXPECT_TRUE(store.ok()) << store.status();
  JobWrite write;
  write.job.set_id("j-1");
  write.create = true;
  v1::Run run;
  run.set_attempt(1);
  run.set_state(state);
  write.runs.push_back(run);
  EXPECT_TRUE((*store)->Commit(write).ok());
  return std::move(*store);
}

TEST(RendezvousKvTest, SetGetIsScopedByAttempt) {
  RendezvousKv kv;
  ASSERT_TRUE(kv.Set(kRun1, "addr", "10.0.0.1:2900").ok());
  EXPECT_EQ(*kv.Get(kRun1, "addr", milliseconds(0)), "10.0.0.1:2900");
  absl::StatusOr<std::string> other = kv.Get(kRun2, "addr", milliseconds(0));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(other.status().message(), "key \"addr\" is not set in job j-1 attempt 2");
}

TEST(RendezvousKvTest, GetBlocksUntilAnotherThreadSets) {
  RendezvousKv kv;
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(kv.Set(kRun1, "rank0", "ready").ok());
  });
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> v = kv.Get(kRun1, "rank0", milliseconds(5000));
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "ready");
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(40));
}

TEST(RendezvousKvTest, WaitTimesOutNamingMissingKeys) {
  RendezvousKv kv;
  ASSERT_TRUE(kv.Set(kRun1, "rank/0", "x").ok());
  absl::Status s = kv.Wait(kRun1, {"rank/0", "rank/1", "rank/2"}, milliseconds(30));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(),
            "rendezvous of job j-1 attempt 1: still missing \"rank/1\", \"rank/2\" after 30 ms");
}

TEST(RendezvousKvTest, AKeyAskedForTwiceIsNamedOnceWhenMissing) {
  RendezvousKv kv;
  ASSERT_TRUE(kv.Set(kRun1, "rank/0", "x").ok());
  absl::Status s =
      kv.Wait(kRun1, {"rank/1", "rank/0", "rank/1", "rank/2", "rank/1"}, milliseconds(0));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(),
            "rendezvous of job j-1 attempt 1: still missing \"rank/1\", \"rank/2\" after 0 ms");
}

TEST(RendezvousKvTest, AddCountsFromManyThreads) {
  RendezvousKv kv;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) ASSERT_TRUE(kv.Add(kRun1, "arrived", 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*kv.Add(kRun1, "arrived", 0), 800);
  EXPECT_EQ(*kv.Get(kRun1, "arrived", milliseconds(0)), "800");
}

TEST(RendezvousKvTest, AddOnNonIntegerIsRefused) {
  RendezvousKv kv;
  ASSERT_TRUE(kv.Set(kRun1, "k", "abc").ok());
  EXPECT_EQ(kv.Add(kRun1, "k", 1).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*kv.Get(kRun1, "k", milliseconds(0)), "abc");
}

TEST(RendezvousKvTest, CheckDeleteAndDropScope) {
  RendezvousKv kv;
  ASSERT_TRUE(kv.Set(kRun1, "a", "1").ok());
  EXPECT_TRUE(kv.Check(kRun1, {"a"}));
  EXPECT_FALSE(kv.Check(kRun1, {"a", "b"}));
  EXPECT_TRUE(*kv.Delete(kRun1, "a"));
  EXPECT_FALSE(*kv.Delete(kRun1, "a"));
  ASSERT_TRUE(kv.Set(kRun1, "b", "2").ok());
  ASSERT_TRUE(kv.Set(kRun2, "b", "2").ok());
  ASSERT_TRUE(kv.DropScope(kRun1).ok());
  EXPECT_EQ(kv.KeyCount(kRun1), 0u);
  EXPECT_EQ(kv.KeyCount(kRun2), 1u);
}

TEST(RendezvousKvTest, DropScopeWakesWaitersWithCancelled) {
  RendezvousKv kv;
  std::thread dropper([&] {
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_TRUE(kv.DropScope(kRun1).ok());
  });
  absl::Status s = kv.Wait(kRun1, {"never"}, milliseconds(5000));
  dropper.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
}

TEST(RendezvousKvTest, RejectsEmptyAndOversizedKeys) {
  RendezvousKv kv;
  EXPECT_EQ(kv.Set(kRun1, "", "v").message(), "key: must not be empty");
  EXPECT_EQ(kv.Set(kRun1, std::string(2000, 'k'), "v").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.Set(kRun1, "k", std::string(5 << 20, 'v')).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RendezvousKvTest, ARepeatedAddRequestIdAnswersAgainWithoutAdding) {
  RendezvousKv kv;
  EXPECT_EQ(*kv.Add(kRun1, "n", 5, "client-1"), 5);
  EXPECT_EQ(*kv.Add(kRun1, "n", 5, "client-1"), 5);  // a retry: the first answer
  EXPECT_EQ(*kv.Add(kRun1, "n", 1, "client-2"), 6);
  EXPECT_EQ(*kv.Add(kRun1, "n", 1), 7);  // no id: always adds
  EXPECT_EQ(*kv.Add(kRun1, "n", 1), 8);
  EXPECT_EQ(*kv.Add(kRun2, "n", 5, "client-1"), 5);  // ids are per attempt
  EXPECT_EQ(kv.Add(kRun1, "n", 1, std::string(129, 'x')).status().message(),
            "request_id: 129 bytes exceeds the limit of 128");
}

TEST(RendezvousKvTest, ARepeatedDeleteRequestIdAnswersAgain) {
  RendezvousKv kv;
  ASSERT_TRUE(kv.Set(kRun1, "k", "v").ok());
  EXPECT_TRUE(*kv.Delete(kRun1, "k", "client-1"));
  EXPECT_TRUE(*kv.Delete(kRun1, "k", "client-1"));  // a retry: "it existed", as answered
  ASSERT_TRUE(kv.Set(kRun1, "k", "again").ok());
  EXPECT_TRUE(*kv.Delete(kRun1, "k", "client-1"));   // and it deletes nothing new
  EXPECT_TRUE(kv.Check(kRun1, {"k"}));
  EXPECT_FALSE(*kv.Delete(kRun1, "absent", "client-2"));
  EXPECT_FALSE(*kv.Delete(kRun1, "absent", "client-2"));
}

// Issue 15 §5: keys and the answers to retried calls outlive the RendezvousKv (a controller
// restart) while the attempt's run lasts, and go with it.
TEST(RendezvousKvTest, KeysAndRepliesSurviveInTheStoreUntilTheScopeIsDropped) {
  std::unique_ptr<Store> store = StoreWithRun(v1::RUN_STATE_STARTING);
  {
    RendezvousKv kv(store.get());
    ASSERT_TRUE(kv.Load().ok());
    ASSERT_TRUE(kv.Set(kRun1, "addr/0", std::string("10.0.0.1\0:29500", 15)).ok());
    ASSERT_TRUE(kv.Set(kRun1, "gone", "x").ok());
    EXPECT_EQ(*kv.Add(kRun1, "n", 5, "client-1"), 5);
    EXPECT_TRUE(*kv.Delete(kRun1, "gone", "client-2"));
  }
  {
    RendezvousKv kv(store.get());  // the controller restarted
    ASSERT_TRUE(kv.Load().ok());
    EXPECT_EQ(kv.KeyCount(kRun1), 2u);
    EXPECT_EQ(*kv.Get(kRun1, "addr/0", milliseconds(0)), std::string("10.0.0.1\0:29500", 15));
    EXPECT_EQ(*kv.Add(kRun1, "n", 5, "client-1"), 5);  // its reply was lost: answered again
    EXPECT_EQ(*kv.Add(kRun1, "n", 1, "client-3"), 6);
    EXPECT_TRUE(*kv.Delete(kRun1, "gone", "client-2"));
    ASSERT_TRUE(kv.DropScope(kRun1).ok());  // the run ended
  }
  RendezvousKv kv(store.get());
  ASSERT_TRUE(kv.Load().ok());
  EXPECT_EQ(kv.KeyCount(kRun1), 0u);
  EXPECT_EQ(*kv.Add(kRun1, "n", 5, "client-1"), 5);  // nothing remembered
}

TEST(RendezvousKvTest, LoadForgetsTheKeysOfAnAttemptWhoseRunEnded) {
  std::unique_ptr<Store> store = StoreWithRun(v1::RUN_STATE_RUNNING);
  {
    RendezvousKv kv(store.get());
    ASSERT_TRUE(kv.Set(kRun1, "a", "1").ok());
  }
  JobWrite ended;  // the run failed, and the controller stopped before dropping the scope
  ended.job.set_id("j-1");
  v1::Run run;
  run.set_attempt(1);
  run.set_state(v1::RUN_STATE_FAILED);
  ended.runs.push_back(run);
  ASSERT_TRUE(store->Commit(ended).ok());
  RendezvousKv kv(store.get());
  ASSERT_TRUE(kv.Load().ok());
  EXPECT_EQ(kv.KeyCount(kRun1), 0u);
  absl::StatusOr<std::vector<StoredKvScope>> rows = store->LoadKv();
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_TRUE(rows->empty());
}

TEST(RendezvousKvTest, AChangeTheStoreRefusesIsNotApplied) {
  std::unique_ptr<Store> store = StoreWithRun(v1::RUN_STATE_STARTING);
  RendezvousKv kv(store.get());
  const KvScopeKey unknown{"j-unknown", 1};  // no such job: its rows break a foreign key
  EXPECT_EQ(kv.Set(unknown, "a", "1").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(kv.Add(unknown, "n", 1).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(kv.Check(unknown, {"a"}));
  EXPECT_FALSE(kv.Check(unknown, {"n"}));
}

TEST(RendezvousKvTest, CloseEndsWaitsAndLaterCallsWithUnavailable) {
  RendezvousKv kv;
  std::thread closer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    kv.Close();
  });
  absl::Status s = kv.Wait(kRun1, {"never"}, milliseconds(5000));
  closer.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "the controller is shutting down");
  EXPECT_EQ(kv.Get(kRun1, "never", milliseconds(0)).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(kv.Set(kRun1, "k", "v").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(kv.Add(kRun1, "n", 1).status().code(), absl::StatusCode::kUnavailable);
}

// This process's threads.
size_t Threads() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    ++n;
  }
  return n;
}

// What asynchronous waits ended with, in the order they ended. Declare it before the
// RendezvousKv: kv's destructor ends the waits still in flight, which write here.
struct Results {
  std::mutex mu;
  std::vector<std::pair<int, absl::StatusOr<std::string>>> ended;  // (wait's tag, result)
  RendezvousKv::WaitDone For(int tag) {
    return [this, tag](absl::StatusOr<std::string> r) {
      std::lock_guard<std::mutex> lock(mu);
      ended.emplace_back(tag, std::move(r));
    };
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return ended.size();
  }
  // Waits up to 5 s for `n` results.
  bool AwaitCount(size_t n) {
    for (int i = 0; i < 500 && size() < n; ++i) std::this_thread::sleep_for(milliseconds(10));
    return size() >= n;
  }
};

TEST(RendezvousKvTest, TenThousandWaitsHoldNoThreadAndEndWhenTheirKeyIsSet) {
  Results results;
  RendezvousKv kv;
  const size_t threads = Threads();
  for (int i = 0; i < 10000; ++i) {
    if (i % 2 == 0) {
      kv.GetAsync(kRun1, "rank0/addr", milliseconds(60000), results.For(i));
    } else {
      kv.WaitAsync(kRun1, {"rank0/addr"}, milliseconds(60000), results.For(i));
    }
  }
  EXPECT_EQ(kv.Waiting(), 10000u);
  EXPECT_EQ(results.size(), 0u);
  EXPECT_EQ(Threads(), threads);  // no thread per wait
  ASSERT_TRUE(kv.Set(kRun1, "other", "x").ok());  // another key ends nothing
  EXPECT_EQ(results.size(), 0u);
  ASSERT_TRUE(kv.Set(kRun1, "rank0/addr", "10.0.0.1:29500").ok());
  // Ended on this thread, by the Set, before it returned.
  ASSERT_EQ(results.size(), 10000u);
  EXPECT_EQ(kv.Waiting(), 0u);
  for (const auto& [tag, r] : results.ended) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, tag % 2 == 0 ? "10.0.0.1:29500" : "") << tag;
  }
}

TEST(RendezvousKvTest, WaitsPastTheLimitEndAtOnceAndThoseWithTheirKeysStillAnswer) {
  Results results;
  RendezvousKv kv(nullptr, /*max_waits=*/2);
  kv.WaitAsync(kRun1, {"a"}, milliseconds(60000), results.For(1));
  kv.GetAsync(kRun2, "a", milliseconds(60000), results.For(2));
  EXPECT_EQ(kv.Waiting(), 2u);
  kv.WaitAsync(kRun1, {"b"}, milliseconds(60000), results.For(3));  // a third: refused
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results.ended[0].first, 3);
  EXPECT_EQ(results.ended[0].second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(results.ended[0].second.status().message(),
            "rendezvous of job j-1 attempt 1: the controller holds 2 waits in flight already "
            "(its limit, over all jobs); retry once some have ended");
  EXPECT_EQ(kv.Waiting(), 2u);
  ASSERT_TRUE(kv.Set(kRun1, "c", "1").ok());
  kv.GetAsync(kRun1, "c", milliseconds(60000), results.For(4));  // there: needs no wait
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(*results.ended[1].second, "1");
  ASSERT_TRUE(kv.Set(kRun1, "a", "1").ok());  // ends wait 1: room for one more
  EXPECT_EQ(kv.Waiting(), 1u);
  kv.WaitAsync(kRun1, {"b"}, milliseconds(60000), results.For(5));
  EXPECT_EQ(kv.Waiting(), 2u);
  EXPECT_EQ(results.size(), 3u);  // wait 1's answer, nothing for 5 yet
}

TEST(RendezvousKvTest, AWaitForSeveralKeysEndsWithTheLastAndNotBeforeAll) {
  Results results;
  RendezvousKv kv;
  ASSERT_TRUE(kv.Set(kRun1, "b", "1").ok());
  kv.WaitAsync(kRun1, {"a", "b", "c"}, milliseconds(60000), results.For(1));
  ASSERT_TRUE(kv.Set(kRun1, "c", "1").ok());
  EXPECT_EQ(results.size(), 0u);
  ASSERT_TRUE(kv.Set(kRun2, "a", "1").ok());  // another attempt's key
  EXPECT_EQ(results.size(), 0u);
  ASSERT_TRUE(kv.Delete(kRun1, "b").ok());  // seen, then gone: waited for again
  ASSERT_TRUE(kv.Set(kRun1, "a", "1").ok());
  EXPECT_EQ(results.size(), 0u);
  EXPECT_EQ(kv.Waiting(), 1u);
  ASSERT_TRUE(kv.Add(kRun1, "b", 2).ok());  // an Add sets a key too
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results.ended[0].second.ok()) << results.ended[0].second.status();
  // Keys already there: ended at once, on the calling thread.
  kv.WaitAsync(kRun1, {"a", "b", "c"}, milliseconds(60000), results.For(2));
  kv.GetAsync(kRun1, "b", milliseconds(60000), results.For(3));
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(*results.ended[2].second, "2");
}

TEST(RendezvousKvTest, TimeoutsEndInDeadlineOrderNamingWhatIsMissing) {
  Results results;
  RendezvousKv kv;
  ASSERT_TRUE(kv.Set(kRun1, "rank/0", "x").ok());
  kv.WaitAsync(kRun1, {"rank/0", "rank/1"}, milliseconds(3000), results.For(1));
  kv.GetAsync(kRun1, "rank/2", milliseconds(20), results.For(2));  // earlier: the timer re-arms
  ASSERT_TRUE(results.AwaitCount(1));
  std::this_thread::sleep_for(milliseconds(100));
  std::lock_guard<std::mutex> lock(results.mu);
  ASSERT_EQ(results.ended.size(), 1u);  // the 3 s wait is still waiting
  EXPECT_EQ(results.ended[0].first, 2);
  EXPECT_EQ(results.ended[0].second.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(results.ended[0].second.status().message(),
            "rendezvous of job j-1 attempt 1: still missing \"rank/2\" after 20 ms");
  EXPECT_EQ(kv.Waiting(), 1u);
}

TEST(RendezvousKvTest, AWaitForManyKeysNamesTheFirstFewWhenItTimesOut) {
  RendezvousKv kv;
  std::vector<std::string> keys;
  for (int i = 0; i < 100000; ++i) keys.push_back("rank/" + std::to_string(i));
  keys[1] = std::string(99, 'a') + "\xc3\xa9tail";  // cut after 100 bytes: inside the é
  absl::Status s = kv.Wait(kRun1, keys, milliseconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(), "rendezvous of job j-1 attempt 1: still missing \"rank/0\", \"" +
                             std::string(99, 'a') +
                             "...\", \"rank/2\", \"rank/3\", \"rank/4\", \"rank/5\", "
                             "\"rank/6\", \"rank/7\" and 99992 more after 10 ms");
}

TEST(RendezvousKvTest, DropScopeEndsOnlyThatAttemptsWaits) {
  Results results;
  RendezvousKv kv;
  kv.WaitAsync(kRun1, {"a", "b"}, milliseconds(60000), results.For(1));
  kv.GetAsync(kRun2, "a", milliseconds(60000), results.For(2));
  ASSERT_TRUE(kv.DropScope(kRun1).ok());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results.ended[0].first, 1);
  EXPECT_EQ(results.ended[0].second.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(results.ended[0].second.status().message(),
            "rendezvous of job j-1 attempt 1 was closed while waiting for \"a\", \"b\"");
  EXPECT_EQ(kv.Waiting(), 1u);
  ASSERT_TRUE(kv.Set(kRun2, "a", "v").ok());
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(*results.ended[1].second, "v");
}

TEST(RendezvousKvTest, CloseEndsAsynchronousWaitsAndRefusesNewOnes) {
  Results results;
  RendezvousKv kv;
  kv.WaitAsync(kRun1, {"a"}, milliseconds(60000), results.For(1));
  kv.Close();
  kv.GetAsync(kRun1, "a", milliseconds(60000), results.For(2));
  ASSERT_EQ(results.size(), 2u);
  for (const auto& [tag, r] : results.ended) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << tag;
  }
  EXPECT_EQ(kv.Waiting(), 0u);
}

// A client that gives up (gRPC's cancel, or its deadline) ends its wait at once, so that waits
// left behind do not hold a place under the limit until their timeout.
TEST(RendezvousKvCancelTest, ACancelledWaitEndsAtOnceAndLeavesNoWaiter) {
  Results results;
  RendezvousKv kv;
  auto cancel = std::make_shared<CancelSignal>();
  kv.WaitAsync(kRun1, {"a", "b"}, milliseconds(60000), results.For(1), cancel);
  kv.GetAsync(kRun1, "a", milliseconds(60000), results.For(2), std::make_shared<CancelSignal>());
  EXPECT_EQ(kv.Waiting(), 2u);
  cancel->Cancel();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results.ended[0].first, 1);
  EXPECT_EQ(results.ended[0].second.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(results.ended[0].second.status().message(),
            "rendezvous of job j-1 attempt 1: the caller cancelled the wait for \"a\", \"b\"");
  EXPECT_EQ(kv.Waiting(), 1u);
  cancel->Cancel();  // again: nothing more
  ASSERT_TRUE(kv.Set(kRun1, "a", "x").ok());  // ends only the other one
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results.ended[1].first, 2);
  EXPECT_EQ(*results.ended[1].second, "x");
  EXPECT_EQ(kv.Waiting(), 0u);
}

TEST(RendezvousKvCancelTest, AWaitCancelledBeforeItStartsEndsAtOnceAndIsNotKept) {
  Results results;
  RendezvousKv kv(nullptr, /*max_waits=*/1);
  auto cancel = std::make_shared<CancelSignal>();
  cancel->Cancel();  // the client gave up while the call was on its way to the kv
  kv.WaitAsync(kRun1, {"a"}, milliseconds(60000), results.For(1), cancel);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results.ended[0].second.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(kv.Waiting(), 0u);
  kv.WaitAsync(kRun1, {"a"}, milliseconds(60000), results.For(2));  // its place is free
  EXPECT_EQ(kv.Waiting(), 1u);
  EXPECT_EQ(results.size(), 1u);
}

TEST(RendezvousKvCancelTest, ACancelAfterTheWaitEndedChangesNothing) {
  Results results;
  auto cancel = std::make_shared<CancelSignal>();
  {
    RendezvousKv kv;
    kv.GetAsync(kRun1, "a", milliseconds(60000), results.For(1), cancel);
    ASSERT_TRUE(kv.Set(kRun1, "a", "x").ok());
    ASSERT_EQ(results.size(), 1u);
    cancel->Cancel();  // the answer was on its way when the client cancelled
    EXPECT_EQ(results.size(), 1u);
    EXPECT_EQ(*results.ended[0].second, "x");
  }
  auto late = std::make_shared<CancelSignal>();
  {
    RendezvousKv kv;
    kv.GetAsync(kRun1, "b", milliseconds(60000), results.For(2), late);
  }  // Close ends it (UNAVAILABLE) and detaches the signal
  late->Cancel();  // the kv is gone: the signal no longer reaches it (ASan would see it)
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results.ended[1].second.status().code(), absl::StatusCode::kUnavailable);
}

// Cancels racing with the keys being set and with timeouts: every wait ends exactly once.
TEST(RendezvousKvCancelTest, CancelsRacingWithSetsEndEachWaitOnce) {
  Results results;
  RendezvousKv kv;
  constexpr int kWaits = 2000;
  std::vector<std::shared_ptr<CancelSignal>> signals;
  for (int i = 0; i < kWaits; ++i) {
    signals.push_back(std::make_shared<CancelSignal>());
    kv.WaitAsync(kRun1, {"k" + std::to_string(i % 7)}, milliseconds(i % 3 == 0 ? 5 : 60000),
                 results.For(i), signals.back());
  }
  std::thread canceller([&] {
    for (int i = 0; i < kWaits; i += 2) signals[i]->Cancel();
  });
  for (int k = 0; k < 7; ++k) ASSERT_TRUE(kv.Set(kRun1, "k" + std::to_string(k), "v").ok());
  canceller.join();
  ASSERT_TRUE(results.AwaitCount(kWaits));
  std::vector<int> seen(kWaits, 0);
  for (const auto& [tag, r] : results.ended) {
    ++seen[tag];
    EXPECT_TRUE(r.ok() || r.status().code() == absl::StatusCode::kCancelled ||
                r.status().code() == absl::StatusCode::kDeadlineExceeded)
        << r.status();
    if (tag % 2 == 1 && tag % 3 != 0) EXPECT_TRUE(r.ok()) << tag << ": " << r.status();
  }
  for (int i = 0; i < kWaits; ++i) EXPECT_EQ(seen[i], 1) << i;
  EXPECT_EQ(kv.Waiting(), 0u);
}

}  // namespace
}  // namespace dhp::controller
