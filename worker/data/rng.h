// A small deterministic random number generator (SplitMix64) with portable uniform integers and
// shuffling. Unlike std::uniform_int_distribution / std::shuffle, the sequences do not depend on
// the standard library, so data order and synthetic data are identical on every build.
//
// Thread-safety: an Rng is a value; do not share one between threads without a lock.
#ifndef DHP_WORKER_DATA_RNG_H_
#define DHP_WORKER_DATA_RNG_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace dhp {
namespace data {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  // Mixes several values into one seed (e.g. base seed, epoch, dataset index).
  static uint64_t Mix(uint64_t a, uint64_t b) {
    Rng r(a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2)));
    return r.Next();
  }

  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n), n > 0, without modulo bias.
  uint64_t Uniform(uint64_t n) {
    const uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % n);
    uint64_t x;
    do {
      x = Next();
    } while (x >= limit);
    return x % n;
  }

  // Uniform in [lo, hi], lo <= hi.
  int64_t Range(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Uniform(static_cast<uint64_t>(hi - lo) + 1));
  }

  // Fisher-Yates shuffle.
  template <typename T>
  void Shuffle(std::vector<T>* v) {
    for (size_t i = v->size(); i > 1; --i) {
      std::swap((*v)[i - 1], (*v)[Uniform(i)]);
    }
  }

 private:
  uint64_t state_;
};

}  // namespace data
}  // namespace dhp

#endif  // DHP_WORKER_DATA_RNG_H_
