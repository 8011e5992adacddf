// CancelSignal: how a caller that gave up (a gRPC client that cancelled its call, or whose
// deadline passed) reaches the work its call started, so that the work ends now rather than
// when its own timeout does. The transport calls Cancel; the work registers what ends it.
//
//   auto cancel = std::make_shared<CancelSignal>();
//   kv.WaitAsync(scope, keys, timeout, done, cancel);  // registers OnCancel, Detaches in done
//   cancel->Cancel();                                  // the client went away: the wait ends
//
// OnCancel's handler runs at most once: on Cancel, or at once when Cancel came first. Detach
// (the work ended by itself) forgets the handler and refuses later ones, and waits for a
// handler running on another thread to return, so that what the handler uses may be destroyed
// once Detach has returned. A handler may call Detach on its own thread.
//
// One signal per call: once detached, a signal ignores every later handler.
//
// Thread-safety: every method may be called from any thread.
#ifndef DHP_COMMON_CANCEL_SIGNAL_H_
#define DHP_COMMON_CANCEL_SIGNAL_H_

#include <functional>
#include <mutex>

namespace dhp {

class CancelSignal {
 public:
  CancelSignal() = default;
  CancelSignal(const CancelSignal&) = delete;
  CancelSignal& operator=(const CancelSignal&) = delete;

  // The caller gave up: runs the handler, if one is registered. Idempotent.
  void Cancel();
  // Registers what ends the work, replacing an earlier handler; runs it at once when Cancel
  // came first. Ignored after Detach.
  void OnCancel(std::function<void()> handler);
  // The work ended: no handler will run after this returns.
  void Detach();
  bool cancelled() const;

 private:
  mutable std::recursive_mutex mu_;  // held while the handler runs; recursive for Detach in it
  std::function<void()> handler_;
  bool cancelled_ = false;
  bool detached_ = false;
};

}  // namespace dhp

#endif  // DHP_COMMON_CANCEL_SIGNAL_H_
