import InputFormats
import Kafka
import Logging

/// Consumed records into what the pipeline takes: fixes, bad records (dead-lettered with their
/// reason) and records a mapping's skip rule leaves out. Framed records wait for their schema
/// through a registry outage.
struct RecordDecoding: Sendable {
    let decoder: any RecordDecoder
    let statistics: RelayStatistics
    let logLimiter: LogLimiter
    let logger: Logger

    /// Throws only when cancelled while the registry is unavailable: the chunk stays uncommitted.
    /// `waiting` hears when the chunk begins to wait for the registry (its reason) and when it
    /// no longer does (nil), so that the pipeline pauses fetching meanwhile.
    func decode(_ chunk: [KafkaRecord], waiting: (String?) -> Void) async throws -> [ConsumedRecord] {
        let inputs = chunk.map(InputRecord.init)
        try await decoder.prepare(inputs, waiting: waiting, unavailable: noteRegistryUnavailable)
        return zip(chunk, inputs).map { record, input -> ConsumedRecord in
            let source = RecordSource(record)
            switch decoder.decode(input) {
            case .update(let update): return .fix(PendingFix(update: update, source: source))
            case .rejected(let rejection): return .bad(source, reason: rejection.reason.rawValue, detail: rejection.detail)
            case .skipped(let rule): return noteSkipped(source, rule: rule)
            }
        }
    }

    private func noteRegistryUnavailable(_ problem: SchemaRegistryUnavailable) {
        statistics.schemaRegistryErrors.increment()
        logLimiter.warning("schema registry", to: logger, "\(problem); records wait and are retried")
    }

    /// The first record each skip rule leaves out is logged, so that an operator sees a rule at work.
    private func noteSkipped(_ source: RecordSource, rule: String) -> ConsumedRecord {
        if logLimiter.allow("skipped: " + rule).allowed {
            logger.info("Skipping \(source.description): \(rule) (the input mapping's skip rule; committed, not sent)")
        }
        return .skipped(source)
    }
}

extension RecordDecoder {
    /// `prepare`, telling `waiting` when the records begin to wait for the Schema Registry (the
    /// first failure's reason) and when they no longer do (nil, also when cancelled), so that
    /// the pipeline pauses fetching meanwhile; `unavailable` hears every failure. Returns
    /// whether they waited. The relay's and the replay's readers both take records in so.
    @discardableResult
    public func prepare(_ records: [InputRecord], waiting: (String?) -> Void,
                        unavailable: (SchemaRegistryUnavailable) -> Void) async throws -> Bool {
        var waited = false
        defer { if waited { waiting(nil) } }
        try await prepare(records) { problem in
            unavailable(problem)
            if !waited { waiting(problem.description) }
            waited = true
        }
        return waited
    }
}
