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
    /// Records read and not yet finished, at most: what bounds the replay's memory. A vehicle
    /// waits for a full request (`pastLimit` + 1 fixes) until this bound is reached.
    public var maximumPendingRecords: Int
    public var retryPolicy: RetryPolicy
    /// How long one vehicle's update may keep failing transiently before it counts as failed.
    public var retryDeadline: Duration
    /// Discard a checkpoint that exists and start over.
    public var restart = false
    /// The flags as given (`-2h` stays relative); by default the absolute times and partitions above.
    public var requestedAs: ReplayRequest?

    /// About 230 MB of records waiting (about 600 bytes each with their vehicles' lanes and
    /// queues), inside a 512 MiB Job with room to spare: up to 4,000 vehicles fill whole
    /// requests of 101 fixes; more share the bound (10,000 vehicles: about 40 fixes per request).
    public static let defaultMaximumPendingRecords = 400_000

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
                pastLimit: Int = 100, maximumPendingRecords: Int = ReplayConfiguration.defaultMaximumPendingRecords,
                retryPolicy: RetryPolicy = RetryPolicy(), retryDeadline: Duration = .seconds(120)) {
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
        self.maximumPendingRecords = maximumPendingRecords
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

/// Replays a time window of the location topic into Fleet Engine through the relay's own
/// pipeline core (`PipelineDriver`): the window's partitions are assigned explicitly (no
/// group, nothing committed to Kafka) and their records stream into the state machine as the
/// live relay's do. It sends each vehicle's fixes oldest first, in requests of up to
/// `pastLimit` + 1 fixes (a vehicle waits for a full request until the window ends or the
/// pending bound is reached), reads the live location before every request, retries with
/// backoff, and bounds what is read ahead by `maximumPendingRecords`. What the state machine
/// would commit goes to the checkpoint instead: per partition, the offset below which every
/// record of the window finished.
///
/// Cancelling the task interrupts it: requests under way end or are abandoned, the
/// checkpoint is saved, and the summary says what is left.
public final class Replayer: Sendable {
    public let configuration: ReplayConfiguration
    private let kafka: KafkaConfiguration
    private let sender: ReplaySender?
    private let progress: ReplayProgress
    private let statistics = RelayStatistics()
    private let counters = ReplayCounters()
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

    /// What a dry run prints: the window, and what a replay would send.
    public struct Plan: Sendable {
        public var windows: [PartitionWindow]
        public var vehicles = 0
        /// Requests of up to `pastLimit` + 1 fixes each, every vehicle's history whole.
        public var requests = 0
        public var fixesPerRequest = 0
        public var fixesPerVehicle: [Int] = []
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
        summary.alreadyFinished = Int(windows.reduce(0) { $0 + checkpoint.startOffset(of: $1) - $1.start })
        counters.recordsInWindow.record(summary.recordsInWindow)
        for window in windows where window.method == .search {
            logger.info("Partition \(window.partition): the broker's offsets-for-times answer contradicted the partition's records; found offsets \(window.start)..<\(window.end) by binary search")
        }
        var plan = Plan(windows: windows)
        if configuration.dryRun || sender == nil {
            var tally = DryRunTally(pastLimit: configuration.pastLimit)
            try await progress.phase("reading", total: summary.recordsInWindow - summary.alreadyFinished, unit: "records") {
                _ = try await read(checkpoint, reader: reader, summary: &summary) { records in
                    for case .fix(let fix) in records { tally.add(fix.update) }
                }
            }
            plan = tally.plan(windows: windows)
        } else if let sender {
            try await send(&checkpoint, reader: reader, sender: sender, summary: &summary)
        }
        summary.interrupted = Task.isCancelled
        summary.wallSeconds = (ContinuousClock.now - started) / .seconds(1)
        return (summary, plan)
    }

    // MARK: Window

    private func startingCheckpoint(_ reader: KafkaPartitionReader) async throws -> ReplayCheckpoint {
        if let path = configuration.checkpointPath, configuration.restart {
            if FileManager.default.fileExists(atPath: path) {
                logger.warning("--restart: discarding checkpoint \(path) and starting over")
            }
        } else if let path = configuration.checkpointPath, let saved = try ReplayCheckpoint.load(from: path) {
            try saved.check(topic: configuration.topic, request: configuration.request, path: path)
            let end: String = saved.toMilliseconds.map { RFC3339.format(milliseconds: $0) } ?? "the end"
            let left = saved.partitions.reduce(0) { $0 + $1.end - saved.startOffset(of: $1) }
            logger.info("Resuming from checkpoint \(path): \(left) records of the window left to read; the window resolved then (\(RFC3339.format(milliseconds: saved.fromMilliseconds)) to \(end)) is kept")
            return saved
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

    private func topicPartition(_ partition: Int32) -> TopicPartition {
        TopicPartition(topic: configuration.topic, partition: partition)
    }

    // MARK: Sending

    /// Streams the window through the pipeline core until every record of it finished (or
    /// the replay is interrupted), saving the checkpoint at each of the core's commit orders.
    private func send(_ checkpoint: inout ReplayCheckpoint, reader: KafkaPartitionReader, sender: ReplaySender,
                      summary: inout ReplaySummary) async throws {
        if configuration.force {
            logger.warning("--force: sending without reading live locations; vehicles updated since the window will move back in time")
        }
        let driver = try makeDriver(sender: sender)
        let pending = checkpoint.partitions.filter { checkpoint.startOffset(of: $0) < $0.end }
        driver.assign(pending.map { topicPartition($0.partition) }, generation: Self.generation)
        let pauses = PauseMailbox()
        driver.applyPauses { pauses.post($0, sequence: $1) }
        let saver = CheckpointSaver(checkpoint: checkpoint, save: saveCheckpoint, logger: logger)
        driver.issueCommits { order in saver.submit(order) }
        var readError: (any Error)?
        await withDiscardingTaskGroup { group in
            group.addTask { await saver.run(answer: driver.commitAnswered) }
            group.addTask { await sender.tokens.runRefreshes() }
            group.addTask { await driver.runDeadlines() }
            await withTaskGroup(of: Void.self) { work in
                work.addTask {
                    await withTaskCancellationHandler {
                        await driver.process()
                    } onCancel: {
                        driver.closeIntake()
                    }
                }
                do {
                    try await progress.phase("replaying", total: summary.recordsInWindow - summary.alreadyFinished, unit: "records") {
                        try await read(checkpoint, reader: reader, summary: &summary, pauses: pauses,
                                       waiting: driver.recordsWaitForSchemaRegistry) { driver.consume($0) }
                    }
                } catch {
                    readError = error
                    driver.closeIntake()
                }
                if Task.isCancelled { driver.closeIntake() } else { driver.endInput() }
                await work.waitForAll()
            }
            driver.issueCommits(through: nil)
            saver.finish()
            group.cancelAll()
        }
        if let readError { throw readError }
        checkpoint = saver.checkpoint
        checkpoint.recordFinished(driver.read { $0.offsetsToCommit() }, of: configuration.topic)
        summarize(driver: driver, into: &summary)
        checkpoint.complete = !Task.isCancelled && summary.failed == 0 && summary.deletedBeforeRead.isEmpty
            && summary.unfinished == 0 && summary.unaccounted == 0
        try saveCheckpoint(checkpoint)
    }

    /// The replay's partitions are assigned once; the window reader stamps every record with generation 0.
    private static let generation: UInt64 = 0

    private func makeDriver(sender: ReplaySender) throws -> PipelineDriver {
        var limits = PipelineLimits(pastLocations: configuration.pastLimit,
                                    maximumPendingRecords: configuration.maximumPendingRecords,
                                    retryPolicy: configuration.retryPolicy, retryDeadline: configuration.retryDeadline)
        limits.holdsPartialRequests = true
        limits.readsLiveLocationBeforeEveryRequest = true
        limits.concurrency = ConcurrencyLimit.Settings(maximum: configuration.maximumInFlight)
        limits.maximumRequestsPerSecond = configuration.rate
        let logLimiter = LogLimiter()
        let forwarder = UpdateForwarder(
            client: sender.client, tokens: sender.tokens, statistics: statistics, health: health,
            logLimiter: logLimiter, logger: logger)
        return PipelineDriver(
            limits: limits, forwarder: forwarder, deadLetters: try deadLetterWriter(logLimiter: logLimiter), statistics: statistics,
            health: health, logLimiter: logLimiter, logger: logger, maximumInFlight: configuration.maximumInFlight,
            readsLiveLocation: !configuration.force)
    }

    private func deadLetterWriter(logLimiter: LogLimiter) throws -> DeadLetterWriter? {
        guard let topic = configuration.deadLetterTopic else { return nil }
        let producer = try KafkaProducer(configuration: kafka, logger: logger)
        return DeadLetterWriter(topic: topic, producer: producer, logLimiter: logLimiter, health: health, logger: logger)
    }

    /// The fixes' fates, from the pipeline's counts.
    private func summarize(driver: PipelineDriver, into summary: inout ReplaySummary) {
        let totals = statistics.snapshot
        summary.sent = totals.accepted + totals.superseded
        summary.skippedNewerLive = totals.stale
        summary.failed = statistics.refused.load(ordering: .relaxed)
        summary.deadLettered = totals.deadLettered
        summary.requestsSent = totals.requestsAccepted + totals.requestsFailed
        summary.requestsAccepted = totals.requestsAccepted
        summary.unfinished = driver.read { $0.unfinishedRecords } - statistics.failed.load(ordering: .relaxed)
    }

    // MARK: Reading

    /// Reads the window's records from the checkpoint's offsets on, classifies each (outside
    /// the times, skipped, bad, a fix) and hands them on in batches, following the pause wish.
    /// Returns when every partition reached its window's end (or the task is cancelled).
    private func read(_ checkpoint: ReplayCheckpoint, reader: KafkaPartitionReader, summary: inout ReplaySummary,
                      pauses: PauseMailbox? = nil, waiting: (String?) -> Void = { _ in },
                      take: ([ConsumedRecord]) -> Void) async throws {
        let windows = checkpoint.partitions.filter { checkpoint.startOffset(of: $0) < $0.end }
        var remaining = Dictionary(uniqueKeysWithValues: windows.map { ($0.partition, $0.end) })
        guard !remaining.isEmpty else { return }
        let times = TimeWindow(from: checkpoint.fromMilliseconds, to: checkpoint.toMilliseconds)
        var firstOffsets: [Int32: Int64] = [:]
        try await reader.assign(windows.map { TopicPartitionOffset(topicPartition($0.partition), offset: checkpoint.startOffset(of: $0)) })
        let decoder = RecordDecoders.forTopic(mapping: configuration.inputMapping, schemaSource: configuration.schemaSource,
                                              defaultKind: configuration.defaultKind)
        var paused: Set<TopicPartition> = []
        var lastProgress = ContinuousClock.now
        while !remaining.isEmpty, !Task.isCancelled {
            if let pauses {
                let wish = pauses.wish
                if wish != paused { try await reader.pause(wish.subtracting(paused), resume: paused.subtracting(wish)) }
                paused = wish
                if remaining.keys.allSatisfy({ paused.contains(topicPartition($0)) }) {
                    await pauses.waitForChange(from: paused)  // nothing to read until records finish
                    lastProgress = .now
                    continue
                }
            }
            let (records, reachedEnd) = try await reader.poll(maximum: 2000)
            if !records.isEmpty || !reachedEnd.isEmpty { lastProgress = .now }
            let waited = try await decoder.prepare(records.map(InputRecord.init), waiting: waiting) { problem in
                logger.warning("\(problem); records wait and are retried")
            }
            if waited { lastProgress = .now }  // waiting for the registry is not a stalled partition
            var batch: [ConsumedRecord] = []
            for record in records {
                guard let end = remaining[record.partition] else { continue }
                if firstOffsets[record.partition] == nil { firstOffsets[record.partition] = record.offset }
                guard record.offset < end else {
                    remaining[record.partition] = nil  // the reader started past the window: it was deleted
                    continue
                }
                if record.offset >= end - 1 { remaining[record.partition] = nil }
                batch.append(classify(record, times: times, decoder: decoder, summary: &summary))
            }
            summary.recordsRead += batch.count
            progress.advance(by: batch.count)
            counters.recordsRead.increment(by: batch.count)
            take(batch)
            for partition in reachedEnd { remaining[partition.partition] = nil }
            if ContinuousClock.now - lastProgress > .seconds(60) {
                throw ReplayError("no records from partitions \(remaining.keys.sorted()) for 60 s; are they still there?")
            }
        }
        if !Task.isCancelled {
            summary.deletedBeforeRead = try await deletedBeforeRead(windows, checkpoint: checkpoint, firstOffsets: firstOffsets, reader: reader)
        }
    }

    private func classify(_ record: KafkaRecord, times: TimeWindow, decoder: any RecordDecoder,
                          summary: inout ReplaySummary) -> ConsumedRecord {
        let source = RecordSource(record)
        guard times.contains(record.timestampMilliseconds) else {
            summary.outsideWindow += 1
            return .skipped(source)
        }
        switch decoder.decode(InputRecord(record)) {
        case .update(let update):
            return .fix(PendingFix(update: update, source: source))
        case .skipped:
            summary.skipped += 1
            return .skipped(source)
        case .rejected(let rejection):
            summary.bad += 1
            counters.badRecords[rejection.reason]?.increment()
            // Without a dead-letter topic a bad record is only counted: sending it again cannot help.
            guard configuration.deadLetterTopic != nil else { return .skipped(source) }
            return .bad(source, reason: rejection.reason.rawValue, detail: rejection.detail)
        }
    }

    /// Records of the window that retention deleted before they were read, per partition.
    /// The reader starts a partition whose start offset is gone at its earliest record
    /// (`auto.offset.reset=earliest`), so such a partition's first record lies past the
    /// window's start; the partition's log start then says how many are gone. (A first
    /// record past the start with the log starting earlier is a gap, such as a
    /// transaction marker or compaction, and loses nothing.)
    private func deletedBeforeRead(_ windows: [PartitionWindow], checkpoint: ReplayCheckpoint, firstOffsets: [Int32: Int64],
                                   reader: KafkaPartitionReader) async throws -> [Int32: Int64] {
        var deleted: [Int32: Int64] = [:]
        for window in windows {
            let start = checkpoint.startOffset(of: window)
            guard firstOffsets[window.partition] != start else { continue }
            let logStart = try await reader.watermarks(topicPartition(window.partition)).low
            guard logStart > start else { continue }
            let count = min(logStart, window.end) - start
            deleted[window.partition] = count
            logger.error("Partition \(window.partition): offsets \(start)..<\(start + count) of the window (\(count) records) were deleted by retention before they were read; they are not replayed")
        }
        return deleted
    }
}

/// The replay's own metrics, made once: each series exists from the start, at 0.
struct ReplayCounters: Sendable {
    let recordsInWindow = Gauge(label: "fleet_relay_replay_records_in_window")
    let recordsRead = Counter(label: "fleet_relay_replay_records_read_total")
    let badRecords = Dictionary(uniqueKeysWithValues: RejectionReason.allCases.map {
        ($0, Counter(label: "fleet_relay_replay_bad_records_total", dimensions: [("reason", $0.rawValue)]))
    })
}

/// What a dry run counts per vehicle: memory grows with vehicles, not with the window.
struct DryRunTally {
    let pastLimit: Int
    private var fixes: [VehicleIdentity: Int] = [:]
    private var oldest: Int64?
    private var newest: Int64?

    init(pastLimit: Int) {
        self.pastLimit = pastLimit
    }

    mutating func add(_ update: LocationUpdate) {
        fixes[update.vehicle, default: 0] += 1
        let time = update.fix.recordedAtMilliseconds
        oldest = min(oldest ?? time, time)
        newest = max(newest ?? time, time)
    }

    func plan(windows: [PartitionWindow]) -> Replayer.Plan {
        let perRequest = pastLimit + 1
        return Replayer.Plan(windows: windows, vehicles: fixes.count,
                             requests: fixes.values.reduce(0) { $0 + ($1 + perRequest - 1) / perRequest },
                             fixesPerRequest: perRequest,
                             fixesPerVehicle: Array(fixes.values), oldestMilliseconds: oldest, newestMilliseconds: newest)
    }
}

/// The pipeline's pause wish, from the state machine (posting never blocks) to
/// the window reader, which waits here while every partition it still reads is paused.
final class PauseMailbox: Sendable {
    private struct State {
        var wish: Set<TopicPartition> = []
        var sequence: UInt64 = 0
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())

    var wish: Set<TopicPartition> { state.withLock { $0.wish } }

    /// Keeps `wish` unless a wish with a higher sequence number was posted already.
    func post(_ wish: Set<TopicPartition>, sequence: UInt64) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard sequence > state.sequence else { return nil }
            state.wish = wish
            state.sequence = sequence
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Returns once the wish differs from `current`, or the task is cancelled.
    func waitForChange(from current: Set<TopicPartition>) async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let changed = state.withLock { state -> Bool in
                    guard state.wish == current, !Task.isCancelled else { return true }
                    state.waiter = continuation
                    return false
                }
                if changed { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume()
        }
    }
}

/// Writes the checkpoint for each commit order of the state machine, one at a time, off the
/// pipeline's lock (a durable write takes milliseconds), and answers the order once saved.
final class CheckpointSaver: Sendable {
    private let orders: AsyncStream<CommitOrder>
    private let submissions: AsyncStream<CommitOrder>.Continuation
    private let saved: Mutex<ReplayCheckpoint>
    private let save: @Sendable (ReplayCheckpoint) throws -> Void
    private let logger: Logger

    init(checkpoint: ReplayCheckpoint, save: @escaping @Sendable (ReplayCheckpoint) throws -> Void, logger: Logger) {
        (orders, submissions) = AsyncStream.makeStream()
        saved = Mutex(checkpoint)
        self.save = save
        self.logger = logger
    }

    /// The checkpoint as last recorded.
    var checkpoint: ReplayCheckpoint { saved.withLock { $0 } }

    /// Takes an order; never blocks (the state machine orders one commit at a time).
    func submit(_ order: CommitOrder) -> String? {
        submissions.yield(order)
        return nil
    }

    func finish() {
        submissions.finish()
    }

    func run(answer: (CommitOrder, String?) -> Void) async {
        for await order in orders {
            let checkpoint = saved.withLock { checkpoint in
                checkpoint.recordFinished(order.offsets, of: checkpoint.topic)
                return checkpoint
            }
            do {
                try save(checkpoint)
                answer(order, nil)
            } catch {
                logger.error("Checkpoint not saved: \(error)")
                answer(order, "\(error)")
            }
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
