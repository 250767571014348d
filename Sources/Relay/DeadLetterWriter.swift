import Kafka
import Logging
import Synchronization

/// Writes rejected records to the dead-letter topic, value and key unchanged,
/// with the fleet-relay-error, -detail and -source headers. A record counts as
/// finished only once the broker acknowledged its dead letter. Each letter gets one
/// attempt here (librdkafka retries within it); a failed one is handed back, and the
/// pipeline's state orders it again after its backoff, so that no task sleeps for a
/// retry. A permanent refusal (topic missing, not authorized, record too large) is
/// logged once with its reason and turns readiness off naming the topic, until a
/// write succeeds.
///
/// Letters are sent in the order submitted, at most `maximumInFlight` at once: the rest wait in
/// the queue, uncommitted, and the pipeline's bound on unfinished records pauses fetching.
///
/// Threading: `submit` may be called from any task; `run` drives the writes and owns the producer's run.
public final class DeadLetterWriter: Sendable {
    /// Enough to keep a broker's produce pipeline full; librdkafka batches them.
    public static let maximumInFlight = 32

    public let topic: String
    private let producer: KafkaProducer
    private let logLimiter: LogLimiter
    private let health: RelayHealth
    private let logger: Logger
    private let letters: AsyncStream<(DeadLetterOrder, @Sendable (Bool) -> Void)>
    private let submissions: AsyncStream<(DeadLetterOrder, @Sendable (Bool) -> Void)>.Continuation
    private let submitted = Atomic(0)
    private let started = Atomic(0)
    private let ended = Atomic(0)

    /// Letters being written now; at most `maximumInFlight`.
    public var lettersInFlight: Int { started.load(ordering: .relaxed) - ended.load(ordering: .relaxed) }
    /// Writes started so far, each attempt of a letter counted.
    public var writesStarted: Int { started.load(ordering: .relaxed) }
    /// Letters submitted and not yet started.
    public var lettersQueued: Int { submitted.load(ordering: .relaxed) - started.load(ordering: .relaxed) }

    public init(topic: String, producer: KafkaProducer, logLimiter: LogLimiter, health: RelayHealth, logger: Logger) {
        self.topic = topic
        self.health = health
        self.producer = producer
        self.logLimiter = logLimiter
        self.logger = logger
        (letters, submissions) = AsyncStream.makeStream()
    }

    /// Queues a letter; `ended` runs after its attempt: true once the broker has it, false when
    /// the write failed (then it is the caller's to submit again) or was cancelled by shutdown.
    public func submit(_ order: DeadLetterOrder, ended: @escaping @Sendable (Bool) -> Void) {
        submitted.add(1, ordering: .relaxed)
        submissions.yield((order, ended))
    }

    /// No more letters will be submitted; `run` returns once the queued ones had their attempt.
    public func finishSubmissions() {
        submissions.finish()
    }

    /// Runs the producer and writes letters until submissions finished and every letter had its
    /// attempt (or was cancelled); then flushes and stops the producer.
    public func run() async {
        try? await producer.whileRunning(flushTimeout: .seconds(10)) {
            await withTaskGroup(of: Void.self) { group in
                var inFlight = 0
                for await (letter, ended) in letters {
                    if inFlight == Self.maximumInFlight {
                        await group.next()
                        inFlight -= 1
                    }
                    inFlight += 1
                    started.add(1, ordering: .relaxed)
                    group.addTask {
                        let written = await self.write(letter)
                        self.ended.add(1, ordering: .relaxed)
                        ended(written)
                    }
                }
            }
        }
    }

    private func write(_ letter: DeadLetterOrder) async -> Bool {
        let headers = [
            KafkaHeader(name: "fleet-relay-error", value: letter.reason),
            KafkaHeader(name: "fleet-relay-detail", value: letter.detail),
            KafkaHeader(name: "fleet-relay-source", value: letter.source.description),
        ]
        do {
            try await producer.send(topic: topic, key: letter.source.key, value: letter.source.value, headers: headers)
            if health.recordDeadLetterWritten() {
                logger.notice("Dead-letter topic \(topic) takes records again")
            }
            return true
        } catch {
            if !Task.isCancelled { report(error, for: letter) }
            return false
        }
    }

    private func report(_ error: any Error, for letter: DeadLetterOrder) {
        let kafkaError = error as? KafkaError
        let permanent = kafkaError?.isPermanent ?? false
        let reason = kafkaError?.codeName ?? "produce_failed"
        if health.recordDeadLetterFailure(topic: topic, reason: reason, permanent: permanent) {
            logger.error("Dead-letter topic \(topic) refuses records (\(reason)): \(error). Records wait uncommitted and are retried; /readyz reports dead_letter_topic until a write succeeds")
        }
        guard !permanent else { return }  // said once above; every retry would say it again
        logLimiter.warning("dead-letter", to: logger, "Dead letter for \(letter.source.description) not written, retrying: \(error)")
    }
}
