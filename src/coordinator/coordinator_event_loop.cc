// The coordinator's event thread: events in (frames, connections, planner results) from the
// server's thread and helper threads, handled one at a time, timers between them.
#include <algorithm>
#include <thread>

#include "coordinator/coordinator_impl.h"

namespace wsync {

using coordinator_internal::Clock;

void Coordinator::Impl::push(Event e) {
  {
    std::lock_guard lock(queue_mu_);
    queue_.push_back(std::move(e));
    queued_.fetch_add(1);
  }
  queue_cv_.notify_one();
}

void Coordinator::Impl::run() {
  // Busy polling (ControlOptions::spin_wait) while versions move: from each event handled while a
  // version was in flight (or that started or ended one), this thread and the server's loop poll
  // without sleeping for spin_wait, so each message is taken at once instead of after a wake-up.
  Clock::time_point spin_until{};
  while (true) {
    std::optional<Event> event;
    const Clock::time_point wakeup = nextWakeup();
    while (queued_.load() == 0 && !stop_requested_.load() &&
           Clock::now() < std::min(spin_until, wakeup))
      std::this_thread::yield();
    {
      std::unique_lock lock(queue_mu_);
      queue_cv_.wait_until(lock, wakeup, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      if (!queue_.empty()) {
        event = std::move(queue_.front());
        queue_.pop_front();
        queued_.fetch_sub(1);
      }
    }
    if (event) {
      const bool moving = versionMoving();
      handle(*event);
      if ((moving || versionMoving()) && opt_.control.spin_wait.count() > 0) {
        spin_until = Clock::now() + opt_.control.spin_wait;
        if (server_) server_->spinUntil(spin_until);
      }
    }
    checkTimers();
  }
}

Clock::time_point Coordinator::Impl::nextWakeup() const {
  auto t = Clock::now() + std::chrono::milliseconds(100);
  if (phase_ < Phase::kRunning) t = std::min(t, phase_deadline_);
  if (phase_ == Phase::kRunning) {
    if (std::optional<Clock::time_point> d = versions_.sequencer()->nextDeadline())
      t = std::min(t, *d);
  }
  return t;
}

}  // namespace wsync
