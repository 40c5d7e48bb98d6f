// The compiled-grammar cache: compiled grammars keyed by constraint (kind,
// spec, strict), least recently used evicted past a fixed count. Matchers
// hold their grammar, so an evicted grammar lives on while requests use it.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "grammar/constraint.h"
#include "grammar/matcher.h"

namespace vpod::grammar {

struct GrammarCacheStats {
  std::int64_t hits = 0;
  std::int64_t misses = 0;
  std::size_t size = 0;
};

class GrammarCache {
 public:
  explicit GrammarCache(std::size_t max_entries);

  // The cached grammar of `c`, or null (counts a hit or a miss).
  std::shared_ptr<const CompiledGrammar> find(const Constraint& c);
  // Stores `grammar` as `c`'s, evicting the least recently used past the bound.
  void insert(const Constraint& c, std::shared_ptr<const CompiledGrammar> grammar);
  GrammarCacheStats stats() const;

 private:
  static std::string key_of(const Constraint& c);
  using Entry = std::pair<std::string, std::shared_ptr<const CompiledGrammar>>;

  const std::size_t max_entries_;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  std::int64_t hits_ = 0;
  std::int64_t misses_ = 0;
};

}  // namespace vpod::grammar
