/// Items with due times, taken soonest first (a binary min-heap): deferred
/// vehicles wait out different delays, so arrival order is not due order.
struct DueHeap<Item> {
    private var entries: [(due: ContinuousClock.Instant, item: Item)] = []

    var isEmpty: Bool { entries.isEmpty }

    mutating func insert(_ item: Item, due: ContinuousClock.Instant) {
        entries.append((due, item))
        var child = entries.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard entries[child].due < entries[parent].due else { break }
            entries.swapAt(child, parent)
            child = parent
        }
    }

    /// The soonest item if it is due at `now`.
    mutating func popDue(now: ContinuousClock.Instant) -> Item? {
        guard let first = entries.first, first.due <= now else { return nil }
        entries.swapAt(0, entries.count - 1)
        entries.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var smallest = parent
            if left < entries.count, entries[left].due < entries[smallest].due { smallest = left }
            if right < entries.count, entries[right].due < entries[smallest].due { smallest = right }
            if smallest == parent { break }
            entries.swapAt(parent, smallest)
            parent = smallest
        }
        return first.item
    }
}
