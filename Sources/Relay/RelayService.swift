import FleetAuth
import FleetEngine
import Kafka
import Logging
import ServiceLifecycle
import Synchronization


/// The relay: consume → decode → batch → coalesce per vehicle → sign → send →
/// commit. A `Service` for ServiceLifecycle: graceful shutdown stops fetching,
/// drains in-flight work for up to `shutdownTimeout`, commits what finished and
/// leaves the consumer group.
///
/// Guarantee: an offset is committed only when every record at or below it was
/// accepted by Fleet Engine, dead-lettered, or superseded by a newer accepted fix.
public final class RelayService: Service, Sendable {
    public let configuration: RelayConfiguration
    public let statistics = RelayStatistics()
    public let health: RelayHealth
    private let tokens: TokenCache
    private let logLimiter = LogLimiter()
    private let tracker = OffsetTracker()
    private let inFlight = InFlightRegistry()
    private let assignmentEpoch = AssignmentEpoch()
    private let decoder: LocationEventDecoder
    private let batcher: Batcher
    private let dispatcher: VehicleDispatcher
    private let forwarder: UpdateForwarder
    private let deadLetters: DeadLetterWriter
    private let producer: KafkaProducer
    private let logger: Logger
    private let consumerState = Mutex<KafkaConsumer?>(nil)
    /// Set when shutdown begins: fetching stays paused from then on.
    private let stopping = Atomic<Bool>(false)
    /// Set once shutdown has drained: revokes from then on must not wait for work that was abandoned.
    private let drained = Atomic<Bool>(false)

    public init(configuration: RelayConfiguration, client: FleetEngineClient, tokens: TokenCache,
                logger: Logger) throws(KafkaError) {
        self.configuration = configuration
        self.logger = logger
        self.tokens = tokens
        self.health = RelayHealth(maximumOutage: configuration.readyMaximumOutage, logger: logger)
        self.decoder = LocationEventDecoder(defaultKind: configuration.defaultKind)
        self.batcher = Batcher(maximumSize: configuration.batchSize, linger: configuration.batchLinger)
        // A dead letter carries the consumed record whole, plus headers: the producer must take
        // anything the consumer can hand over (the broker's topic limit still applies).
        let producerProperties = configuration.kafka.properties.merging(
            ["message.timeout.ms": "30000", "message.max.bytes": String(Self.deadLetterMaximumBytes)]) { user, _ in user }
        self.producer = try KafkaProducer(configuration: KafkaConfiguration(producerProperties), logger: logger)
        self.deadLetters = DeadLetterWriter(topic: configuration.deadLetterTopic, producer: producer,
                                            retryPolicy: configuration.retryPolicy, logLimiter: logLimiter,
                                            health: health, logger: logger)
        self.forwarder = UpdateForwarder(client: client, tokens: tokens, retryPolicy: configuration.retryPolicy,
                                         retryDeadline: configuration.retryDeadline, statistics: statistics,
                                         health: health, logLimiter: logLimiter, logger: logger)
        let (tracker, statistics, epoch) = (self.tracker, self.statistics, self.assignmentEpoch)
        self.dispatcher = VehicleDispatcher(
            pastLimit: configuration.pastLocationsLimit, minimumInterval: configuration.minimumIntervalPerVehicle,
            laneIdleLimit: configuration.vehicleIdleTimeout,
            isCurrent: { tracker.owns($0) }, assignmentEpoch: { epoch.current }
        ) { staleFixes in
            for fix in staleFixes { tracker.finish(fix.source) }
            statistics.recordFinished(.stale, count: staleFixes.count)
        }
    }

    /// Room for a record as large as Kafka's default fetch limit per partition (1 MiB)
    /// several times over, plus the dead-letter headers.
    static let deadLetterMaximumBytes = 4 * 1024 * 1024

    // MARK: Observation

    public var vehicleCount: Int { get async { await dispatcher.vehicleCount } }
    public var uncommittedRecords: Int64 { tracker.uncommitted }
    public var assignedPartitions: [TopicPartition] { tracker.assignedPartitions }
    public var isPaused: Bool { consumerState.withLock { $0?.isPaused ?? false } }
    /// Records consumed and not yet finished (what flow control bounds).
    public var pendingRecords: Int { tracker.outstanding }

    // MARK: Running

    public func run() async throws {
        let consumer = try makeConsumer()
        consumerState.withLock { $0 = consumer }
        health.watchPollLoop { consumer.secondsSinceLastPoll }
        logger.info("Relaying \(configuration.topic) in group \(configuration.group) (dead letters to \(configuration.deadLetterTopic))")

        await withDiscardingTaskGroup { background in
            background.addTask { await self.housekeep(consumer) }
            await withTaskGroup(of: Bool.self) { work in
                work.addTask { await self.process(); return true }
                await ingest(consumer)
                await drain(consumer, work: &work)
            }
            drained.store(true, ordering: .relaxed)
            background.cancelAll()
        }
        await commit(consumer)
        await consumer.close()
        await producer.close()
        logSummary()
    }

    private func makeConsumer() throws(KafkaError) -> KafkaConsumer {
        var kafka = configuration.kafka
        kafka["group.id"] = configuration.group
        let (tracker, statistics, logger) = (self.tracker, self.statistics, self.logger)
        return try KafkaConsumer(configuration: kafka, topics: [configuration.topic], logger: logger) { [self] event in
            switch event {
            case .assigned(let partitions, let generation):
                tracker.assign(partitions, generation: generation)
                health.recordJoinedGroup()
                assignmentEpoch.advance()
                return []
            case .revoked(let partitions, let lost):
                tracker.beginRevoke(partitions)
                if !lost { waitForInFlightWork(in: partitions) }
                return tracker.revoke(partitions)
            }
        } committedOnRevoke: { offsets in
            statistics.commits.add(1, ordering: .relaxed)
            logger.info("Committed before revoke: \(offsets.map(\.description).joined(separator: ", "))")
        }
    }

    /// Runs on the poll thread inside the revoke callback, after new work on the
    /// partitions stopped: gives requests and dead-letter writes already under way
    /// up to `revokeDrainTimeout` (longer than a request may take) to finish, so that
    /// their offsets are committed before another member takes over and no request of
    /// this member can land after the next owner's. Queued records stay uncommitted for it.
    private func waitForInFlightWork(in partitions: [TopicPartition]) {
        guard !drained.load(ordering: .relaxed) else { return }
        let left = inFlight.waitUntilIdle(partitions, timeout: configuration.revokeDrainTimeout)
        if left > 0, !drained.load(ordering: .relaxed) {
            logger.warning("Revoke: \(left) requests still under way after \(configuration.revokeDrainTimeout); their records stay uncommitted")
        }
    }

    /// Reads records until graceful shutdown; bad ones go to the dead-letter topic at once.
    private func ingest(_ consumer: KafkaConsumer) async {
        for await chunk in consumer.records.cancelOnGracefulShutdown() {
            var consumedPerPartition: [TopicPartition: Int] = [:]
            for record in chunk where tracker.register(record) {
                consumedPerPartition[record.topicPartition, default: 0] += 1
                let source = RecordSource(record)
                switch decoder.decode(key: record.key, value: record.value) {
                case .success(let update):
                    if let batch = batcher.add(PendingFix(update: update, source: source)) {
                        statistics.recordBatch(size: batch.count)
                        await dispatcher.submit(batch)
                    }
                case .failure(let rejection):
                    deadLetter(source, reason: rejection.reason.rawValue, detail: rejection.detail)
                }
            }
            statistics.recordConsumed(consumedPerPartition)
            applyFlowControl(consumer)
        }
    }

    /// Sending and dead-lettering, until intake closes and everything queued is done.
    private func process() async {
        await withDiscardingTaskGroup { group in
            group.addTask { await self.deadLetters.run() }
            group.addTask {
                await withDiscardingTaskGroup { workers in
                    for _ in 0..<self.configuration.maximumInFlight {
                        workers.addTask { await self.work() }
                    }
                }
                self.deadLetters.finishIntake()
            }
        }
    }

    private func work() async {
        while let request = await dispatcher.nextRequest() {
            let tracker = self.tracker
            inFlight.enter(request.sources)
            statistics.requestStarted()
            let delivery = await forwarder.deliver(request.update, checkLiveLocation: request.liveCheckEpoch != nil,
                                                   awaitingTokenSince: request.awaitingTokenSince) {
                request.sources.contains { tracker.owns($0) }
            }
            if delivery.outcome == .awaitingToken {
                let delay = configuration.retryPolicy.delay(attempt: request.tokenAttempts, retryAfterSeconds: nil)
                await dispatcher.retryLater(request, after: delay)
            } else {
                await dispatcher.complete(request, newestKnownMilliseconds: delivery.newestKnownMilliseconds,
                                          liveChecked: delivery.liveChecked)
                settle(request, delivery.outcome)
            }
            statistics.requestEnded()
            inFlight.leave(request.sources)
        }
    }

    private func settle(_ request: CoalescedRequest, _ outcome: DeliveryOutcome) {
        switch outcome {
        case .accepted:
            for source in request.sources { tracker.finish(source) }
            statistics.recordFinished(.accepted)
            statistics.recordFinished(.superseded, count: request.carried.count)
            statistics.recordAccepted(recordedAtMilliseconds: request.update.lastLocation.recordedAtMilliseconds,
                                      coalesced: request.sources.count)
        case .stale:
            for source in request.sources { tracker.finish(source) }
            statistics.recordFinished(.stale, count: request.sources.count)
        case .rejected(let reason, let detail):
            let (allowed, suppressed) = logLimiter.allow("rejected")
            if allowed {
                logger.warning("Fleet Engine rejected \(request.update.vehicle) (\(reason)): \(detail)",
                               metadata: suppressed > 0 ? ["suppressed_similar": "\(suppressed)"] : nil)
            }
            for source in request.sources { deadLetter(source, reason: reason, detail: detail) }
        case .abandoned, .awaitingToken:
            break
        }
    }

    private func deadLetter(_ source: RecordSource, reason: String, detail: String) {
        let (tracker, statistics, inFlight) = (self.tracker, self.statistics, self.inFlight)
        inFlight.enter([source])
        deadLetters.submit(source, reason: reason, detail: detail) {
            tracker.finish(source)
            statistics.recordDeadLetter(reason: reason)
            inFlight.leave([source])
        }
    }

    /// Releases lingering batches and deferred vehicles, applies flow control, and
    /// runs commits and gauge refreshes each on its own cadence: a slow broker delays
    /// a commit or the lag gauge, never the release of a batch.
    private func housekeep(_ consumer: KafkaConsumer) async {
        await withDiscardingTaskGroup { group in
            group.addTask { await self.releaseOnSchedule(consumer) }
            group.addTask {
                while (try? await Task.sleep(for: self.configuration.commitInterval)) != nil {
                    await self.commit(consumer)
                }
            }
            group.addTask {
                let gauges = RelayGauges()
                repeat {
                    await gauges.refresh(consumer: consumer, tracker: self.tracker, tokens: self.tokens)
                } while (try? await Task.sleep(for: .seconds(5))) != nil
            }
        }
    }

    private func releaseOnSchedule(_ consumer: KafkaConsumer) async {
        while !Task.isCancelled {
            if let batch = batcher.takeIfLingered() {
                statistics.recordBatch(size: batch.count)
                await dispatcher.submit(batch)
            }
            await dispatcher.releaseDeferred()
            applyFlowControl(consumer)
            health.recordPauseState(unwished: consumer.pausedAgainstWish > 0)
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Pauses fetching for each partition holding its share of `maximumPendingRecords`
    /// unfinished records, and resumes it once half of that finished. Unfinished records
    /// are counted, not the window behind the oldest one, so a vehicle stuck in retries
    /// holds back only its own records (and its partition's commit), never other vehicles.
    private func applyFlowControl(_ consumer: KafkaConsumer) {
        guard !stopping.load(ordering: .relaxed) else { return }
        let unfinished = tracker.unfinishedPerPartition
        let share = max(1, configuration.maximumPendingRecords / max(1, unfinished.count))
        let current = consumer.pauseWish
        let wanted = Set(unfinished.compactMap { partition, count in
            count >= share || (current.contains(partition) && count > share / 2) ? partition : nil
        })
        guard wanted != current else { return }
        let pausing = wanted.subtracting(current).sorted()
        let resuming = current.subtracting(wanted).intersection(unfinished.keys).sorted()
        if !pausing.isEmpty {
            logger.info("Pausing \(pausing.map(\.description).joined(separator: ", ")): at least \(share) records unfinished each")
        }
        if !resuming.isEmpty { logger.info("Resuming \(resuming.map(\.description).joined(separator: ", "))") }
        consumer.setPaused(wanted)
    }

    private func commit(_ consumer: KafkaConsumer) async {
        let offsets = tracker.committableOffsets()
        guard !offsets.isEmpty else { return }
        do {
            try await consumer.commit(offsets)
            tracker.markCommitted(offsets)
            statistics.commits.add(1, ordering: .relaxed)
        } catch {
            logger.warning("Offset commit failed, will retry: \(error)")
        }
    }

    /// Stops fetching and starting requests, and waits for the requests and dead-letter
    /// writes already under way (`work`'s processing task, which answers true when it
    /// ends), up to the shutdown timeout. Queued records stay uncommitted: the next owner
    /// of their partitions reads them again.
    private func drain(_ consumer: KafkaConsumer, work: inout TaskGroup<Bool>) async {
        logger.info("Shutting down: finishing in-flight work for up to \(configuration.shutdownTimeout)")
        stopping.store(true, ordering: .relaxed)
        consumer.pauseAll()
        _ = batcher.takeAll()
        await dispatcher.abandonQueued()
        let timeout = configuration.shutdownTimeout
        work.addTask { (try? await Task.sleep(for: timeout)) == nil }
        if await work.next() == false {
            logger.warning("Shutdown timeout reached: abandoning unfinished work (it stays uncommitted)")
        }
        work.cancelAll()
    }

    private func logSummary() {
        let totals = statistics.snapshot
        logger.info("Stopped: consumed \(totals.consumed), accepted \(totals.accepted), superseded \(totals.superseded), stale \(totals.stale), dead-lettered \(totals.deadLettered), retries \(totals.retries)")
    }
}

/// Counts partition assignments. Thread-safe.
final class AssignmentEpoch: Sendable {
    private let value = Atomic<UInt64>(0)

    var current: UInt64 { value.load(ordering: .relaxed) }

    func advance() { value.add(1, ordering: .relaxed) }
}
