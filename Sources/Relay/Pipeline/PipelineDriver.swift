import FleetEngine
import Kafka
import Logging
import Metrics
import NIOCore

/// The pipeline at work, for the live relay and for a replay alike: a fixed set of workers
/// taking the state machine's requests, the timer of its deadlines, and the dead letters it
/// orders. Whoever feeds it records (a consumer group member, a replay's window reader) hands
/// them to `consume` and connects the pauses and commits the state machine orders.
public final class PipelineDriver: Sendable {
    public typealias Actions = PipelineActions<PipelineWaiter>

    let pipeline: Pipeline
    let forwarder: UpdateForwarder
    /// nil: records Fleet Engine refuses are not dead-lettered but stay unfinished, counted as
    /// failed (a replay without a dead-letter topic: a resumed run tries them again).
    let deadLetters: DeadLetterWriter?
    let statistics: RelayStatistics
    private let health: RelayHealth
    private let logLimiter: LogLimiter
    private let logger: Logger
    private let maximumInFlight: Int
    /// False: nothing is compared with Fleet Engine's live location (a replay's `--force`).
    private let readsLiveLocation: Bool
    private let concurrencyGauge = Gauge(label: "fleet_relay_concurrency_limit")
    private let throttledAnswers = Counter(label: "fleet_relay_throttled_total")
    private let learnedRateGauge = Gauge(label: "fleet_relay_learned_request_rate")
    /// Requests Fleet Engine's quota counted, by whether it admitted them.
    private let admittedRequests = Counter(label: "fleet_relay_quota_requests_total", dimensions: [("result", "admitted")])
    private let throttledRequests = Counter(label: "fleet_relay_quota_requests_total", dimensions: [("result", "throttled")])
    /// Hands memory freed by a drained burst back to the system (the allocator's business).
    private let releaseFreedMemory: @Sendable () -> Void

    /// - Parameter releaseFreedMemory: runs once each time a burst of unfinished records (a
    ///   cold start, a backlog) has drained, on the thread that finished it.
    public init(limits: PipelineLimits, forwarder: UpdateForwarder, deadLetters: DeadLetterWriter?,
                statistics: RelayStatistics, health: RelayHealth, logLimiter: LogLimiter, logger: Logger,
                maximumInFlight: Int, readsLiveLocation: Bool = true,
                releaseFreedMemory: @escaping @Sendable () -> Void = {}) {
        self.pipeline = Pipeline(limits: limits)
        self.forwarder = forwarder
        self.deadLetters = deadLetters
        self.statistics = statistics
        self.health = health
        self.logLimiter = logLimiter
        self.logger = logger
        self.maximumInFlight = maximumInFlight
        self.readsLiveLocation = readsLiveLocation
        self.releaseFreedMemory = releaseFreedMemory
        concurrencyGauge.record(limits.concurrency?.maximum ?? maximumInFlight)
        learnedRateGauge.record(0)
        admittedRequests.increment(by: 0)
        throttledRequests.increment(by: 0)
    }

    // MARK: Feeding

    /// Partitions to take records of, under an assignment generation.
    public func assign(_ partitions: [TopicPartition], generation: UInt64) {
        if let change = pipeline.changePauses({ $0.assign(partitions, generation: generation) }) { logPause(change) }
    }

    /// A revoke begins: no new work starts on the partitions; requests under way learn it from
    /// their revocation flags. Returns what finished on them, to commit before the revoke waits.
    public func beginRevoke(_ partitions: [TopicPartition]) -> [TopicPartitionOffset] {
        var finished: [TopicPartitionOffset] = []
        pipeline.update { state in
            state.beginRevoke(partitions)
            finished = state.offsetsToCommit(revoking: partitions)
        }
        return finished
    }

    /// A commit inside the revoke succeeded: the final commit carries only what finished since.
    public func committedDuringRevoke(_ offsets: [TopicPartitionOffset]) {
        pipeline.update { $0.committedDuringRevoke(offsets) }
    }

    /// Blocks the calling thread (the poll thread, in a revoke) until no work on the partitions
    /// is under way or `timeout` passed; returns how much is still under way.
    public func waitUntilIdle(_ partitions: [TopicPartition], timeout: Duration) -> Int {
        pipeline.waitUntilIdle(partitions, timeout: timeout)
    }

    /// The revoke ends: the partitions are forgotten; returns their final commit offsets.
    public func finishRevoke(_ partitions: [TopicPartition]) -> [TopicPartitionOffset] {
        var offsets: [TopicPartitionOffset] = []
        let change = pipeline.changePauses { state in
            let revoked = state.finishRevoke(partitions)
            offsets = revoked.offsets
            return revoked.pause
        }
        if let change { logPause(change) }
        return offsets
    }

    /// Takes consumed records in.
    public func consume(_ records: consuming [ConsumedRecord]) {
        // Handed over whole, so that the pipeline holds the only reference and moves each record.
        var handedOver = consume records
        let (actions, taken) = pipeline.handle { state in
            var chunk: [ConsumedRecord] = []
            swap(&chunk, &handedOver)
            return state.consume(chunk, now: .now)
        }
        carryOut(actions)
        if !taken.perPartition.isEmpty { statistics.recordConsumed(taken.perPartition) }
        if taken.skipped > 0 { statistics.recordFinished(.skipped, count: taken.skipped) }
    }

    /// No more records will come: what is queued goes out, then the workers stop.
    public func endInput() {
        carryOut(pipeline.handle { $0.endInput(now: .now) })
    }

    /// Stops intake for good (shutdown, an interrupted replay): what is queued stays
    /// unfinished, and the workers stop once the requests under way ended.
    public func closeIntake() {
        carryOut(pipeline.handle { $0.closeIntake(now: .now) })
    }

    /// Reads the state, for figures and progress.
    public func read<Value>(_ body: (PipelineState<PipelineWaiter>) -> Value) -> Value {
        pipeline.read(body)
    }

    /// From now on, pause wishes go through `applier`, each with its sequence number: the
    /// record source applies a wish only when it is newer than the last it applied.
    public func applyPauses(through applier: (@Sendable (_ wish: Set<TopicPartition>, _ sequence: UInt64) -> Void)?) {
        pipeline.applyPauses(through: applier)
    }

    /// Records wait for their schema because the Schema Registry cannot be asked (`reason`), or
    /// no longer do (nil). While they wait, fetching pauses for every partition and readiness
    /// says why; liveness is not concerned: a restart mends no outage of the registry.
    public func recordsWaitForSchemaRegistry(because reason: String?) {
        health.recordSchemaRegistryUnavailable(reason)
        guard let change = pipeline.changePauses({ $0.recordsWait(reason != nil) }) else { return }
        if let reason {
            logger.warning("Fetching paused for every partition: records wait for the Schema Registry (\(reason))")
        } else {
            logger.notice("Records taken in again: fetching resumes")
        }
        logPause(change)
    }

    /// From now on, commit orders go through `issuer`, which must not block or call back
    /// before it returned; the answer goes to `commitAnswered`. Returns why when refused at once.
    public func issueCommits(through issuer: (@Sendable (CommitOrder) -> String?)?) {
        pipeline.issueCommits(through: issuer)
    }

    public func commitAnswered(_ order: CommitOrder, failure: String?) {
        carryOut(pipeline.handle { $0.commitAnswered(order, failure: failure, now: .now) })
        if let failure {
            logCommitFailure(failure)
        } else {
            statistics.commits.add(1, ordering: .relaxed)
        }
    }

    // MARK: Carrying out

    /// Carries out what the pipeline asked for besides resuming workers and pauses: unwritten
    /// dead letters, counts, logs.
    func carryOut(_ actions: Actions) {
        if actions.staleFixes > 0 { statistics.recordFinished(.stale, count: actions.staleFixes) }
        for letter in actions.lettersNotWritten { keepUnwritten(letter) }
        if let change = actions.pause { logPause(change) }
        if let failing = actions.vehiclesFailing { statistics.vehiclesRetrying.record(failing) }
        if actions.burstDrained {
            let took = ContinuousClock().measure(releaseFreedMemory)
            logger.debug("A burst of records drained: freed memory handed back to the system in \(took)")
        }
    }

    /// What an attempt's end changed: refused records, outages and the adaptive limit.
    private func carryOut(_ aftermath: AttemptAftermath) {
        if aftermath.refusedRecords > 0 { statistics.refused.add(aftermath.refusedRecords, ordering: .relaxed) }
        if let outage = aftermath.outage { health.recordFleetEngineOutage(outage) }
        if let limit = aftermath.concurrencyLimit { concurrencyGauge.record(limit) }
        if let change = aftermath.overload { logOverload(change) }
        if let rate = aftermath.learnedRate { learnedRateGauge.record(rate) }
        if let change = aftermath.pacing { logPacing(change) }
    }

    private func logCommitFailure(_ failure: String) {
        logLimiter.warning("commit failed", to: logger, "Offset commit failed, committing again later: \(failure)")
    }

    private func logOverload(_ change: ConcurrencyLimit.Change) {
        switch change {
        case .overloadBegan(let limit, let cause):
            logger.warning("Fleet Engine is overloaded (\(cause)): requests in flight limited to \(limit), adapting to what it sustains")
        case .overloadEnded(let lasted, let limit):
            logger.notice("Fleet Engine overload ended after \(Int(lasted.inSeconds.rounded())) s; requests in flight limited to \(limit), growing while answers stay fast")
        }
    }

    private func logPacing(_ change: LearnedRate.Change) {
        switch change {
        case .began(let rate):
            logger.warning("Fleet Engine is throttling the project (http_429): pacing requests at \(Int(rate.rounded()))/s, learnt from what it admits (fleet_relay_learned_request_rate)")
        case .ended(let lasted):
            logger.notice("Fleet Engine throttling ended after \(Int(lasted.inSeconds.rounded())) s: no 429 and no request held back for 10 s; requests are no longer paced")
        }
    }

    /// Fetching pauses for each partition holding its share of `maximumPendingRecords`
    /// unfinished records, and resumes once half of that finished (decided by the pipeline,
    /// which hands the wish to the consumer).
    private func logPause(_ change: PauseChange) {
        if !change.pausing.isEmpty, !change.recordsWait {
            logger.info("Pausing \(change.pausing.map(\.description).joined(separator: ", ")): at least \(change.share) records unfinished each")
        }
        if !change.resuming.isEmpty { logger.info("Resuming \(change.resuming.map(\.description).joined(separator: ", "))") }
    }

    /// No dead-letter topic takes the letter: its record stays unfinished, for a resumed run.
    private func keepUnwritten(_ letter: DeadLetterOrder) {
        statistics.recordFailed()
        logLimiter.warning("failed", to: logger, "Not sent, kept for a resumed run: \(letter.source.description) (\(letter.reason)): \(letter.detail)")
    }

    // MARK: Running

    /// The state machine's deadlines: deferred vehicles, commits, forgetting idle vehicles; until
    /// cancelled. The timer runs on one connection's event loop, where what it releases starts.
    public func runDeadlines() async {
        let executor = forwarder.client.connectionExecutors[0]
        await withTaskExecutorPreference(executor) { await runDeadlines(on: executor.eventLoop) }
    }

    private func runDeadlines(on loop: any EventLoop) async {
        await pipeline.runDeadlines(on: loop) { actions, commit in
            carryOut(actions)
            if let failure = commit.failure { logCommitFailure(failure) }
        }
    }

    /// Sending and dead-lettering, until no more requests will come and every dead letter is
    /// written (the workers wait for the state to say both).
    public func process() async {
        // Cancelled (a shutdown out of time): dead letters still outstanding hold the workers no longer.
        await withTaskCancellationHandler {
            await processUntilDone()
        } onCancel: {
            carryOut(pipeline.handle { $0.giveUpDeadLetters(now: .now) })
        }
    }

    private func processUntilDone() async {
        await withDiscardingTaskGroup { group in
            if let deadLetters { group.addTask { await self.writeLetters(through: deadLetters) } }
            // Each worker is a request slot on one event loop, with a task preferring that loop:
            // a request is written and its answer read on the same thread, which starts the next.
            let executors = forwarder.client.connectionExecutors
            for index in 0..<maximumInFlight {
                let executor = executors[index % executors.count]
                let slot = RequestSlot(loop: executor.eventLoop, driver: self)
                group.addTask(executorPreference: executor) { await self.work(in: slot) }
            }
        }
    }

    /// The letter writers: each takes the pipeline's next letter, makes one attempt at it and
    /// reports the outcome, until no more letters will come.
    /// - The producer is built when the first letter comes, not before: an idle librdkafka
    ///   client still wakes its main thread a few times a second (about 0.9 ms of CPU a second
    ///   in the warm bench), and most relays never dead-letter a record.
    /// - A producer that cannot be built leaves every letter unwritten: readiness names the
    ///   topic, and the records stay uncommitted.
    private func writeLetters(through writer: DeadLetterWriter) async {
        guard let first = await pipeline.nextLetter(whenReady: carryOut) else { return }
        do {
            try await writer.run { write in
                await withDiscardingTaskGroup { writers in
                    writers.addTask {
                        await self.writeLetter(first, with: write)
                        await self.writeLetters(with: write)
                    }
                    for _ in 1..<DeadLetterWriter.maximumInFlight {
                        writers.addTask { await self.writeLetters(with: write) }
                    }
                }
            }
        } catch {
            carryOut(pipeline.handle { $0.deadLetterFailed(first, now: .now) })
            _ = health.recordDeadLetterFailure(topic: writer.topic, reason: error.codeName ?? "producer_failed", permanent: true)
            logger.error("Dead-letter topic \(writer.topic) cannot be written: \(error); records to dead-letter stay uncommitted")
        }
    }

    private func writeLetters(with write: DeadLetterWriter.Write) async {
        while let letter = await pipeline.nextLetter(whenReady: carryOut) { await writeLetter(letter, with: write) }
    }

    /// One attempt at a letter, its outcome reported to the pipeline's state.
    private func writeLetter(_ letter: DeadLetterOrder, with write: DeadLetterWriter.Write) async {
        if await write(letter) {
            statistics.recordDeadLetter(reason: letter.reason)
            carryOut(pipeline.handle { $0.deadLetterWritten(letter.source, now: .now) })
        } else {
            carryOut(pipeline.handle { $0.deadLetterFailed(letter, now: .now) })
        }
    }

    /// One worker's task: attempts what its slot cannot start at once, until no more requests
    /// will come. It never waits to retry: a failed attempt makes its vehicle due later and the
    /// slot takes the next vehicle at once.
    private func work(in slot: RequestSlot) async {
        while case .attempt(let request, let refused, let resent) = await slot.nextTaskWork() {
            // A refused token means the slot's attempt already went past the live read.
            let checkLive = readsLiveLocation(before: request) && refused == nil
            let delivery = await forwarder.deliver(request.update, checkLiveLocation: checkLive, revocations: request.revocations,
                                                   afterRefusal: refused, resent: resent)
            finish(request, delivery)
        }
    }

    /// Whether a request can start without waiting on anything but Fleet Engine's answer: no
    /// live location to read first, and its partitions not being revoked.
    func startsAtOnce(_ request: CoalescedRequest) -> Bool {
        !readsLiveLocation(before: request) && !request.revocations.contains { $0.isSet }
    }

    /// Whether the vehicle's live location is read before the request is sent.
    private func readsLiveLocation(before request: CoalescedRequest) -> Bool {
        readsLiveLocation && request.liveCheckEpoch != nil
    }

    /// An attempt ended: the state hears it, and what that changed is carried out and counted.
    /// `next`, the slot that made the attempt, is handed its next request as `requestWork` would.
    func finish(_ request: CoalescedRequest, _ delivery: Delivery, thenServe next: RequestSlot? = nil) {
        statistics.requestEnded()
        let (actions, aftermath) = pipeline.handle { $0.complete(request, delivery, now: .now, thenServe: next.map(PipelineWaiter.slot)) }
        carryOut(actions)
        carryOut(aftermath)
        count(request, delivery, retriesExhausted: aftermath.retriesExhausted)
    }

    private func count(_ request: CoalescedRequest, _ delivery: Delivery, retriesExhausted: String?) {
        if delivery.requestsAdmitted > 0 { admittedRequests.increment(by: Int64(delivery.requestsAdmitted)) }
        switch delivery.outcome {
        case .accepted:
            statistics.recordFinished(.accepted)
            statistics.recordFinished(.superseded, count: request.carried.count - delivery.pastLocationsOlderThanLive)
            statistics.recordFinished(.stale, count: delivery.pastLocationsOlderThanLive)
            statistics.recordAccepted(recordedAtMilliseconds: request.update.lastLocation.recordedAtMilliseconds,
                                      coalesced: request.sources.count)
        case .stale:
            statistics.recordFinished(.stale, count: request.sources.count)
        case .rejected(let reason, let detail):
            logLimiter.warning("rejected", to: logger, "Fleet Engine rejected \(request.update.vehicle) (\(reason)): \(detail)")
        case .retry(let failure):
            if failure.isThrottle {
                throttledAnswers.increment()
                throttledRequests.increment()
            }
            if let retriesExhausted {
                logLimiter.warning("rejected", to: logger, "Gave up on \(request.update.vehicle) (\(DeadLetterReason.retryDeadlineExceeded)): \(retriesExhausted)")
            }
        case .abandoned:
            break
        }
    }
}
