import DequeModule
import Kafka

/// One assigned partition as the pipeline sees it: which of its offsets are
/// unfinished, and so which offset may be committed. The commit offset is always
/// the lowest unfinished offset (or one past the last registered when all are
/// finished), so a failed or slow record is never skipped because a later one
/// succeeded.
///
/// Unfinished offsets are kept, and finished ones only until they are compacted away (never
/// more of them than unfinished ones, plus 64): a record stuck in retries holds its partition's
/// commit, while the records behind it that finished cost next to nothing.
struct PartitionProgress {
    /// 17 bytes of fixed layout: a `ContinuousClock.Instant` (resilient) here made every move
    /// of an entry a call through value witnesses.
    struct Entry {
        let offset: Int64
        let registeredAt: Moment
        var finished = false
    }

    /// The consumer's assignment generation: records of an earlier one are not ours.
    let generation: UInt64
    /// Set when a revoke began: no new work starts, work under way may still finish.
    var revoking = false {
        didSet { if revoking { revocation.set() } }
    }
    /// The same, for requests under way to read without the pipeline's lock.
    let revocation = Revocation()
    /// Fetching is to be paused: the partition holds its share of pending records.
    var paused = false
    /// Requests and dead-letter writes under way that settle records of this partition.
    var workUnderWay = 0
    /// Registered offsets in increasing order: every unfinished one, and finished ones behind the
    /// first unfinished until they are compacted away. The first entry is always unfinished.
    /// Records of a backlog finish out of order, a vehicle's at a time: removing each from the
    /// middle would move half the entries, at every finish.
    private var entries = Deque<Entry>()
    /// Registered offsets not yet finished.
    private(set) var unfinishedCount = 0
    /// Entries kept, finished ones included: what the books cost.
    var storedEntries: Int { entries.count }
    private var firstRegistered: Int64?
    private(set) var lastRegistered: Int64?
    var lastCommitted: Int64?

    init(generation: UInt64) {
        self.generation = generation
    }

    /// Nil while nothing finished since the partition was assigned: its position is still the group's.
    var committable: Int64? {
        guard let first = entries.first else { return lastRegistered.map { $0 + 1 } }
        return first.offset == firstRegistered ? nil : first.offset
    }

    /// The commit offset, when it advanced since the last commit.
    var offsetToCommit: Int64? {
        guard let offset = committable, offset != lastCommitted else { return nil }
        return offset
    }

    /// Consumed records above the last committed offset, finished or not.
    var uncommitted: Int64 {
        guard let last = lastRegistered, let first = firstRegistered else { return 0 }
        return max(0, last + 1 - (lastCommitted ?? first))
    }

    /// The broker confirmed a commit of `offset`; an older answer arriving late changes nothing.
    mutating func recordCommitted(_ offset: Int64) {
        lastCommitted = max(lastCommitted ?? .min, offset)
    }

    /// Whether a record of `generation` is the partition's to work on: of its current
    /// assignment, and not being revoked.
    func owns(generation: UInt64) -> Bool {
        generation == self.generation && !revoking
    }

    /// Registers the offset when the partition owns the record: false otherwise, or for an
    /// offset already registered (a record fetched twice), and the record is skipped. Asked
    /// through the books in place: reading the fields through the dictionary's getter copied
    /// the books, twice for every record.
    mutating func register(_ offset: Int64, ofGeneration generation: UInt64, at now: Moment) -> Bool {
        owns(generation: generation) && register(offset, at: now)
    }

    /// False for an offset already registered (a record fetched twice): it is skipped.
    mutating func register(_ offset: Int64, at now: Moment) -> Bool {
        if let last = lastRegistered, offset <= last { return false }
        if firstRegistered == nil { firstRegistered = offset }
        lastRegistered = offset
        entries.append(Entry(offset: offset, registeredAt: now))
        unfinishedCount += 1
        return true
    }

    /// False when the offset was not unfinished (finished before). The entry is marked, then
    /// finished entries leave the front; once they outnumber the unfinished ones they all go in
    /// one pass, so a finish costs a constant on average and the entries stay under twice the
    /// unfinished records.
    @discardableResult
    mutating func finish(_ offset: Int64) -> Bool {
        guard let index = index(of: offset), !entries[index].finished else { return false }
        entries[index].finished = true
        unfinishedCount -= 1
        dropFinished()
        return true
    }

    /// Where the offset's entry is. Offsets increase, and a backlog's are nearly consecutive, so
    /// a probe where the offset would sit if the offsets between the bounds were evenly spread
    /// mostly finds it at once: a bisection's dozen probes missed the cache among thousands of
    /// entries. Every other round bisects, so uneven offsets (a compacted topic's gaps) cost
    /// at most twice a bisection's rounds.
    private func index(of offset: Int64) -> Int? {
        var (low, high) = (0, entries.count - 1)
        var interpolates = true
        while low <= high {
            let (lowOffset, highOffset) = (entries[low].offset, entries[high].offset)
            guard lowOffset <= offset, offset <= highOffset else { return nil }
            let middle = interpolates && highOffset > lowOffset
                ? low + Int(Double(offset - lowOffset) / Double(highOffset - lowOffset) * Double(high - low))
                : (low + high) / 2
            let found = entries[middle].offset
            if found == offset { return middle }
            if found < offset { low = middle + 1 } else { high = middle - 1 }
            interpolates.toggle()
        }
        return nil
    }

    private mutating func dropFinished() {
        while entries.first?.finished == true { entries.removeFirst() }
        if entries.count - unfinishedCount > max(unfinishedCount, 64) { entries.removeAll { $0.finished } }
    }

    /// How long the oldest unfinished record has waited (zero when none waits).
    func oldestUnfinishedAge(now: ContinuousClock.Instant) -> Duration {
        entries.first.map { now - $0.registeredAt.instant } ?? .zero
    }
}
