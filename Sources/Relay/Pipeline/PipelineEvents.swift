import FleetEngine
import InputFormats
import Kafka

// What goes into the pipeline's state machine and what comes out of it.

/// A consumed record as the pipeline takes it: a decoded fix, or a record to dead-letter.
public enum ConsumedRecord: Sendable {
    case fix(PendingFix)
    case bad(RecordSource, reason: RejectionReason, detail: String)
    /// Left out by the input mapping: finished as it is taken in.
    case skipped(RecordSource)

    var source: RecordSource {
        switch self {
        case .fix(let fix): fix.source
        case .bad(let source, _, _): source
        case .skipped(let source): source
        }
    }
}

/// A record to write to the dead-letter topic; `PipelineState.deadLetterWritten` finishes it,
/// `deadLetterFailed` orders it again after a backoff.
public struct DeadLetterOrder: Sendable {
    public let source: RecordSource
    /// The record's key as it was.
    public let key: [UInt8]?
    public let reason: DeadLetterReason
    public let detail: String
    /// Writes of this letter that failed so far: its next backoff.
    public internal(set) var failedWrites = 0

    /// - Parameter vehicleId: the vehicle of the record's fix; nil for a record that became none.
    public init(source: RecordSource, vehicleId: String? = nil, reason: DeadLetterReason, detail: String) {
        self.source = source
        self.key = source.key(vehicleId: vehicleId)
        self.reason = reason
        self.detail = detail
    }
}

/// Why records were dead-lettered. The raw value is the `fleet-relay-error` header of the
/// letter and the `reason` label of `fleet_relay_dead_letters_total`.
public enum DeadLetterReason: Hashable, Sendable, RawRepresentable, CustomStringConvertible {
    /// The input format refused the record.
    case badRecord(RejectionReason)
    /// Fleet Engine refused the update for good.
    case refused(FleetEngineRefusal)
    /// The update kept failing past `--retry-deadline`.
    case retryDeadlineExceeded

    public static var allCases: [DeadLetterReason] {
        RejectionReason.allCases.map(badRecord) + FleetEngineRefusal.allCases.map(refused) + [retryDeadlineExceeded]
    }

    public init?(rawValue: String) {
        guard let reason = Self.allCases.first(where: { $0.rawValue == rawValue }) else { return nil }
        self = reason
    }

    public var rawValue: String {
        switch self {
        case .badRecord(let rejection): rejection.rawValue
        case .refused(let refusal): refusal.rawValue
        case .retryDeadlineExceeded: "retry_deadline_exceeded"
        }
    }

    public var description: String { rawValue }
}

/// Offsets to commit, ordered by the state machine at its commit deadline; the broker's answer
/// goes back through `PipelineState.commitAnswered`. Each offset carries the assignment
/// generation of its partition when ordered: an answer applies only to a partition still
/// assigned under that generation.
public struct CommitOrder: Sendable, Equatable {
    public let id: UInt64
    public let offsets: [TopicPartitionOffset]
    let generations: [TopicPartition: UInt64]
}

/// A change of the partitions whose fetching is to be paused.
public struct PauseChange: Sendable, Equatable {
    /// Every partition to keep paused now.
    public var wish: Set<TopicPartition>
    /// Grows with every wish the state hands out: wishes leave the lock and may reach the record
    /// source out of order, so the source applies one only when it is newer than the last it applied.
    public var sequence: UInt64
    public var pausing: [TopicPartition]
    public var resuming: [TopicPartition]
    /// Unfinished records per partition at which fetching pauses.
    public var share: Int
    /// Every partition is paused because records wait to be taken in (the Schema Registry
    /// cannot be asked): none is over its share.
    public var recordsWait: Bool
}

/// Fleet Engine failing for most of the vehicles the relay holds (an outage), rather than
/// refusing a few of them: it begins when more than half of them are waiting to retry after a
/// Fleet Engine failure, and ends once at most a third are.
public enum FleetEngineOutageChange: Sendable, Equatable {
    case began(failingVehicles: Int, vehicles: Int, failure: TransientFailure)
    case ended(lasted: Duration)
}

/// What a waiting request worker or letter writer is resumed with.
public enum PipelineWork: Sendable {
    case request(CoalescedRequest)
    case letter(DeadLetterOrder)
}

/// What any event can release, for the owner of the state to carry out outside the lock.
/// What only one event can cause comes beside it in that event's own result.
public struct PipelineActions<Waiter> {
    /// Workers to resume with their next request (nil: no more work, stop).
    public var resume: [(waiter: Waiter, request: CoalescedRequest?)] = []
    /// Resumes a worker with its request, the first of at most `count` this event resumes so:
    /// room for them all is made at once. Grown one append at a time, the requests a chunk of
    /// records made ready took a reallocation at each doubling, the later ones kilobytes each.
    mutating func resume(_ waiter: Waiter, with request: CoalescedRequest, ofAtMost count: Int) {
        if resume.isEmpty { resume.reserveCapacity(count) }
        resume.append((waiter, request))
    }

    /// Letter writers to resume with their next letter (nil: no more letters, stop).
    public var resumeLetters: [(writer: Waiter, letter: DeadLetterOrder?)] = []
    /// Letters ordered without a dead-letter topic to take them: their records stay unfinished.
    public var lettersNotWritten: [DeadLetterOrder] = []
    public var pause: PauseChange?
    /// A deadline earlier than the one the timer sleeps until was set.
    public var wakeTimer = false
    /// Work under way on some partition finished: a revoke waiting for it may go on.
    public var workFinished = false
    /// Fixes finished unsent because Fleet Engine holds one at least as new.
    public var staleFixes = 0
    /// Vehicles waiting to retry after a Fleet Engine failure, when the count changed.
    public var vehiclesFailing: Int?
    /// A burst of unfinished records (a cold start, a backlog) has drained: what it allocated
    /// is free, and the allocator may hand it back to the system.
    public var burstDrained = false
}

/// What taking records in (`PipelineState.consume`) counted.
public struct RecordsTakenIn: Sendable, Equatable {
    /// Records taken in, per partition.
    public var perPartition: [TopicPartition: Int] = [:]
    /// Records finished as taken in: the input mapping skipped them.
    public var skipped = 0
}

/// Records counted per partition as they come: a chunk's come in runs of one partition, and
/// the count is added up per run, not hashed into the totals per record.
struct CountsByPartition {
    private var counted: [TopicPartition: Int] = [:]
    private var run: (partition: TopicPartition, count: Int)?

    mutating func count(_ partition: TopicPartition) {
        if run?.partition == partition {
            run!.count += 1
        } else {
            endRun()
            run = (partition, 1)
        }
    }

    consuming func totals() -> [TopicPartition: Int] {
        endRun()
        return counted
    }

    private mutating func endRun() {
        if let run { counted[run.partition, default: 0] += run.count }
        run = nil
    }
}

/// What the end of an attempt (`PipelineState.complete`) changed besides the common actions.
public struct AttemptAftermath: Sendable, Equatable {
    /// Records of a request Fleet Engine refused for good, or whose retries ran out.
    public var refusedRecords = 0
    /// Why a vehicle's retries ran out (its records ordered dead-lettered), when they did.
    public var retriesExhausted: String?
    /// Fleet Engine's failures began or stopped holding back most vehicles.
    public var outage: FleetEngineOutageChange?
    /// The adaptive concurrency limit, when it changed.
    public var concurrencyLimit: Int?
    /// Fleet Engine's latency or failures began or stopped holding the concurrency limit down.
    public var overload: ConcurrencyLimit.Change?
    /// Pacing at a rate learnt from Fleet Engine's 429s began or ended.
    public var pacing: LearnedRate.Change?
    /// The learnt rate in requests per second, when it moved (0: not pacing).
    public var learnedRate: Double?
}

/// What the deadline timer's turn (`PipelineState.deadlineReached`) ordered of the commits.
public struct CommitDeadline: Sendable, Equatable {
    /// Offsets to commit now (the commit interval came round and something finished).
    public var order: CommitOrder?
    /// Why the commit failed: refused as it was handed to Kafka, or the last one not answered in
    /// time. It is ordered again.
    public var failure: String?
}
