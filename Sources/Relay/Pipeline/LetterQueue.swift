import DequeModule
import HeapModule

/// The dead letters the pipeline has ordered and not yet seen end: those ready for a letter
/// writer to take, in the order they were ordered; those whose write failed, each due again at
/// the end of its backoff; and how many are outstanding in all (the workers are released only
/// once none is). It knows nothing of partitions: whoever owns them decides, when a letter
/// comes due, whether it is still to be written.
struct LetterQueue {
    private struct DueLetter: Comparable {
        let due: ContinuousClock.Instant
        let sequence: UInt64
        let order: DeadLetterOrder

        static func < (lhs: DueLetter, rhs: DueLetter) -> Bool { (lhs.due, lhs.sequence) < (rhs.due, rhs.sequence) }
        static func == (lhs: DueLetter, rhs: DueLetter) -> Bool { lhs.sequence == rhs.sequence }
    }

    private var due = Heap<DueLetter>()
    /// Letters waiting for a writer.
    private var ready = Deque<DeadLetterOrder>()
    private var failures: UInt64 = 0
    /// Letters ordered and neither written nor dropped.
    private(set) var outstanding = 0
    /// Shutdown ran out of time: letters still outstanding stay unwritten and hold nobody.
    private(set) var givenUp = false

    /// No letter holds the workers any more: none is outstanding, or they were given up.
    var isSettled: Bool { outstanding == 0 || givenUp }

    /// When the next failed letter is due again.
    var nextDue: ContinuousClock.Instant? { due.min?.due }

    /// Letters waiting for a writer to take them.
    var readyCount: Int { ready.count }

    /// A letter was ordered: it waits for a writer.
    mutating func order(_ letter: DeadLetterOrder) {
        outstanding += 1
        ready.append(letter)
    }

    /// A letter that came due again (still outstanding) waits for a writer.
    mutating func orderAgain(_ letter: DeadLetterOrder) {
        ready.append(letter)
    }

    /// The next letter for a writer, oldest first.
    mutating func takeReady() -> DeadLetterOrder? {
        ready.popFirst()
    }

    /// A letter was written or dropped; true when it was the last one outstanding.
    mutating func ended() -> Bool {
        outstanding -= 1
        return outstanding == 0
    }

    /// A letter's write failed: due again after `backoff`, with its failure counted. Nil when
    /// the letters were given up (the caller drops it instead); else the new due time.
    mutating func failed(_ order: DeadLetterOrder, backoff: Duration, now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        guard !givenUp else { return nil }
        var again = order
        again.failedWrites += 1
        failures += 1
        let at = now + backoff
        due.insert(DueLetter(due: at, sequence: failures, order: again))
        return at
    }

    /// The failed letters whose backoff ended by `now`, in the order they came due.
    mutating func takeDue(now: ContinuousClock.Instant) -> [DeadLetterOrder] {
        var orders: [DeadLetterOrder] = []
        while let first = due.min, first.due <= now {
            due.removeMin()
            orders.append(first.order)
        }
        return orders
    }

    /// Shutdown ran out of time: no letter is written any more, and none holds the workers.
    mutating func giveUp() {
        givenUp = true
        due = Heap()
        ready = []
    }
}
