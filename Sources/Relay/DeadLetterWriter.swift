import Kafka
import Logging

/// Writes rejected records to the dead-letter topic, value and key unchanged,
/// with the fleet-relay-error, -detail and -source headers. A record counts as
/// finished only once the broker acknowledged its dead letter; failed writes are
/// retried with capped backoff until they succeed or shutdown abandons them (then
/// they stay uncommitted). A permanent refusal (topic missing, not authorized,
/// record too large) is logged once with its reason and turns readiness off
/// naming the topic, until a write succeeds.
///
/// Threading: `submit` may be called from any task; `run` drives the writes and owns the producer's run.
public final class DeadLetterWriter: Sendable {
    public let topic: String
    private let producer: KafkaProducer
    private let retryPolicy: RetryPolicy
    private let logLimiter: LogLimiter
    private let health: RelayHealth
    private let logger: Logger
    private let letters: AsyncStream<(DeadLetterOrder, @Sendable () -> Void)>
    private let intake: AsyncStream<(DeadLetterOrder, @Sendable () -> Void)>.Continuation

    public init(topic: String, producer: KafkaProducer, retryPolicy: RetryPolicy, logLimiter: LogLimiter,
                health: RelayHealth, logger: Logger) {
        self.topic = topic
        self.health = health
        self.producer = producer
        self.retryPolicy = retryPolicy
        self.logLimiter = logLimiter
        self.logger = logger
        (letters, intake) = AsyncStream.makeStream()
    }

    /// Queues a letter; `written` runs once the broker has it.
    public func submit(_ order: DeadLetterOrder, written: @escaping @Sendable () -> Void) {
        intake.yield((order, written))
    }

    /// No more letters will be submitted; `run` returns once the queued ones are written.
    public func finishIntake() {
        intake.finish()
    }

    /// Runs the producer and writes letters until intake finished and every letter was
    /// written (or cancelled); then flushes and stops the producer.
    public func run() async {
        try? await producer.whileRunning(flushTimeout: .seconds(10)) {
            await withDiscardingTaskGroup { group in
                for await (letter, written) in letters {
                    group.addTask {
                        if await self.write(letter) { written() }
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
        var attempt = 0
        while !Task.isCancelled {
            do {
                try await producer.send(topic: topic, key: letter.source.key, value: letter.source.value, headers: headers)
                if health.recordDeadLetterWritten() {
                    logger.notice("Dead-letter topic \(topic) takes records again")
                }
                return true
            } catch {
                report(error, for: letter)
                do {
                    try await Task.sleep(for: retryPolicy.delay(attempt: attempt))
                } catch {
                    return false
                }
                attempt += 1
            }
        }
        return false
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
