import Kafka
import Logging
import Synchronization

/// Writes rejected records to the dead-letter topic, value and key unchanged,
/// with the fleet-relay-error, -detail and -source headers. A record counts as
/// finished only once the broker acknowledged its dead letter. Each letter gets one
/// attempt here (librdkafka retries within it); a failed one goes back to the pipeline's
/// state, which orders it again after its backoff, so that no task sleeps for a retry. A
/// permanent refusal (topic missing, not authorized, record too large) is logged once with its
/// reason and turns readiness off naming the topic, until a write succeeds.
///
/// The writer owns the producer: `run` builds it, lends the letter writers a way to write,
/// and flushes and stops it when they end. The pipeline's driver calls `run` when its first
/// letter comes, so a relay that dead-letters nothing runs no producer. The writers pull their
/// letters from the pipeline's state, as request workers pull requests, at most
/// `maximumInFlight` of them.
public final class DeadLetterWriter: Sendable {
    /// Enough to keep a broker's produce pipeline full; librdkafka batches them.
    public static let maximumInFlight = 32

    public let topic: String
    private let producerConfiguration: KafkaConfiguration
    private let logLimiter: LogLimiter
    private let health: RelayHealth
    private let logger: Logger
    private let started = Atomic(0)
    private let ended = Atomic(0)

    /// Letters being written now.
    public var lettersInFlight: Int { started.load(ordering: .relaxed) - ended.load(ordering: .relaxed) }
    /// Writes started so far, each attempt of a letter counted.
    public var writesStarted: Int { started.load(ordering: .relaxed) }

    public init(topic: String, producerConfiguration: KafkaConfiguration, logLimiter: LogLimiter, health: RelayHealth,
                logger: Logger) {
        self.topic = topic
        self.producerConfiguration = producerConfiguration
        self.health = health
        self.logLimiter = logLimiter
        self.logger = logger
    }

    /// One attempt at a letter: true once the broker has it, false when the write failed (or
    /// was cancelled by shutdown).
    public typealias Write = @Sendable (DeadLetterOrder) async -> Bool

    /// Builds the producer and runs `writers` with `Write`; once they returned, flushes and
    /// stops the producer. Throws when the producer cannot be built.
    public func run(_ writers: (_ write: @escaping Write) async -> Void) async throws(KafkaError) {
        let producer = try KafkaProducer(configuration: producerConfiguration, logger: logger)
        try? await producer.whileRunning(flushTimeout: .seconds(10)) {
            await writers { letter in await self.write(letter, with: producer) }
        }
    }

    private func write(_ letter: DeadLetterOrder, with producer: KafkaProducer) async -> Bool {
        started.add(1, ordering: .relaxed)
        defer { ended.add(1, ordering: .relaxed) }
        let headers = [
            KafkaHeader(name: "fleet-relay-error", value: letter.reason.rawValue),
            KafkaHeader(name: "fleet-relay-detail", value: letter.detail),
            KafkaHeader(name: "fleet-relay-source", value: letter.source.description),
        ]
        do {
            try await producer.send(topic: topic, key: letter.key, value: letter.source.value, headers: headers)
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
