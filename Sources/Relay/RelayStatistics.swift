import FleetAuth
import FleetEngine
import FleetModel
import Kafka
import Metrics
import Synchronization

/// What the relay did: swift-metrics metrics (names fixed, documented in the README), each made
/// once, with lock-free running totals for summaries and tests. A count that is also a metric
/// is a `Tally`, counted in one call; the totals across a labelled metric's series sit beside it.
///
/// Threading: every method may be called from any task.
public final class RelayStatistics: Sendable {
    /// How a record ended.
    public enum Outcome: String, Sendable, CaseIterable {
        case accepted
        case deadLettered = "dead_lettered"
        /// Sent in an accepted request's `pastLocations`.
        case superseded
        /// Not newer than what Fleet Engine already holds; never sent.
        case stale
        /// Left out by a skip rule of the input mapping (a delete, a message without a fix).
        case skipped
    }

    public let consumed = Atomic<Int>(0)
    /// Records by how they ended (`fleet_relay_records_finished_total{outcome}`).
    private let finished = Dictionary(uniqueKeysWithValues: Outcome.allCases.map {
        ($0, Tally(Counter(label: "fleet_relay_records_finished_total", dimensions: [("outcome", $0.rawValue)])))
    })
    /// Records Fleet Engine refused, or that failed past the retry deadline, with no
    /// dead-letter topic to take them (a replay's `--no-dead-letter`): left unfinished.
    public let failed = Tally(Counter(label: "fleet_relay_records_failed_total"))
    /// Records of requests Fleet Engine refused for good or that failed past the retry
    /// deadline, dead-lettered or not.
    public let refused = Atomic<Int>(0)
    public let requestsAccepted = Atomic<Int>(0)
    public let requestsFailed = Atomic<Int>(0)
    public let retries = Atomic<Int>(0)
    /// Requests that got no answer within the request timeout.
    public let timeouts = Atomic<Int>(0)
    public let commits = Atomic<Int>(0)
    public let consumeErrors = Atomic<Int>(0)
    public let inFlightRequests = Atomic<Int>(0)

    /// Per-request counters by label values, made once: a lookup in the metrics registry per
    /// request costs a lock, label arrays and a hash of them.
    private struct RequestKey: Hashable {
        let kind: VehicleKind
        let status: Int
    }

    private let requestCounters = CounterCache<RequestKey> {
        Counter(label: "fleet_relay_fleet_engine_requests_total", dimensions: [("kind", $0.kind.rawValue), ("status", String($0.status))])
    }
    private let retryCounters = CounterCache<FailureCause> { Counter(label: "fleet_relay_retries_total", dimensions: [("cause", $0.rawValue)]) }
    private let consumedCounters = CounterCache<TopicPartition> {
        Counter(label: "fleet_relay_records_consumed_total", dimensions: [("topic", $0.topic), ("partition", String($0.partition))])
    }
    private let deadLetterCounters = CounterCache<DeadLetterReason> {
        Counter(label: "fleet_relay_dead_letters_total", dimensions: [("reason", $0.rawValue)])
    }
    private let consumeErrorCounters = CounterCache<String> { Counter(label: "fleet_relay_consume_errors_total", dimensions: [("error", $0)]) }
    private let inFlightGauge = Gauge(label: "fleet_relay_in_flight_requests")
    private let requestSeconds = Timer(label: "fleet_relay_fleet_engine_request_seconds")
    private let endToEndSeconds = Timer(label: "fleet_relay_end_to_end_seconds")
    private let coalescedPerRequest = Recorder(label: "fleet_relay_coalesced_per_request")
    /// Vehicles waiting out a backoff after a Fleet Engine failure (from the pipeline, as it changes).
    let vehiclesRetrying = Gauge(label: "fleet_relay_vehicles_retrying")
    /// Failed Schema Registry lookups (each retried: records wait, nothing is dead-lettered).
    let schemaRegistryErrors = Counter(label: "fleet_relay_schema_registry_errors_total")

    public init() {
        vehiclesRetrying.record(0)
        // Every reason a record can be dead-lettered for, so that each series exists from the start.
        for reason in DeadLetterReason.allCases { deadLetterCounters.counter(for: reason).increment(by: 0) }
    }

    func recordConsumeError(_ error: String) {
        consumeErrors.add(1, ordering: .relaxed)
        consumeErrorCounters.counter(for: error).increment()
    }

    func recordConsumed(_ counts: [TopicPartition: Int]) {
        for (partition, count) in counts {
            consumed.add(count, ordering: .relaxed)
            consumedCounters.counter(for: partition).increment(by: count)
        }
    }

    func recordFinished(_ outcome: Outcome, count: Int = 1) {
        guard count > 0 else { return }
        finished[outcome]?.add(count)
    }

    func recordFailed() {
        failed.add(1)
    }

    func recordDeadLetter(reason: DeadLetterReason) {
        recordFinished(.deadLettered)
        deadLetterCounters.counter(for: reason).increment()
    }

    /// One Fleet Engine request (status 0: no answer) and how long it took.
    func recordRequest(kind: VehicleKind, status: Int, duration: Duration) {
        if (200..<300).contains(status) {
            requestsAccepted.add(1, ordering: .relaxed)
        } else {
            requestsFailed.add(1, ordering: .relaxed)
        }
        requestCounters.counter(for: RequestKey(kind: kind, status: status)).increment()
        requestSeconds.recordNanoseconds(duration.nanoseconds)
    }

    func recordRetry(cause: FailureCause) {
        retries.add(1, ordering: .relaxed)
        if cause == .transport(.timeout) { timeouts.add(1, ordering: .relaxed) }
        retryCounters.counter(for: cause).increment()
    }

    func recordAccepted(recordedAtMilliseconds: Int64, coalesced: Int) {
        let latency = WallClock.nowMilliseconds() - recordedAtMilliseconds
        endToEndSeconds.recordNanoseconds(max(0, latency) * 1_000_000)
        coalescedPerRequest.record(coalesced)
    }


    func requestStarted() { inFlightGauge.record(inFlightRequests.add(1, ordering: .relaxed).newValue) }

    func requestEnded() { inFlightGauge.record(inFlightRequests.subtract(1, ordering: .relaxed).newValue) }

    public struct Snapshot: Sendable, Equatable {
        public var consumed = 0
        public var accepted = 0
        public var superseded = 0
        public var stale = 0
        public var deadLettered = 0
        public var skipped = 0
        public var requestsAccepted = 0
        public var requestsFailed = 0
        public var retries = 0
        public var timeouts = 0
        public var commits = 0
        public var consumeErrors = 0

        /// Records that reached a final outcome.
        public var finished: Int { accepted + superseded + stale + deadLettered + skipped }
    }

    private func total(_ outcome: Outcome) -> Int { finished[outcome]?.total ?? 0 }

    public var snapshot: Snapshot {
        Snapshot(
            consumed: consumed.load(ordering: .relaxed), accepted: total(.accepted), superseded: total(.superseded),
            stale: total(.stale), deadLettered: total(.deadLettered), skipped: total(.skipped),
            requestsAccepted: requestsAccepted.load(ordering: .relaxed),
            requestsFailed: requestsFailed.load(ordering: .relaxed), retries: retries.load(ordering: .relaxed),
            timeouts: timeouts.load(ordering: .relaxed), commits: commits.load(ordering: .relaxed),
            consumeErrors: consumeErrors.load(ordering: .relaxed))
    }
}

extension Duration {
    /// Whole nanoseconds, from one read of the components (each read divides 128 bits).
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }

    var inSeconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// One count, as a metric and as a running total: counted in one call, so the two never differ.
public final class Tally: Sendable {
    private let counter: Counter
    private let value = Atomic<Int>(0)

    init(_ counter: Counter) {
        self.counter = counter
        counter.increment(by: 0)  // the series exists from the start
    }

    func add(_ count: Int = 1) {
        value.add(count, ordering: .relaxed)
        counter.increment(by: count)
    }

    public var total: Int { value.load(ordering: .relaxed) }
}

/// Counters of one metric by label values, each made on first use and kept.
final class CounterCache<Key: Hashable & Sendable>: Sendable {
    private let counters = Mutex<[Key: Counter]>([:])
    private let make: @Sendable (Key) -> Counter

    init(_ make: @escaping @Sendable (Key) -> Counter) {
        self.make = make
    }

    func counter(for key: Key) -> Counter {
        counters.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = make(key)
            counters[key] = counter
            return counter
        }
    }
}
