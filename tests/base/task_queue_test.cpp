#include "base/task_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>

namespace ds {
namespace {

TEST(TaskQueue, RunsTasksAndRefusesPastItsBound) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> ran{0};
  {
    TaskQueue queue(1, 2);
    std::promise<void> started;
    ASSERT_TRUE(queue.try_post([&] { started.set_value(); released.wait(); ++ran; }));
    started.get_future().wait();  // the one thread is busy: what follows waits in the queue
    EXPECT_TRUE(queue.try_post([&] { ++ran; }));
    EXPECT_TRUE(queue.try_post([&] { ++ran; }));
    EXPECT_FALSE(queue.try_post([&] { ++ran; }));  // two already wait
    release.set_value();
  }  // the destructor runs what was queued, then joins
  EXPECT_EQ(ran, 3);
}

}  // namespace
}  // namespace ds
