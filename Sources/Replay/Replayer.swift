import FleetEngine
import FleetModel
import Foundation
import InputFormats
import Kafka
import Logging
import Metrics
import Relay
import ServiceLifecycle
import Synchronization

/// Replays a time window of the location topic into Fleet Engine through the relay's own
/// pipeline run (`PipelineRun`): the window's partitions are assigned explicitly (no group,
/// nothing committed to Kafka) and read by a `WindowFeed`, and what the state machine would
/// commit goes to the checkpoint instead: per partition, the offset below which every record
/// of the window finished. It sends each vehicle's fixes oldest first, in requests of up to
/// `pastLimit` + 1 fixes (a vehicle waits for a full request until the window ends or the
/// pending bound is reached), reads the live location before every request, retries with
/// backoff, and bounds what is read ahead by `maximumPendingRecords`.
///
/// A `Service`: graceful shutdown (or cancelling the task) interrupts it. Requests under way
/// get up to `shutdownTimeout` to end, the checkpoint is saved, and the summary says what is
/// left. This type is the replay's configuration of the run: the window, the checkpoint and
/// the summary.
public final class Replayer: Service, Sendable {
    public let configuration: ReplayConfiguration
    private let kafka: KafkaConfiguration
    private let sender: ReplaySender?
    private let progress: ReplayProgress
    private let statistics = RelayStatistics()
    private let counters = ReplayCounters()
    public let health = RelayHealth()
    private let logger: Logger
    private let outcome = Mutex<Outcome?>(nil)

    public typealias Outcome = (summary: ReplaySummary, plan: Plan)

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

    /// Runs the replay in a service group; `result` holds its summary afterwards.
    public func run() async throws {
        let result = try await replay()
        outcome.withLock { $0 = result }
    }

    /// The summary and plan of the replay `run` made.
    public var result: Outcome? { outcome.withLock { $0 } }

    public func replay() async throws -> Outcome {
        let started = ContinuousClock.now
        var summary = ReplaySummary()
        summary.dryRun = configuration.dryRun
        let reader = try KafkaPartitionReader(configuration: kafka, logger: logger,
                                              readsHeaders: configuration.inputMapping?.readsHeaders ?? false)
        var checkpoint = try await startingCheckpoint(reader)
        let windows = checkpoint.partitions
        summary.recordsInWindow = Int(windows.reduce(0) { $0 + $1.records })
        summary.alreadyFinished = Int(windows.reduce(0) { $0 + checkpoint.startOffset(of: $1) - $1.start })
        counters.recordsInWindow.record(summary.recordsInWindow)
        for window in windows where window.method == .search {
            logger.info("Partition \(window.partition): the broker's offsets-for-times answer contradicted the partition's records; found offsets \(window.start)..<\(window.end) by binary search")
        }
        let feed = WindowFeed(checkpoint: checkpoint, reader: reader, progress: progress, counters: counters, logger: logger)
        let decoding = makeDecoding(times: TimeWindow(from: checkpoint.fromMilliseconds, to: checkpoint.toMilliseconds))
        let toRead = summary.recordsInWindow - summary.alreadyFinished
        var plan = Plan(windows: windows)
        if configuration.dryRun || sender == nil {
            let tally = try await progress.phase("reading", total: toRead, unit: "records") {
                try await tallyWithoutSending(feed, decoding: decoding)
            }
            summary.interrupted = tally == nil
            plan = tally?.plan(windows: windows) ?? plan
        } else if let sender {
            let ending = try await progress.phase("replaying", total: toRead, unit: "records") {
                try await send(feed, decoding: decoding, sender: sender, checkpoint: &checkpoint, summary: &summary)
            }
            summary.interrupted = ending != .inputEnded
        }
        count(feed, decoding, into: &summary)
        summary.wallSeconds = (ContinuousClock.now - started) / .seconds(1)
        return (summary, plan)
    }

    private func makeDecoding(times: TimeWindow) -> RecordDecoding {
        let decoder = RecordDecoders.forTopic(mapping: configuration.inputMapping, schemaSource: configuration.schemaSource,
                                              defaultKind: configuration.defaultKind)
        var decoding = RecordDecoding(decoder: decoder, statistics: statistics, logLimiter: LogLimiter(), logger: logger)
        decoding.timeWindow = times
        decoding.deadLettersBadRecords = configuration.deadLetterTopic != nil
        decoding.badRecordCounters = counters.badRecords
        return decoding
    }

    /// What became of the records read, besides the fixes sent.
    private func count(_ feed: WindowFeed, _ decoding: RecordDecoding, into summary: inout ReplaySummary) {
        summary.recordsRead = feed.recordsRead
        summary.deletedBeforeRead = feed.deletedBeforeRead
        summary.outsideWindow = decoding.counts.outsideWindow.load(ordering: .relaxed)
        summary.skipped = decoding.counts.skipped.load(ordering: .relaxed)
        summary.bad = decoding.counts.bad.load(ordering: .relaxed)
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

    // MARK: Dry run

    /// Reads the window and counts what would be sent; nil when interrupted.
    private func tallyWithoutSending(_ feed: WindowFeed, decoding: RecordDecoding) async throws -> DryRunTally? {
        let tally = Mutex(DryRunTally(pastLimit: configuration.pastLimit))
        let completed = try await cancelWhenGracefulShutdown {
            try await feed.read { (chunk: consuming [KafkaRecord]) in
                let records = try await decoding.decode(consume chunk, waiting: { _ in })
                tally.withLock { tally in
                    for case .fix(let fix) in records { tally.add(fix.update) }
                }
            }
            return !Task.isCancelled
        }
        return completed ? tally.withLock { $0 } : nil
    }

    // MARK: Sending

    /// Streams the window through a pipeline run until every record of it finished (or the
    /// replay is interrupted), the checkpoint saved at each of the state machine's commit orders.
    private func send(_ feed: WindowFeed, decoding: RecordDecoding, sender: ReplaySender, checkpoint: inout ReplayCheckpoint,
                      summary: inout ReplaySummary) async throws -> PipelineRun.Ending {
        if configuration.force {
            logger.warning("--force: sending without reading live locations; vehicles updated since the window will move back in time")
        }
        let driver = makeDriver(sender: sender)
        driver.assign(feed.partitions, generation: WindowFeed.generation)
        let saver = CheckpointSaver(checkpoint: checkpoint, save: saveCheckpoint, logger: logger)
        let run = PipelineRun(driver: driver, decoding: decoding, tokens: sender.tokens, health: health,
                              shutdownTimeout: configuration.shutdownTimeout, logger: logger)
        let ending = try await run.run(feed: feed, commits: saver)
        checkpoint = saver.checkpoint
        checkpoint.recordFinished(driver.read { $0.offsetsToCommit() }, of: configuration.topic)
        summarize(driver: driver, into: &summary)
        count(feed, decoding, into: &summary)
        checkpoint.complete = ending == .inputEnded && summary.failed == 0 && summary.deletedBeforeRead.isEmpty
            && summary.unfinished == 0 && summary.unaccounted == 0
        try saveCheckpoint(checkpoint)
        return ending
    }

    private func makeDriver(sender: ReplaySender) -> PipelineDriver {
        var limits = PipelineLimits(pastLocations: configuration.pastLimit,
                                    maximumPendingRecords: configuration.maximumPendingRecords,
                                    retryPolicy: configuration.retryPolicy, retryDeadline: configuration.retryDeadline)
        limits.holdsPartialRequests = true
        limits.readsLiveLocationBeforeEveryRequest = true
        limits.concurrency = ConcurrencyLimit.Settings(maximum: configuration.maximumInFlight)
        limits.maximumRequestsPerSecond = configuration.rate
        limits.writesDeadLetters = configuration.deadLetterTopic != nil
        let logLimiter = LogLimiter()
        let forwarder = UpdateForwarder(
            client: sender.client, tokens: sender.tokens, statistics: statistics, health: health,
            logLimiter: logLimiter, logger: logger)
        return PipelineDriver(
            limits: limits, forwarder: forwarder, deadLetters: deadLetterWriter(logLimiter: logLimiter), statistics: statistics,
            health: health, logLimiter: logLimiter, logger: logger, maximumInFlight: configuration.maximumInFlight,
            readsLiveLocation: !configuration.force)
    }

    private func deadLetterWriter(logLimiter: LogLimiter) -> DeadLetterWriter? {
        guard let topic = configuration.deadLetterTopic else { return nil }
        return DeadLetterWriter(topic: topic, producerConfiguration: kafka, logLimiter: logLimiter, health: health, logger: logger)
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
        summary.unfinished = driver.read { $0.unfinishedRecords } - statistics.failed.total
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
