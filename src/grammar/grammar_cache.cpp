// GrammarCache (grammar_cache.h): an LRU list plus a map from key to node.
#include "grammar/grammar_cache.h"

#include <algorithm>

namespace vpod::grammar {

GrammarCache::GrammarCache(std::size_t max_entries)
    : max_entries_(std::max<std::size_t>(max_entries, 1)) {}

std::string GrammarCache::key_of(const Constraint& c) {
  // kind, strict and whitespace in a fixed-size prefix, then the spec
  // verbatim: no two constraints share a key.
  std::string key;
  key.reserve(c.spec.size() + 3);
  key.push_back(static_cast<char>('0' + static_cast<int>(c.kind)));
  key.push_back(c.strict ? 's' : 'n');
  key.push_back(c.any_whitespace ? 'w' : 'c');
  key += c.spec;
  return key;
}

std::shared_ptr<const CompiledGrammar> GrammarCache::find(const Constraint& c) {
  const std::string key = key_of(c);
  std::lock_guard lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void GrammarCache::insert(const Constraint& c, std::shared_ptr<const CompiledGrammar> grammar) {
  std::string key = key_of(c);
  std::lock_guard lock(mutex_);
  if (auto it = index_.find(key); it != index_.end()) {  // compiled twice concurrently
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  lru_.emplace_front(key, std::move(grammar));
  index_.emplace(std::move(key), lru_.begin());
  while (lru_.size() > max_entries_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

GrammarCacheStats GrammarCache::stats() const {
  std::lock_guard lock(mutex_);
  return {hits_, misses_, lru_.size()};
}

}  // namespace vpod::grammar
