// A small map that keeps at most `capacity` entries, dropping the least recently used one when a new key
// arrives. For per-shape caches whose keys include a token count: an engine sends a new count nearly every
// call, so an unbounded map grows for the life of the process (one cuBLASLt heuristic per count in
// GemmRunner). Not thread-safe: the owner locks around it.
#pragma once
#include <cstddef>
#include <list>
#include <map>
#include <optional>
#include <utility>

namespace mlajit {

template <typename Key, typename Value>
class LruMap {
public:
    explicit LruMap(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

    // The value for `key` (now the most recently used), or nullopt.
    std::optional<Value> find(const Key& key) {
        auto it = index_.find(key);
        if (it == index_.end()) return std::nullopt;
        order_.splice(order_.begin(), order_, it->second);  // move to the front, iterators stay valid
        return it->second->second;
    }

    // Inserts or replaces; evicts the least recently used entry when over capacity.
    void put(const Key& key, Value value) {
        auto it = index_.find(key);
        if (it != index_.end()) {
            it->second->second = std::move(value);
            order_.splice(order_.begin(), order_, it->second);
            return;
        }
        order_.emplace_front(key, std::move(value));
        index_.emplace(key, order_.begin());
        if (order_.size() > capacity_) {
            index_.erase(order_.back().first);
            order_.pop_back();
            ++evictions_;
        }
    }

    size_t size() const { return order_.size(); }
    size_t capacity() const { return capacity_; }
    size_t evictions() const { return evictions_; }

private:
    using Entry = std::pair<Key, Value>;
    size_t capacity_;
    size_t evictions_ = 0;
    std::list<Entry> order_;  // most recently used first
    std::map<Key, typename std::list<Entry>::iterator> index_;
};

}  // namespace mlajit
