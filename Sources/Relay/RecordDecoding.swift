import InputFormats
import Kafka
import Logging
import Metrics
import Synchronization

/// Consumed records into what the pipeline takes: fixes, bad records (dead-lettered with their
/// reason) and records left out (by a skip rule of the input mapping, or stamped outside a
/// replay's time window). Framed records wait for their schema through a registry outage.
public struct RecordDecoding: Sendable {
    let decoder: any RecordDecoder
    let statistics: RelayStatistics
    let logLimiter: LogLimiter
    let logger: Logger
    /// Records stamped outside are left out unsent (a replay's time window); nil: none is.
    public var timeWindow: TimeWindow?
    /// False: a bad record is counted and left out, not dead-lettered (a replay without a
    /// dead-letter topic: sending it again cannot help).
    public var deadLettersBadRecords = true
    /// Bad records by reason, when the run counts them apart from their dead letters (a replay).
    public var badRecordCounters: [RejectionReason: Counter] = [:]
    /// What became of the records decoded, for a replay's summary.
    public let counts = DecodingCounts()

    public init(decoder: any RecordDecoder, statistics: RelayStatistics, logLimiter: LogLimiter, logger: Logger) {
        self.decoder = decoder
        self.statistics = statistics
        self.logLimiter = logLimiter
        self.logger = logger
    }

    /// Throws only when cancelled while the registry is unavailable: the chunk stays uncommitted.
    /// `waiting` hears when the chunk begins to wait for the registry (its reason) and when it
    /// no longer does (nil), so that the pipeline pauses fetching meanwhile.
    public func decode(_ chunk: consuming [KafkaRecord], waiting: (String?) -> Void) async throws -> [ConsumedRecord] {
        if decoder.preparesRecords {
            try await decoder.prepare(chunk.map(InputRecord.init), waiting: waiting, unavailable: noteRegistryUnavailable)
        }
        // Taken off the end of the reversed chunk, in order: each record's topic and bytes move
        // into its source instead of being copied (retained) there and released again with the
        // chunk. The decoder's input holds the bytes apart, for as long as the record is decoded.
        var consumed: [ConsumedRecord] = []
        consumed.reserveCapacity(chunk.count)
        chunk.withUnsafeMutableBufferPointer { $0.reverse() }
        while let record = chunk.popLast() { consumed.append(decode(record)) }
        return consumed
    }

    /// The record's bytes move into the decoder's input and from there into the source. Copying
    /// the record for each retained its key, value and headers (memory the poll thread had just
    /// written) and released them again after decoding.
    private func decode(_ record: consuming KafkaRecord) -> ConsumedRecord {
        let site = RecordSite(record)
        let input = InputRecord(consume record)
        if let timeWindow, !timeWindow.contains(input.timestampMilliseconds) {
            counts.outsideWindow.add(1, ordering: .relaxed)
            return .skipped(RecordSource(site, input))
        }
        let outcome = decoder.decode(input)
        let source = RecordSource(site, input)
        switch outcome {
        case .update(let update): return .fix(PendingFix(update: update, source: source))
        case .rejected(let rejection): return noteBad(source, rejection)
        case .skipped(let rule): return noteSkipped(source, rule: rule)
        }
    }

    private func noteRegistryUnavailable(_ problem: SchemaRegistryUnavailable) {
        statistics.schemaRegistryErrors.increment()
        logLimiter.warning("schema registry", to: logger, "\(problem); records wait and are retried")
    }

    private func noteBad(_ source: RecordSource, _ rejection: Rejection) -> ConsumedRecord {
        counts.bad.add(1, ordering: .relaxed)
        badRecordCounters[rejection.reason]?.increment()
        guard deadLettersBadRecords else { return .skipped(source) }
        return .bad(source, reason: rejection.reason, detail: rejection.detail)
    }

    /// The first record each skip rule leaves out is logged, so that an operator sees a rule at work.
    private func noteSkipped(_ source: RecordSource, rule: String) -> ConsumedRecord {
        counts.skipped.add(1, ordering: .relaxed)
        if logLimiter.allow("skipped: " + rule).allowed {
            logger.info("Skipping \(source.description): \(rule) (the input mapping's skip rule; committed, not sent)")
        }
        return .skipped(source)
    }
}

/// Records decoded, by what became of them besides fixes.
public final class DecodingCounts: Sendable {
    /// Stamped outside the time window.
    public let outsideWindow = Atomic<Int>(0)
    /// Left out by the input mapping's skip rules.
    public let skipped = Atomic<Int>(0)
    /// Refused by the input format (dead-lettered, or only counted).
    public let bad = Atomic<Int>(0)
}

/// A replay's times: records stamped outside are read but not sent.
public struct TimeWindow: Sendable {
    public let from: Int64
    /// Exclusive; nil: no end.
    public let to: Int64?

    public init(from: Int64, to: Int64?) {
        self.from = from
        self.to = to
    }

    public func contains(_ timestamp: Int64?) -> Bool {
        guard let timestamp else { return true }
        return timestamp >= from && timestamp < (to ?? .max)
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
