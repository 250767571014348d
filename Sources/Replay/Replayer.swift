import FleetAuth
import FleetEngine
import Foundation
import InputFormats
import Kafka
import Logging
import Metrics
import Relay
import Synchronization

/// What to replay and how.
public struct ReplayConfiguration: Sendable {
    public var topic: String
    /// nil: every partition of the topic.
    public var partitions: [Int32]?
    public var fromMilliseconds: Int64
    /// Exclusive end; nil: the high watermarks at start (`--to-end`).
    public var toMilliseconds: Int64?
    /// Update requests per second; nil: unlimited.
    public var rate: Double?
    public var maximumInFlight: Int
    public var dryRun: Bool
    public var checkpointPath: String?
    /// Send without comparing with Fleet Engine's live location.
    public var force: Bool
    /// nil: bad records are only counted.
    public var deadLetterTopic: String?
    public var defaultKind: VehicleKind
    /// nil: the native event.
    public var inputMapping: InputMapping?
    public var schemaSource: (any SchemaSource)?
    public var pastLimit: Int
    public var retryPolicy: RetryPolicy
    /// How long one vehicle's update may keep failing transiently before it counts as failed.
    public var retryDeadline: Duration
    /// Discard a checkpoint that exists and start over.
    public var restart = false
    /// The flags as given (`-2h` stays relative); by default the absolute times and partitions above.
    public var requestedAs: ReplayRequest?

    /// What a checkpoint must have been made for to be resumed by this replay.
    public var request: ReplayRequest {
        if let requestedAs { return requestedAs }
        let end: String? = toMilliseconds.map { RFC3339.format(milliseconds: $0) }
        return ReplayRequest(from: RFC3339.format(milliseconds: fromMilliseconds), to: end, partitions: partitions)
    }

    public init(topic: String, partitions: [Int32]? = nil, fromMilliseconds: Int64, toMilliseconds: Int64?,
                rate: Double? = nil, maximumInFlight: Int = 16, dryRun: Bool = false, checkpointPath: String? = nil,
                force: Bool = false, deadLetterTopic: String? = nil, defaultKind: VehicleKind = .vehicle,
                inputMapping: InputMapping? = nil,
                pastLimit: Int = 100, retryPolicy: RetryPolicy = RetryPolicy(), retryDeadline: Duration = .seconds(120)) {
        self.topic = topic
        self.partitions = partitions
        self.fromMilliseconds = fromMilliseconds
        self.toMilliseconds = toMilliseconds
        self.rate = rate
        self.maximumInFlight = maximumInFlight
        self.dryRun = dryRun
        self.checkpointPath = checkpointPath
        self.force = force
        self.deadLetterTopic = deadLetterTopic
        self.defaultKind = defaultKind
        self.inputMapping = inputMapping
        self.pastLimit = pastLimit
        self.retryPolicy = retryPolicy
        self.retryDeadline = retryDeadline
    }
}

/// Fleet Engine access for a replay that sends (none for a dry run).
public struct ReplaySender: Sendable {
    public let client: FleetEngineClient
    public let tokens: TokenCache

    public init(client: FleetEngineClient, tokens: TokenCache) {
        self.client = client
        self.tokens = tokens
    }
}

public struct ReplayError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Replays a time window of the location topic into Fleet Engine, in two phases:
/// reading (explicit partition assignment, no group, no commits; each vehicle's
/// fixes coalesced across the whole window) and sending (one request per vehicle,
/// rate-limited, skipping vehicles whose live location is already newer).
/// Cancelling the task interrupts it: in-flight requests finish or are abandoned,
/// the checkpoint is saved, and the summary says what is left.
public final class Replayer: Sendable {
    public let configuration: ReplayConfiguration
    private let kafka: KafkaConfiguration
    private let sender: ReplaySender?
    private let progress: ReplayProgress
    private let statistics = RelayStatistics()
    public let health = RelayHealth()
    private let logger: Logger

    public init(configuration: ReplayConfiguration, kafka: KafkaConfiguration, sender: ReplaySender?,
                progress: ReplayProgress, logger: Logger) {
        self.configuration = configuration
        self.kafka = kafka
        self.sender = sender
        self.progress = progress
        self.logger = logger
    }

    /// The plan a dry run prints, and what the reading phase produced.
    public struct Plan: Sendable {
        public var windows: [PartitionWindow]
        public var updates: [VehicleLocationUpdate]
        public var fixesPerVehicle: [Int]
        public var oldestMilliseconds: Int64?
        public var newestMilliseconds: Int64?
    }

    public func run() async throws -> (summary: ReplaySummary, plan: Plan) {
        let started = ContinuousClock.now
        var summary = ReplaySummary()
        summary.dryRun = configuration.dryRun
        let reader = try KafkaPartitionReader(configuration: kafka, logger: logger)
        var checkpoint = try await startingCheckpoint(reader)
        let windows = checkpoint.partitions
        summary.recordsInWindow = Int(windows.reduce(0) { $0 + $1.records })
        Gauge(label: "fleet_relay_replay_records_in_window").record(summary.recordsInWindow)
        for window in windows where window.method == .search {
            logger.info("Partition \(window.partition): the broker's offsets-for-times answer contradicted the partition's records; found offsets \(window.start)..<\(window.end) by binary search")
        }

        let read = try await readWindow(checkpoint, reader: reader, summary: &summary)
        let settled = Set(checkpoint.settledVehicles)
        let allUpdates = read.updates()
        let updates = allUpdates.filter { !settled.contains(Self.key($0.vehicle)) }
        summary.vehicles = allUpdates.count
        summary.alreadySettled = allUpdates.count - updates.count
        let plan = Plan(windows: windows, updates: updates, fixesPerVehicle: read.fixesPerVehicle,
                        oldestMilliseconds: read.oldestMilliseconds, newestMilliseconds: read.newestMilliseconds)
        Gauge(label: "fleet_relay_replay_requests_planned").record(updates.count)
        guard !configuration.dryRun, !Task.isCancelled, let sender else {
            summary.interrupted = Task.isCancelled
            summary.wallSeconds = (ContinuousClock.now - started) / .seconds(1)
            return (summary, plan)
        }
        let outcomes = await send(updates, sender: sender, checkpoint: &checkpoint)
        summary.accepted = outcomes.accepted
        summary.skippedNewerLive = outcomes.skippedNewerLive
        summary.failed = outcomes.failures.values.reduce(0, +)
        summary.failuresByReason = outcomes.failures
        let requests = statistics.snapshot
        summary.requestsSent = requests.requestsAccepted + requests.requestsFailed
        summary.interrupted = Task.isCancelled
        checkpoint.complete = !summary.interrupted && summary.failed == 0 && summary.deletedBeforeRead.isEmpty
        try saveCheckpoint(checkpoint)
        summary.wallSeconds = (ContinuousClock.now - started) / .seconds(1)
        return (summary, plan)
    }

    // MARK: Window

    private func startingCheckpoint(_ reader: KafkaPartitionReader) async throws -> ReplayCheckpoint {
        if let path = configuration.checkpointPath, let saved = try ReplayCheckpoint.load(from: path) {
            if configuration.restart {
                logger.warning("--restart: discarding checkpoint \(path) (\(saved.settledVehicles.count) vehicles settled by it) and starting over")
            } else {
                try saved.check(topic: configuration.topic, request: configuration.request, path: path)
                let end: String = saved.toMilliseconds.map { RFC3339.format(milliseconds: $0) } ?? "the end"
                logger.info("Resuming from checkpoint \(path): \(saved.settledVehicles.count) vehicles already settled; the window resolved then (\(RFC3339.format(milliseconds: saved.fromMilliseconds)) to \(end)) is kept")
                return saved
            }
        }
        let available = try await reader.partitionIDs(topic: configuration.topic)
        let chosen = configuration.partitions ?? available
        if let missing = chosen.first(where: { !available.contains($0) }) {
            throw ReplayError("partition \(missing) does not exist in topic \(configuration.topic) (it has \(available.count))")
        }
        let windows = try await WindowResolver(index: reader).resolve(
            topic: configuration.topic, partitions: chosen,
            fromMilliseconds: configuration.fromMilliseconds, toMilliseconds: configuration.toMilliseconds)
        let checkpoint = ReplayCheckpoint(topic: configuration.topic, request: configuration.request,
                                          fromMilliseconds: configuration.fromMilliseconds,
                                          toMilliseconds: configuration.toMilliseconds, partitions: windows)
        if !configuration.dryRun { try saveCheckpoint(checkpoint) }
        return checkpoint
    }

    private func saveCheckpoint(_ checkpoint: ReplayCheckpoint) throws {
        guard let path = configuration.checkpointPath else { return }
        try checkpoint.save(to: path)
    }

    // MARK: Reading

    private func readWindow(_ checkpoint: ReplayCheckpoint, reader: KafkaPartitionReader,
                            summary: inout ReplaySummary) async throws -> WindowCoalescer {
        let times = TimeWindow(from: checkpoint.fromMilliseconds, to: checkpoint.toMilliseconds)
        var firstOffsets: [Int32: Int64] = [:]
        let coalescer = try await progress.phase("reading", total: summary.recordsInWindow, unit: "records") {
            try await readRecords(checkpoint.partitions, times: times, reader: reader, summary: &summary, firstOffsets: &firstOffsets)
        }
        if !Task.isCancelled {
            summary.deletedBeforeRead = try await deletedBeforeRead(checkpoint.partitions, firstOffsets: firstOffsets, reader: reader)
        }
        return coalescer
    }

    /// Reads the windows' records into coalesced fixes, noting the first offset read per partition.
    private func readRecords(_ windows: [PartitionWindow], times: TimeWindow, reader: KafkaPartitionReader,
                             summary: inout ReplaySummary, firstOffsets: inout [Int32: Int64]) async throws -> WindowCoalescer {
        var coalescer = WindowCoalescer(pastLimit: configuration.pastLimit)
        var remaining = Dictionary(uniqueKeysWithValues: windows.filter { $0.records > 0 }.map { ($0.partition, $0.end) })
        guard !remaining.isEmpty else { return coalescer }
        let deadLetters = try deadLetterWriter()
        let written = Atomic<Int>(0)
        async let lettersWritten: Void = deadLetters?.run() ?? ()
        try await reader.assign(windows.filter { $0.records > 0 }.map {
            TopicPartitionOffset(TopicPartition(topic: configuration.topic, partition: $0.partition), offset: $0.start)
        })
        let decoder = RecordDecoders.forTopic(mapping: configuration.inputMapping, schemaSource: configuration.schemaSource,
                                                   defaultKind: configuration.defaultKind)
        var lastProgress = ContinuousClock.now
        while !remaining.isEmpty, !Task.isCancelled {
            let (records, reachedEnd) = try await reader.poll(maximum: 2000)
            if !records.isEmpty || !reachedEnd.isEmpty { lastProgress = .now }
            try await decoder.prepare(records.map(InputRecord.init)) { problem in
                logger.warning("\(problem); records wait and are retried")
                lastProgress = .now  // waiting for the registry is not a stalled partition
            }
            for record in records {
                guard let end = remaining[record.partition] else { continue }
                if firstOffsets[record.partition] == nil { firstOffsets[record.partition] = record.offset }
                guard record.offset < end else {
                    remaining[record.partition] = nil  // the reader started past the window: it was deleted
                    continue
                }
                if record.offset >= end - 1 { remaining[record.partition] = nil }
                summary.recordsRead += 1
                progress.advance()
                guard times.contains(record.timestampMilliseconds) else {
                    summary.outsideWindow += 1
                    continue
                }
                switch decoder.decode(InputRecord(record)) {
                case .update(let update):
                    coalescer.add(update.fix, for: update.vehicle)
                case .skipped:
                    summary.skipped += 1
                case .rejected(let rejection):
                    summary.bad += 1
                    Counter(label: "fleet_relay_replay_bad_records_total", dimensions: [("reason", rejection.reason.rawValue)]).increment()
                    deadLetters?.submit(DeadLetterOrder(source: RecordSource(record), reason: rejection.reason.rawValue,
                                                        detail: rejection.detail)) {
                        written.add(1, ordering: .relaxed)
                    }
                }
            }
            Counter(label: "fleet_relay_replay_records_read_total").increment(by: records.count)
            for partition in reachedEnd { remaining[partition.partition] = nil }
            if ContinuousClock.now - lastProgress > .seconds(60) {
                throw ReplayError("no records from partitions \(remaining.keys.sorted()) for 60 s; are they still there?")
            }
        }
        deadLetters?.finishIntake()
        await lettersWritten
        summary.deadLettered = written.load(ordering: .relaxed)
        return coalescer
    }

    /// Records of the window that retention deleted before they were read, per partition.
    /// The reader starts a partition whose start offset is gone at its earliest record
    /// (`auto.offset.reset=earliest`), so such a partition's first record lies past the
    /// window's start; the partition's log start then says how many are gone. (A first
    /// record past the start with the log starting earlier is a gap, such as a
    /// transaction marker or compaction, and loses nothing.)
    private func deletedBeforeRead(_ windows: [PartitionWindow], firstOffsets: [Int32: Int64],
                                   reader: KafkaPartitionReader) async throws -> [Int32: Int64] {
        var deleted: [Int32: Int64] = [:]
        for window in windows where window.records > 0 && firstOffsets[window.partition] != window.start {
            let partition = TopicPartition(topic: configuration.topic, partition: window.partition)
            let logStart = try await reader.watermarks(partition).low
            guard logStart > window.start else { continue }
            let count = min(logStart, window.end) - window.start
            deleted[window.partition] = count
            logger.error("Partition \(window.partition): offsets \(window.start)..<\(window.start + count) of the window (\(count) records) were deleted by retention before they were read; they are not replayed")
        }
        return deleted
    }

    private func deadLetterWriter() throws -> DeadLetterWriter? {
        guard let topic = configuration.deadLetterTopic, !configuration.dryRun else { return nil }
        let producer = try KafkaProducer(configuration: kafka, logger: logger)
        return DeadLetterWriter(topic: topic, producer: producer, retryPolicy: configuration.retryPolicy,
                                logLimiter: LogLimiter(), health: health, logger: logger)
    }

    // MARK: Sending

    private func send(_ updates: [VehicleLocationUpdate], sender: ReplaySender,
                      checkpoint: inout ReplayCheckpoint) async -> SendLedger.Outcomes {
        await progress.phase("sending", total: updates.count, unit: "vehicles") {
            await sendAll(updates, sender: sender, checkpoint: &checkpoint)
        }
    }

    private func sendAll(_ updates: [VehicleLocationUpdate], sender: ReplaySender,
                         checkpoint: inout ReplayCheckpoint) async -> SendLedger.Outcomes {
        if configuration.force {
            logger.warning("--force: sending without reading live locations; vehicles updated since the window will move back in time")
        }
        let limiter = configuration.rate.map { RequestRateLimiter(rate: $0) }
        let forwarder = UpdateForwarder(
            client: sender.client, tokens: sender.tokens, statistics: statistics, health: health,
            logLimiter: LogLimiter(), logger: logger,
            observeResponse: { outcome in
                if case .transient(cause: "http_429", _) = outcome { limiter?.throttled() }
            })
        let ledger = SendLedger(checkpoint: checkpoint, progress: progress)
        await withTaskGroup(of: Void.self) { saving in
            saving.addTask { await self.saveCheckpoints(of: ledger) }
            saving.addTask { await sender.tokens.runRefreshes() }
            await withDiscardingTaskGroup { senders in
                for _ in 0..<min(configuration.maximumInFlight, max(1, updates.count)) {
                    senders.addTask { await self.sendUntilDone(updates, ledger: ledger, limiter: limiter, forwarder: forwarder) }
                }
            }
            saving.cancelAll()  // the caller saves the final state; token refreshes end
        }
        let (outcomes, final) = ledger.result
        checkpoint = final
        return outcomes
    }

    /// One sender: takes the next update from the ledger until none is left (or the replay is cancelled).
    private func sendUntilDone(_ updates: [VehicleLocationUpdate], ledger: SendLedger, limiter: RequestRateLimiter?,
                               forwarder: UpdateForwarder) async {
        while !Task.isCancelled {
            let index = ledger.takeIndex()
            guard index < updates.count else { return }
            if let limiter, (try? await limiter.acquire()) == nil { return }
            ledger.settle(updates[index].vehicle, await deliver(updates[index], forwarder: forwarder))
        }
    }

    private func saveCheckpoints(of ledger: SendLedger) async {
        await ledger.saveEverySecond(save: saveCheckpoint) { logger.error("Checkpoint not saved: \($0)") }
    }

    private func deliver(_ update: VehicleLocationUpdate, forwarder: UpdateForwarder) async -> SendLedger.VehicleOutcome {
        let started = ContinuousClock.now
        var attempt = 0
        while !Task.isCancelled {
            // Each attempt reads the live location again: a newer fix may have reached Fleet
            // Engine while this one waited to retry (the live relay goes on meanwhile).
            let delivery = await forwarder.deliver(update, checkLiveLocation: !configuration.force)
            switch delivery.outcome {
            case .accepted: return .accepted
            case .stale: return .skippedNewerLive
            case .rejected(let reason, let detail):
                logger.warning("Replay of \(update.vehicle) failed: \(reason): \(detail)")
                return .failed(reason)
            case .abandoned: return .interrupted
            case .retry(let failure):
                guard ContinuousClock.now - started < configuration.retryDeadline else {
                    guard failure.isFleetEngine else { return .failed(failure.cause) }
                    logger.warning("Replay of \(update.vehicle) failed: \(UpdateForwarder.retryDeadlineExceeded) after \(attempt + 1) attempts; last cause: \(failure.cause): \(failure.detail)")
                    return .failed(UpdateForwarder.retryDeadlineExceeded)
                }
                let delay = configuration.retryPolicy.delay(attempt: attempt, retryAfterSeconds: failure.retryAfterSeconds)
                if (try? await Task.sleep(for: delay)) == nil { return .interrupted }
                attempt += 1
            }
        }
        return .interrupted
    }

    static func key(_ vehicle: VehicleIdentity) -> String { "\(vehicle.kind.rawValue)/\(vehicle.id)" }
}

/// Tallies the sending phase's outcomes and records settled vehicles in the checkpoint.
/// Senders only append under its lock; the file is written by one saver outside it.
final class SendLedger: Sendable {
    struct Outcomes {
        var accepted = 0
        var skippedNewerLive = 0
        var failures: [String: Int] = [:]
    }

    enum VehicleOutcome {
        case accepted
        case skippedNewerLive
        case failed(String)
        case interrupted
    }

    private struct State {
        var outcomes = Outcomes()
        var checkpoint: ReplayCheckpoint
        /// Vehicles settled so far: tells the saver whether there is anything new to write.
        var settledCount = 0
    }

    private let state: Mutex<State>
    private let nextIndex = Atomic<Int>(0)
    private let progress: ReplayProgress

    init(checkpoint: ReplayCheckpoint, progress: ReplayProgress) {
        state = Mutex(State(checkpoint: checkpoint))
        self.progress = progress
    }

    /// The index of the next update for a worker to send.
    func takeIndex() -> Int { nextIndex.add(1, ordering: .relaxed).oldValue }

    var result: (Outcomes, ReplayCheckpoint) { state.withLock { ($0.outcomes, $0.checkpoint) } }

    /// Writes the checkpoint once a second while vehicles settle, until cancelled. The copy is
    /// taken under the lock (copy-on-write: no bytes move); encoding and `fsync` happen outside it.
    func saveEverySecond(save: (ReplayCheckpoint) throws -> Void, onError: (any Error) -> Void) async {
        var savedCount = 0
        while (try? await Task.sleep(for: .seconds(1))) != nil {
            let (checkpoint, count) = state.withLock { ($0.checkpoint, $0.settledCount) }
            guard count != savedCount else { continue }
            do {
                try save(checkpoint)
                savedCount = count
            } catch {
                onError(error)
            }
        }
    }

    func settle(_ vehicle: VehicleIdentity, _ outcome: VehicleOutcome) {
        let label: String
        switch outcome {
        case .interrupted: return  // not settled: a resumed replay sends it
        case .accepted: label = "accepted"
        case .skippedNewerLive: label = "skipped_newer_live"
        case .failed: label = "failed"
        }
        Counter(label: "fleet_relay_replay_vehicles_total", dimensions: [("outcome", label)]).increment()
        progress.advance()
        state.withLock { state in
            switch outcome {
            case .accepted: state.outcomes.accepted += 1
            case .skippedNewerLive: state.outcomes.skippedNewerLive += 1
            case .failed(let reason):
                // Failed vehicles stay unsettled, so a resumed replay tries them again.
                state.outcomes.failures[reason, default: 0] += 1
                return
            case .interrupted: return
            }
            state.checkpoint.settledVehicles.append(Replayer.key(vehicle))
            state.settledCount += 1
        }
    }
}

/// The replay's times: records stamped outside are read but not sent.
struct TimeWindow {
    let from: Int64
    /// Exclusive; nil: no end.
    let to: Int64?

    func contains(_ timestamp: Int64?) -> Bool {
        guard let timestamp else { return true }
        return timestamp >= from && timestamp < (to ?? .max)
    }
}
