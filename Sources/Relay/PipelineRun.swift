import FleetAuth
import Kafka
import Logging
import ServiceLifecycle
import Synchronization

/// Where a pipeline run's records come from: the consumer group's member, or a replay's window
/// reader. A feed applies the pipeline's pause wish and nothing else: pausing is the
/// pipeline's to decide.
public protocol RecordFeed: Sendable {
    /// What the feed runs beside the reading (the consumer's poll thread), until `close`.
    func run() async throws
    /// Hands each chunk read to `take`, one at a time, until the input ends or the task is
    /// cancelled. The chunk is handed over, not lent: decoding moves each record's bytes into
    /// what it becomes, which a chunk still held here would make a copy of the whole chunk
    /// (a retain and a release per record's topic, key, value and headers).
    func read(into take: @Sendable (consuming [KafkaRecord]) async throws -> Void) async throws
    /// The pipeline's pause wish, numbered: a feed applies a wish only when it is newer than the
    /// last it applied (wishes leave the state's lock and may arrive out of order).
    func applyPauseWish(_ wish: Set<TopicPartition>, sequence: UInt64)
    /// Ends `run`. A group member leaves its group, and its revoke commits what finished.
    func close() async
}

extension RecordFeed {
    /// A feed with nothing to run beside the reading (a replay's window reader).
    public func run() async throws {}
    public func close() async {}
}

/// Where a pipeline run's commit orders go: the group's committed offsets, or a replay's
/// checkpoint file.
public protocol CommitSink: Sendable {
    /// Takes an order without blocking, and without answering before it returned: the answer
    /// goes to `answer` (nil: committed). Returns why when the order is refused at once.
    func submit(_ order: CommitOrder, answer: @escaping @Sendable (_ failure: String?) -> Void) -> String?
    /// Serves the orders taken (a checkpoint's writes), until `finish`.
    func run() async
    /// No more orders will come.
    func finish()
}

extension CommitSink {
    /// A sink whose orders are served elsewhere (the consumer's poll thread answers commits).
    public func run() async {}
    public func finish() {}
}

/// One run of the pipeline, the live relay's and a replay's alike: records from a feed,
/// decoded, into the state machine; its requests through the driver's workers; its pause
/// wishes to the feed and its commit orders to a sink. Reading stops when the input ends or at
/// graceful shutdown. At the input's end whatever was read goes out; at shutdown, intake
/// closes and the work under way gets up to `shutdownTimeout` to end.
public final class PipelineRun: Sendable {
    /// How a run ended.
    public enum Ending: Sendable, Equatable {
        /// The feed's input ended and everything read was finished (or failed for good).
        case inputEnded
        /// Graceful shutdown, cancellation or a failed read stopped it; what was queued stays
        /// unfinished. `abandoned`: work was still under way when the shutdown timeout came.
        case stopped(abandoned: Bool)
    }

    /// Where a run stands; the one value that says whether it still reads, drains, or ended.
    public enum Phase: UInt8, AtomicRepresentable, Sendable {
        case reading
        /// Reading stopped; what is under way finishes (or, at the input's end, what was read).
        case finishing
        /// The workers stopped: nothing is under way any more, or what is was abandoned.
        case ended
    }

    public let driver: PipelineDriver
    let decoding: RecordDecoding
    private let tokens: TokenCache?
    private let health: RelayHealth
    private let shutdownTimeout: Duration
    private let logger: Logger
    private let currentPhase = Atomic<Phase>(.reading)

    /// - Parameter tokens: the token cache whose refreshes run beside the run (none: a dry run).
    public init(driver: PipelineDriver, decoding: RecordDecoding, tokens: TokenCache?, health: RelayHealth,
                shutdownTimeout: Duration, logger: Logger) {
        self.driver = driver
        self.decoding = decoding
        self.tokens = tokens
        self.health = health
        self.shutdownTimeout = shutdownTimeout
        self.logger = logger
    }

    public var phase: Phase { currentPhase.load(ordering: .relaxed) }

    /// Runs until the input ended and everything read finished, or until stopped (graceful
    /// shutdown, cancellation). A failed read stops the run like a shutdown, then is thrown;
    /// so is a feed that fails to run.
    public func run(feed: some RecordFeed, commits: some CommitSink) async throws -> Ending {
        let driver = self.driver
        driver.issueCommits { order in
            commits.submit(order) { failure in driver.commitAnswered(order, failure: failure) }
        }
        driver.applyPauses(through: feed.applyPauseWish)
        var outcome: Result<Ending, any Error> = .success(.inputEnded)
        try await withThrowingDiscardingTaskGroup { clients in
            clients.addTask { try await feed.run() }
            clients.addTask { await commits.run() }
            outcome = await process(feed)
            // What remains to commit goes through the feed's own leaving (a group member's
            // revoke), or into the checkpoint saved after the run.
            driver.issueCommits(through: nil)
            driver.applyPauses(through: nil)
            await feed.close()
            commits.finish()
        }
        return try outcome.get()
    }

    /// What ends a wait of the run for its work.
    private enum WorkEvent: Sendable {
        /// The workers ended: nothing is under way and no more requests will come.
        case processed
        case gracefulShutdown
        case shutdownTimeout
        /// The run's task was cancelled: nothing is waited for.
        case cancelled
    }

    private func process(_ feed: some RecordFeed) async -> Result<Ending, any Error> {
        await withDiscardingTaskGroup { background in
            background.addTask { await self.driver.runDeadlines() }
            if let tokens { background.addTask { await tokens.runRefreshes() } }
            defer {
                currentPhase.store(.ended, ordering: .relaxed)
                background.cancelAll()
            }
            return await withTaskGroup(of: WorkEvent.self) { work -> Result<Ending, any Error> in
                work.addTask {
                    await self.driver.process()
                    return .processed
                }
                // Intake runs on the first connection's event loop: the workers it hands requests
                // to there start without a thread's wakeup, and no pool thread wakes per chunk.
                let intakeLoop = driver.forwarder.client.connectionExecutors[0]
                let read = await withTaskExecutorPreference(intakeLoop) { await readUntilStopped(feed) }
                currentPhase.store(.finishing, ordering: .relaxed)
                if case .success(true) = read, await finishInput(&work) { return .success(.inputEnded) }
                if case .failure = read {  // the error itself is reported where it is thrown to
                    logger.warning("Reading records failed: finishing in-flight work for up to \(shutdownTimeout)")
                } else {
                    logger.info("Shutting down: finishing in-flight work for up to \(shutdownTimeout)")
                }
                let abandoned = await drain(&work)
                return read.map { _ in .stopped(abandoned: abandoned) }
            }
        }
    }

    /// Reads until the input ends (true) or graceful shutdown or cancellation stops the reading
    /// (false). Graceful shutdown cancels the whole reading, not only the wait for the next
    /// chunk: a chunk waiting out a registry outage stops waiting too, and stays unregistered
    /// (uncommitted).
    private func readUntilStopped(_ feed: some RecordFeed) async -> Result<Bool, any Error> {
        let (driver, decoding, health) = (self.driver, self.decoding, self.health)
        do {
            return .success(try await cancelWhenGracefulShutdown {
                try await feed.read { (chunk: consuming [KafkaRecord]) in
                    health.recordRecordsConsumed()
                    driver.consume(try await decoding.decode(consume chunk, waiting: driver.recordsWaitForSchemaRegistry))
                }
                return !Task.isCancelled
            })
        } catch is CancellationError {
            return .success(false)
        } catch {
            return .failure(error)
        }
    }

    /// The input ended: vehicles holding less than a full request are sent, and the workers end
    /// once everything read finished. Returns false when graceful shutdown (or cancellation)
    /// came first.
    private func finishInput(_ work: inout TaskGroup<WorkEvent>) async -> Bool {
        driver.endInput()
        work.addTask {
            try? await gracefulShutdown()  // without a service group: until cancelled
            return .gracefulShutdown
        }
        guard case .processed = await work.next() else { return false }
        work.cancelAll()
        return true
    }

    /// Stops intake and waits for the requests and dead-letter writes already under way, up to
    /// the shutdown timeout. Queued records stay uncommitted: the next owner of their
    /// partitions reads them again. Returns whether work was abandoned.
    private func drain(_ work: inout TaskGroup<WorkEvent>) async -> Bool {
        driver.closeIntake()  // pauses every partition
        let timeout = shutdownTimeout
        work.addTask {
            do {
                try await Task.sleep(for: timeout)
                return .shutdownTimeout
            } catch {
                return .cancelled
            }
        }
        defer { work.cancelAll() }
        while let event = await work.next() {
            switch event {
            case .processed: return false
            case .gracefulShutdown: continue
            case .shutdownTimeout:
                logger.warning("Shutdown timeout reached: abandoning unfinished work (it stays uncommitted)")
                return true
            case .cancelled:
                return true
            }
        }
        return false
    }
}
