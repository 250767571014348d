import FleetAuth
import FleetModel
import Kafka
import Metrics
import Synchronization

/// What the relay did: lock-free running totals for status lines and tests, and
/// the same events as swift-metrics metrics (names fixed, documented in the README).
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
    /// Records sent as a request's `lastLocation` and accepted.
    public let accepted = Atomic<Int>(0)
    public let superseded = Atomic<Int>(0)
    public let stale = Atomic<Int>(0)
    public let skipped = Atomic<Int>(0)
    public let deadLettered = Atomic<Int>(0)
    /// Records Fleet Engine refused, or that failed past the retry deadline, with no
    /// dead-letter topic to take them (a replay's `--no-dead-letter`): left unfinished.
    public let failed = Atomic<Int>(0)
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

    private let finishedCounters: [Outcome: Counter]
    /// Per-request counters by label values, made once: a lookup in the metrics registry per
    /// request costs a lock, label arrays and a hash of them.
    private struct RequestKey: Hashable {
        let kind: VehicleKind
        let status: Int
    }

    private let requestCounters = CounterCache<RequestKey> {
        Counter(label: "fleet_relay_fleet_engine_requests_total", dimensions: [("kind", $0.kind.rawValue), ("status", String($0.status))])
    }
    private let retryCounters = CounterCache<String> { Counter(label: "fleet_relay_retries_total", dimensions: [("cause", $0)]) }
    private let consumedCounters = CounterCache<TopicPartition> {
        Counter(label: "fleet_relay_records_consumed_total", dimensions: [("topic", $0.topic), ("partition", String($0.partition))])
    }
    private let deadLetterCounters = CounterCache<String> { Counter(label: "fleet_relay_dead_letters_total", dimensions: [("reason", $0)]) }
    private let consumeErrorCounters = CounterCache<String> { Counter(label: "fleet_relay_consume_errors_total", dimensions: [("error", $0)]) }
    private let inFlightGauge = Gauge(label: "fleet_relay_in_flight_requests")
    private let requestSeconds = Timer(label: "fleet_relay_fleet_engine_request_seconds")
    private let endToEndSeconds = Timer(label: "fleet_relay_end_to_end_seconds")
    private let coalescedPerRequest = Recorder(label: "fleet_relay_coalesced_per_request")
    /// Vehicles waiting out a backoff after a Fleet Engine failure (from the pipeline, as it changes).
    let vehiclesRetrying = Gauge(label: "fleet_relay_vehicles_retrying")
    private let failedCounter = Counter(label: "fleet_relay_records_failed_total")
    /// Failed Schema Registry lookups (each retried: records wait, nothing is dead-lettered).
    let schemaRegistryErrors = Counter(label: "fleet_relay_schema_registry_errors_total")

    public init() {
        vehiclesRetrying.record(0)
        finishedCounters = Dictionary(uniqueKeysWithValues: Outcome.allCases.map {
            ($0, Counter(label: "fleet_relay_records_finished_total", dimensions: [("outcome", $0.rawValue)]))
        })
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
        switch outcome {
        case .accepted: accepted.add(count, ordering: .relaxed)
        case .deadLettered: deadLettered.add(count, ordering: .relaxed)
        case .superseded: superseded.add(count, ordering: .relaxed)
        case .stale: stale.add(count, ordering: .relaxed)
        case .skipped: skipped.add(count, ordering: .relaxed)
        }
        finishedCounters[outcome]?.increment(by: count)
    }

    func recordFailed() {
        failed.add(1, ordering: .relaxed)
        failedCounter.increment()
    }

    func recordDeadLetter(reason: String) {
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

    func recordRetry(cause: String) {
        retries.add(1, ordering: .relaxed)
        if cause == "timeout" { timeouts.add(1, ordering: .relaxed) }
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

    public var snapshot: Snapshot {
        Snapshot(
            consumed: consumed.load(ordering: .relaxed), accepted: accepted.load(ordering: .relaxed),
            superseded: superseded.load(ordering: .relaxed),
            stale: stale.load(ordering: .relaxed),
            deadLettered: deadLettered.load(ordering: .relaxed), skipped: skipped.load(ordering: .relaxed),
            requestsAccepted: requestsAccepted.load(ordering: .relaxed),
            requestsFailed: requestsFailed.load(ordering: .relaxed), retries: retries.load(ordering: .relaxed),
            timeouts: timeouts.load(ordering: .relaxed), commits: commits.load(ordering: .relaxed),
            consumeErrors: consumeErrors.load(ordering: .relaxed))
    }
}

extension Duration {
    var nanoseconds: Int64 {
        components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000
    }

    var inSeconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
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
